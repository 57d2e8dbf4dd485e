"""``posenc serve``: the engine (a child process) plus uvicorn workers sharing its tables, and the
gRPC server processes (service/supervise/grpc_main.py) sharing them too.

Flags override ``POSENC_*`` variables (service/core/settings.py); the workers (separate processes) read
the result from the environment, where ``settings.use`` exports it. SIGTERM/SIGINT: uvicorn
drains its workers, then the engine is stopped and removes every segment (the files of an engine
that died before a successor took them over, this process removes). The engine child and
every worker also get SIGTERM if this process dies, even by SIGKILL (PR_SET_PDEATHSIG; workers set
it in the app factory). The engine is restarted if it dies while serving (its successor adopts the
tables this process keeps a descriptor of: engine/process/keeper.py) at once, and only in a crash loop
(it died before it was ready, or within a second of its start twice in a row) after a delay that
doubles while it keeps dying so.

One ``posenc serve`` per namespace: it holds ``{ns}.serve.lock`` (flock) for its life, and a
second one, or one whose port is taken, refuses before it starts or deletes anything.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import signal
import socket
import sys
import threading

from posenc.service.core.settings import CHOICES, Settings, current, use
from posenc.service.protocol import uvicorn_api
from posenc.service.supervise import options as serve_opts
from posenc.service.supervise.children import Children
from posenc.service.supervise.engine_watch import EngineChild

log = logging.getLogger(
    "posenc.serve"
)  # in the log format asked (engine/process/logs.py), once uvicorn.run starts


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="run the engine and the HTTP workers")
    p.add_argument("--host", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 8000)")
    p.add_argument("--workers", type=int, help="HTTP worker processes (default: one per core)")
    p.add_argument("--grpc-port", type=int, help="KServe v2 gRPC port (default 8001; 0: no gRPC server)")
    p.add_argument(
        "--grpc-workers",
        type=int,
        help="gRPC server processes sharing that port with SO_REUSEPORT, "
        "so that one that dies loses only its calls in flight (default 2; POSENC_GRPC_WORKERS)",
    )
    p.add_argument(
        "--grpc-lane",
        choices=CHOICES["grpc_lane"],
        help="the gRPC lane: HTTP/2 in C (libnghttp2) answers learnt ModelInfer calls, grpcio the rest "
        "(default auto: where it is built and no TLS is configured; POSENC_GRPC_LANE)",
    )
    p.add_argument(
        "--grpc-max-concurrent",
        type=int,
        help="inference calls one gRPC process answers at once "
        "(RESOURCE_EXHAUSTED beyond; default 64; POSENC_GRPC_MAX_CONCURRENT)",
    )
    p.add_argument(
        "--grpc-max-inflight-bytes",
        type=int,
        help="bytes of the answers one gRPC process builds at "
        "once (RESOURCE_EXHAUSTED beyond; default 256 MiB; POSENC_GRPC_MAX_INFLIGHT_BYTES)",
    )
    p.add_argument("--tables", help="table config JSON (default: the embedded set)")
    p.add_argument("--shm-dir", help="directory for shared memory (default /dev/shm)")
    p.add_argument("--namespace", help="segment name prefix (default posenc)")
    p.add_argument("--memory-budget", type=int, help="bytes for on-demand tables")
    p.add_argument("--max-response-bytes", type=int, help="413 above this (default 64 MiB)")
    p.add_argument(
        "--attach-only",
        action="store_true",
        help="start no engine: attach to one already running on the same shm-dir/namespace",
    )
    p.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument(
        "--lane",
        choices=CHOICES["lane"],
        help="the hot lane below ASGI for repeated binary requests (default on; POSENC_LANE)",
    )
    serve_opts.add_arguments(p)
    p.add_argument(
        "--header-timeout", type=float, help="seconds to receive a request head (408 after; default 10)"
    )
    p.add_argument(
        "--body-timeout", type=float, help="seconds to receive a request body (closed after; default 30)"
    )
    p.add_argument(
        "--max-connections", type=int, help="open connections per worker (503 beyond; default 1024)"
    )
    p.add_argument(
        "--verify-interval",
        type=float,
        help="seconds between the engine's checksum sweeps of its tables (default 60; 0: never)",
    )
    p.set_defaults(func=cmd_serve)


def protocol_for() -> str:
    """uvicorn's ``http=``: posenc's protocol (limits and lane), or uvicorn's own when this
    uvicorn lacks what that relies on (service/protocol/uvicorn_api.py; said in the log)."""
    if not uvicorn_api.SUPPORTED:
        log.warning(
            "posenc: uvicorn %s lacks what the hot lane and the connection limits need; running uvicorn's "
            "own protocol (%s)",
            uvicorn_api.VERSION,
            "; ".join(uvicorn_api.PROBLEMS),
        )
        return "httptools"
    return f"{uvicorn_api.__name__}:{uvicorn_api.Protocol.__name__}"


def settings_from_args(args) -> Settings:
    return current().override(
        host=args.host,
        port=args.port,
        workers=args.workers,
        tables=args.tables,
        grpc_port=args.grpc_port,
        grpc_workers=args.grpc_workers,
        grpc_lane=args.grpc_lane,
        grpc_max_concurrent=args.grpc_max_concurrent,
        grpc_max_inflight_bytes=args.grpc_max_inflight_bytes,
        shm_dir=args.shm_dir,
        namespace=args.namespace,
        memory_budget_bytes=args.memory_budget,
        max_response_bytes=args.max_response_bytes,
        log_level=args.log_level,
        lane=args.lane,
        header_timeout_s=args.header_timeout,
        body_timeout_s=args.body_timeout,
        max_connections=args.max_connections,
        verify_interval_s=args.verify_interval,
        **serve_opts.overrides(args),
    )


def claim(s: Settings) -> int:
    """This server's hold on its namespace and port, taken before anything is started or
    removed: the lock's descriptor. Exits (status 1) when another server holds the namespace or
    the port is taken."""
    path = os.path.join(s.shm_dir, f"{s.namespace}.serve.lock")
    try:
        os.makedirs(s.shm_dir, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        raise SystemExit(
            f"posenc serve: cannot use {s.shm_dir} for shared memory ({e.strerror}); choose "
            "another directory with --shm-dir; not starting"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise SystemExit(
            f"posenc serve: another server (pid {holder}) serves namespace {s.namespace!r} "
            f"in {s.shm_dir}; not starting"
        ) from None
    for port, flag in ((s.port, "--port"), (s.grpc_port, "--grpc-port")):
        try:
            with socket.socket(socket.AF_INET6 if ":" in s.host else socket.AF_INET) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind((s.host, port))
        except OSError as e:
            os.unlink(path)  # ours: we hold its lock
            os.close(fd)
            what = "gRPC " if flag == "--grpc-port" else ""
            if e.errno == errno.EADDRINUSE:
                why = f"is in use; choose another with {flag}{' (or 0: no gRPC server)' if what else ''}"
            else:
                why = f"cannot be bound ({e.strerror}); check --host"
            raise SystemExit(f"posenc serve: {what}port {s.host}:{port} {why}; not starting") from None
        if s.grpc_port == 0:
            break
    try:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
    except OSError:  # a full directory: the lock holds without the pid in it (nothing needs room)
        pass
    return fd


def release(s: Settings, fd: int) -> None:
    try:
        os.unlink(os.path.join(s.shm_dir, f"{s.namespace}.serve.lock"))
    except FileNotFoundError:
        pass
    os.close(fd)


def cmd_serve(args) -> int:
    import uvicorn

    from posenc.engine.core.errors import PosencError
    from posenc.engine.process.configured import load_config
    from posenc.service.metrics.counters import remove_all
    from posenc.service.shortcut.templates import shortcut_in_use
    from posenc.service.v2.shm import remove_registry

    s = settings_from_args(args)
    if s.tables:  # an invalid config fails here, with the field named, before anything starts
        try:
            load_config(s.tables)
        except PosencError as e:  # a refused input: status 2, as the CLI's other refusals
            print(f"posenc serve: --tables {s.tables}: {e}; not starting", file=sys.stderr)
            return e.exit_code
    shortcut_in_use(s.shortcut)  # so does POSENC_SHORTCUT=c without service._hot
    options = serve_opts.uvicorn_options(s)  # and TLS files that do not load
    held = claim(s)  # before anything of a running server could be touched
    remove_registry(s.shm_dir, s.namespace)  # what a killed server left registered is not ours
    use(s)  # the workers (and the engine) start from these settings
    # uvicorn restores the previous handlers on exit and re-raises the signal it caught; with the
    # default SIGTERM handler that would kill this process before the finally below cleans up.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    engine = None
    if not args.attach_only:
        engine = EngineChild(s)
        engine.start()
        threading.Thread(target=engine.watch, daemon=True, name="engine-watch").start()
    grpc_servers = Children(s)  # the gRPC server processes (none with --grpc-port 0)
    grpc_servers.start()
    try:
        uvicorn.run(
            "posenc.service.front.app:create_app",
            factory=True,
            host=s.host,
            port=s.port,
            workers=s.workers,
            loop="uvloop",
            http=protocol_for(),
            lifespan="on",
            log_level=s.log_level,
            timeout_keep_alive=s.keepalive_s,
            **options,
            timeout_graceful_shutdown=s.shutdown_timeout_s,
            limit_concurrency=None,
            server_header=False,
        )
    finally:
        grpc_servers.stop()
        if engine is not None:
            engine.stop()
        remove_all(s.shm_dir, s.namespace)
        remove_registry(s.shm_dir, s.namespace)
        release(s, held)
        failure = grpc_servers.failure or (engine.failure if engine is not None else None)
        if failure:  # it stopped itself: not a clean exit (status 1, the reason last)
            raise SystemExit(failure)
    return 0
