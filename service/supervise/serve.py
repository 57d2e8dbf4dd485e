"""``posenc serve``: the engine (a child process) plus uvicorn workers sharing its tables, and the
gRPC server processes (service/v2/grpc_main.py) sharing them too.

Flags override ``POSENC_*`` variables (engine/core/settings.py); the workers (separate processes) read
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
import subprocess
import sys
import threading
import time

from posenc.engine.core.settings import CHOICES, Settings, current, use
from posenc.engine.process.keeper import Keeper
from posenc.engine.store import fdpass
from posenc.engine.store import segments as store
from posenc.service.protocol import uvicorn_api
from posenc.service.supervise import options as serve_opts
from posenc.service.supervise.children import Children, terminate
from posenc.service.supervise.engine_watch import generation_of

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


FIRST_STANDBY_DELAY_S = 2.0  # the first standby waits this long after the engine is up (serve's start)
CRASH_S = 1.0  # engines dying this soon after their start twice in a row (or before ready) are a crash loop
STANDBY_CHECK_S = 0.05  # how often the watch looks at the engine and its standby (reaped at once)
MAX_BACKOFF_S = 4.0


def restart_delay(streak: int) -> float:
    """Seconds before the next engine starts, after ``streak`` crash-loop deaths in a row (0: the
    engine died after it was up, however soon after the one before: at once)."""
    return 0.0 if streak == 0 else min(MAX_BACKOFF_S, 0.5 * 2 ** (streak - 1))


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


class EngineChild:
    """The engine child, and its standby: once an engine is up (the first one: FIRST_STANDBY_DELAY_S
    after, past serve's own start), a second engine process is started with ``--standby-fd``
    (engine/process/main.py), imported and waiting; when the engine dies the standby is sent ``go``
    with a fresh keeper channel and becomes the engine (no interpreter start, no imports: about half
    a second of a restart), and a new standby is started as soon as it is up.
    Without a live standby (it died, or the first engine is not up yet) a new process starts.

    An engine is up when it says so on its ``--ready-fd`` pipe (after it published its first
    manifest, whether or not a full shm_dir let the file be written). A standby that dies is
    reaped and replaced within STANDBY_CHECK_S (at once, or after restart_delay while standbys
    keep dying within CRASH_S of their start), not left a zombie until the engine's next death."""

    def __init__(self, settings: Settings):
        self.s = settings
        self.proc: subprocess.Popen | None = None
        self.ready: int | None = None  # the read end of the engine's --ready-fd pipe
        self.standby: tuple[subprocess.Popen, socket.socket, int] | None = None  # and its pipe
        self.keeper = Keeper()  # holds every table the engine publishes, for the next engine
        self.stopping = False
        self.failure: str | None = None  # why the server stopped itself (posenc serve exits with it)
        self._standby_streak, self._standby_at, self._standby_started = 0, 0.0, 0.0

    def _cmd(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "posenc.engine.process.main",
            "--exit-with-parent",
            "--shm-dir",
            self.s.shm_dir,
            "--namespace",
            self.s.namespace,
            "--memory-budget",
            str(self.s.memory_budget_bytes),
        ]
        if self.s.tables:
            cmd += ["--tables", self.s.tables]
        if self.s.shm_group:
            cmd += ["--group", self.s.shm_group]
        return cmd

    def _spawn(self, flag: str, fd: int) -> tuple[subprocess.Popen, int]:
        """An engine process given ``flag fd`` (its keeper channel or its standby socket) and a
        ready pipe: (the process, the pipe's read end)."""
        r, w = os.pipe()
        try:
            os.set_blocking(r, False)
            proc = subprocess.Popen([*self._cmd(), flag, str(fd), "--ready-fd", str(w)], pass_fds=(fd, w))
        except BaseException:
            os.close(r)
            raise
        finally:
            os.close(w)
        return proc, r

    def start(self) -> None:
        channel = self.keeper.channel()  # (made now: it hands over what is held now)
        if self.ready is not None:
            os.close(self.ready)
            self.ready = None
        with channel:
            standby, self.standby = self.standby, None
            if standby is not None:
                proc, sock, ready = standby
                try:
                    with sock:
                        fdpass.send_packet(sock, {"op": "go"}, channel.fileno())
                    self.proc, self.ready = proc, ready
                    return
                except OSError:  # the standby died meanwhile: a new process, as without one
                    terminate(proc, 1.0)
                    os.close(ready)
            self.proc, self.ready = self._spawn("--keeper-fd", channel.fileno())

    def _is_up(self) -> bool:
        """Whether the engine said it is ready (its pipe then holds "ready"; EOF: it died first)."""
        try:
            return os.read(self.ready, 64).startswith(b"ready")
        except (BlockingIOError, OSError, TypeError):
            return False

    def _keep_standby(self) -> None:
        """Reap a standby that died (saying so) and start one where none lives, unless a standby
        crash loop's delay runs."""
        now = time.monotonic()
        if self.standby is not None:
            proc, sock, ready = self.standby
            rc = proc.poll()
            if rc is None:
                return
            self.standby = None
            sock.close()
            os.close(ready)
            lived = now - self._standby_started
            self._standby_streak = self._standby_streak + 1 if lived < CRASH_S else 0
            delay = restart_delay(self._standby_streak)
            self._standby_at = now + delay
            why = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exited with {rc}"
            log.warning("standby engine %s after %.1fs; another in %.1fs", why, lived, delay)
        if self.stopping or now < self._standby_at:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            theirs.set_inheritable(True)
            proc, ready = self._spawn("--standby-fd", theirs.fileno())
        self.standby, self._standby_started = (proc, ours, ready), now
        if self.stopping:  # stop() ran meanwhile and saw no standby: this one ends here
            self.standby = None
            ours.close()
            terminate(proc, 5.0)
            os.close(ready)

    def _run_until_exit(self, standby_delay: float, exited_at: float | None) -> tuple[int, bool]:
        """Watch the running engine until it exits: (its status, whether it was up). Once it is up
        (the restart-to-ready time logged, when ``exited_at`` is its predecessor's death) and then
        ``standby_delay`` seconds have passed (not before: a standby's imports, half a second of a
        core, would slow the engine's start, and at serve's start the workers' and the first
        requests', on a small machine), a standby is kept."""
        up_at = None
        while True:
            rc = self.proc.poll()
            if rc is not None or self.stopping:
                return rc, up_at is not None
            now = time.monotonic()
            if up_at is None and self._is_up():
                up_at = now
                if exited_at is not None:
                    log.warning(
                        "engine restarted: generation %s ready %.2f s after the previous engine exited",
                        generation_of(self.s.shm_dir, self.s.namespace),
                        now - exited_at,
                    )
            if up_at is not None and now - up_at >= standby_delay:
                self._keep_standby()
            time.sleep(STANDBY_CHECK_S)

    def watch(self) -> None:
        """Restart the engine if it dies while we serve (not while we stop), saying why each time:
        at once (its successor adopts its intact tables, so workers lose nothing), also when it is
        killed again soon after; only a crash loop (deaths before the engine was ready, or within
        CRASH_S of its start twice in a row) waits, a delay doubling from 0.5 s to 4 s."""
        streak, quick, delay, exited_at = 0, False, FIRST_STANDBY_DELAY_S, None
        while not self.stopping:
            started = time.monotonic()
            rc, was_up = self._run_until_exit(delay, exited_at)
            delay = 0.0  # after a restart at once: the next kill may come soon
            if self.stopping:
                return
            if rc == 2:  # invalid table config: restarting cannot help
                self.failure = (
                    "posenc serve: the engine refused its table config (--tables; its log above says why)"
                )
                log.error("the engine refused its table config; stopping")
                os.kill(os.getpid(), signal.SIGTERM)
                return
            exited_at = time.monotonic()
            lived = exited_at - started
            # a crash loop: it died before it was up, or soon after its start twice in a row
            streak = streak + 1 if not was_up or (lived < CRASH_S and quick) else 0
            quick = lived < CRASH_S
            wait = restart_delay(streak)
            why = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exited with {rc}"
            log.warning(
                "engine %s after %.1fs; restarting in %.1fs (its log above says why)", why, lived, wait
            )
            deadline = time.monotonic() + wait
            while not self.stopping and time.monotonic() < deadline:
                time.sleep(0.1)
            if not self.stopping:
                self.start()

    def stop(self, timeout: float = 10.0) -> None:
        self.stopping = True
        standby, self.standby = self.standby, None
        if standby is not None:
            standby[1].close()  # no go: it exits at once
            terminate(standby[0], timeout)
            os.close(standby[2])
        if self.proc:
            terminate(self.proc, timeout)
        if self.ready is not None:
            os.close(self.ready)
            self.ready = None
        # an engine killed before a successor took its files over (or one that ignored SIGTERM)
        # left its lock, manifest and socket: nobody else would remove them
        left = store.remove_dead(self.s.shm_dir, self.s.namespace)
        if left:
            log.warning("removed %d file(s) a dead engine left in %s", len(left), self.s.shm_dir)
        self.keeper.close()


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
