"""The engine process: precompute the configured tables into shared memory, publish the
manifest, build new tables on demand for readers, and clean up.

Lifecycle
- One engine per (shm_dir, namespace): it holds an exclusive ``flock`` on ``{ns}.lock`` for its
  whole life. The kernel drops the lock when the process dies, however it dies, so a new engine
  that gets the lock knows every file of the namespace is a dead engine's and reclaims it.
- SIGTERM / SIGINT: stop taking requests, unlink every segment, the manifest, socket and lock.
- Readers keep their mappings through all of this: unlinking a mapped file frees nothing until
  the last mapping goes.

On-demand builds: readers send ``{"op": "ensure", "table": KEY}`` as one JSON line over the Unix
socket ``{ns}.sock``, where KEY is the canonical key of the table their request planned
(``TableDef.key``); the engine re-validates it (``TableDef.from_key``) and builds it. Concurrent asks
for one new table wait on a single build.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import fcntl
import json
import logging
import os
import signal
import socketserver
import sys
import threading
import time

from . import logs, settings, store
from .config import ConfiguredTable, load_config
from .engine_stats import BuildStats
from .errors import EngineRunning, NotStored, SpecError
from .tables import TableDef
from .tables.base import DEFAULT_LENGTH


_log = logging.getLogger("posenc.engine")


def log(msg: str) -> None:
    """One line on stderr: ``posenc engine[PID]: msg``, or JSON (the log_format setting; engine/logs.py)."""
    _log.info(msg)


@dataclasses.dataclass
class EngineOptions:
    shm_dir: str = "/dev/shm"
    namespace: str = "posenc"
    memory_budget_bytes: int = 2 * 2**30
    length: int = DEFAULT_LENGTH
    group: str | None = None


class Engine:
    def __init__(self, tables: list[ConfiguredTable], opts: EngineOptions):
        self.opts = opts
        store.check_namespace(opts.namespace)
        self.configured = tables
        self.mode, self.gid = 0o600, None
        if opts.group is not None:
            import grp
            self.gid = grp.getgrnam(opts.group).gr_gid if not opts.group.isdigit() else int(opts.group)
            self.mode = 0o640
        self.lock = threading.Lock()
        self.stats = BuildStats()   # builds and evictions, in the manifest (engine/engine_stats.py)
        self.tables: dict[str, dict] = {}
        self.inflight: dict[str, threading.Event] = {}
        self.build_errors: dict[str, BaseException] = {}
        self.builds: dict[str, int] = {}
        self.generation = 0
        self._lock_fd = None
        self._server = None
        self.published = False  # no manifest until every configured table is built

    # -- paths ------------------------------------------------------------------------------
    def _p(self, fn):
        return fn(self.opts.shm_dir, self.opts.namespace)

    # -- start --------------------------------------------------------------------------------
    def acquire(self) -> None:
        os.makedirs(self.opts.shm_dir, exist_ok=True)
        fd = os.open(self._p(store.lock_path), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = (store.read_manifest(self.opts.shm_dir, self.opts.namespace) or {}).get("pid", "?")
            raise EngineRunning(f"an engine (pid {holder}) already serves namespace {self.opts.namespace!r} "
                                f"in {self.opts.shm_dir}") from None
        self._lock_fd = fd
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        reclaimed = [p for p in self._p(store.our_files) if p != self._p(store.lock_path)]
        for p in reclaimed:
            store.unlink(p)
        if reclaimed:
            log(f"reclaimed {len(reclaimed)} file(s) left by a dead engine")
        # Generations only grow, also across restarts: readers compare them.
        self.generation = time.time_ns() // 1000

    def build_configured(self) -> None:
        t0 = time.perf_counter()
        for ct in self.configured:
            self._build(ct.table, pinned=True, name=ct.name, spec=ct.spec)
        total = sum(e["nbytes"] for e in self.tables.values())
        log(f"generation {self.generation}: {len(self.tables)} tables, {total / 2**20:.1f} MiB "
            f"in {time.perf_counter() - t0:.2f}s")

    def _build(self, t: TableDef, pinned: bool, name: str | None = None, spec: dict | None = None) -> dict:
        t0 = time.perf_counter()
        path = store.segment_path(self.opts.shm_dir, self.opts.namespace, self.generation, t.digest)
        info = store.create_segment(path, t.layout(), t.fill, self.mode, self.gid)
        entry = {"key": t.key, "family": t.family, "dtype": t.dtype, "length": t.length,
                 "file": os.path.basename(path), "pinned": pinned, "name": name or t.family,
                 "built_s": round(time.perf_counter() - t0, 4),
                 "last_used": time.time(), **info}
        if spec is not None:   # a configured table: requests may name it ({"table": name})
            entry["spec"] = spec
        with self.lock:
            if not pinned:
                self._evict_for(entry["nbytes"])
            self.tables[t.digest] = entry
            self.builds[t.digest] = self.builds.get(t.digest, 0) + 1
            if self.published:
                self._write_manifest()
        return entry

    def publish(self) -> None:
        """The first manifest, written last: after every configured table is built and the socket
        is up, so a reader never sees a half-ready engine nor asks it to build a configured table."""
        with self.lock:
            self.published = True
            self._write_manifest()

    def _evict_for(self, nbytes: int) -> None:
        """Drop least-recently-asked unpinned tables until nbytes fits the budget. Readers that
        mapped an evicted table keep it (unlink frees nothing while it is mapped)."""
        used = sum(e["nbytes"] for e in self.tables.values() if not e["pinned"])
        victims = sorted((e["last_used"], d) for d, e in self.tables.items() if not e["pinned"])
        while used + nbytes > self.opts.memory_budget_bytes and victims:
            _, digest = victims.pop(0)
            e = self.tables.pop(digest)
            used -= e["nbytes"]
            self._write_manifest()
            store.unlink(os.path.join(self.opts.shm_dir, e["file"]))
            log(f"evicted {e['name']} ({e['nbytes'] / 2**20:.1f} MiB) to stay within the memory budget")

    def _write_manifest(self) -> None:
        from . import kernels_info
        store.write_manifest(self.opts.shm_dir, self.opts.namespace, {
            "format": store.MANIFEST_FORMAT, "namespace": self.opts.namespace, "pid": os.getpid(),
            "generation": self.generation, "socket": os.path.basename(self._p(store.socket_path)),
            "backend": kernels_info(), "tables": self.tables, "budget": self.opts.memory_budget_bytes,
            "stats": self.stats.update(self.tables)}, self.mode, self.gid)

    # -- on demand ------------------------------------------------------------------------------
    def ensure(self, key) -> str:
        if not isinstance(key, str):
            raise SpecError(("table",), "must be a table key (a string)")
        t = TableDef.from_key(key, self.opts.length)
        with self.lock:
            if t.digest in self.tables:
                self.tables[t.digest]["last_used"] = time.time()
                return t.digest
            ev = self.inflight.get(t.digest)
            builder = ev is None
            if builder:
                ev = self.inflight[t.digest] = threading.Event()
        if builder:
            try:
                if t.nbytes() > self.opts.memory_budget_bytes:
                    raise NotStored(f"table of {t.nbytes()} bytes exceeds the engine's memory budget "
                                    f"({self.opts.memory_budget_bytes} bytes)")
                self._build(t, pinned=False)
                log(f"built on demand: {t.key} ({t.nbytes() / 2**20:.1f} MiB)")
            except BaseException as e:
                self.build_errors[t.digest] = e
                raise
            finally:
                with self.lock:
                    self.inflight.pop(t.digest, None)
                ev.set()
        else:
            ev.wait()
            if t.digest not in self.tables:
                raise self.build_errors.get(t.digest) or RuntimeError("build failed")
        return t.digest

    def handle(self, msg: dict) -> dict:
        op = msg.get("op")
        if op == "ping":
            return {"ok": True, "pid": os.getpid(), "generation": self.generation}
        if op == "stats":
            with self.lock:
                return {"ok": True, "builds": dict(self.builds), "generation": self.generation,
                        "tables": len(self.tables)}
        if op == "ensure":
            try:
                digest = self.ensure(msg.get("table"))
                return {"ok": True, "digest": digest, "generation": self.generation}
            except SpecError as e:
                return {"ok": False, "status": 422, "error": str(e), "loc": list(e.loc), "msg": e.msg}
            except NotStored as e:
                return {"ok": False, "status": NotStored.status, "error": str(e)}
        return {"ok": False, "status": 400, "error": f"unknown op {op!r}"}

    def serve(self) -> None:
        engine = self
        path = self._p(store.socket_path)
        store.unlink(path)

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                for line in self.rfile:
                    try:
                        reply = engine.handle(json.loads(line))
                    except Exception as e:  # a bad message must not take the engine down
                        reply = {"ok": False, "status": 500, "error": f"{type(e).__name__}: {e}"}
                    self.wfile.write(json.dumps(reply).encode() + b"\n")
                    self.wfile.flush()

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        old = os.umask(0o177 if self.gid is None else 0o117)
        try:
            self._server = Server(path, Handler)
        finally:
            os.umask(old)
        if self.gid is not None:
            os.chown(path, -1, self.gid)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                         daemon=True, name="posenc-socket").start()

    # -- stop -----------------------------------------------------------------------------------
    def shutdown(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for p in self._p(store.our_files):
            if p != self._p(store.lock_path):
                store.unlink(p)
        if self._lock_fd is not None:
            store.unlink(self._p(store.lock_path))
            os.close(self._lock_fd)
            self._lock_fd = None
        log("stopped; shared memory removed")


def exit_with_parent() -> None:
    """Linux: get SIGTERM when the parent (posenc serve) dies, even by kill -9."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def run(tables_path: str | None, opts: EngineOptions, ready_fd: int | None = None, parent_watch: bool = False) -> int:
    logs.configure(settings.current().log_format, _log.name)
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if parent_watch:
        exit_with_parent()
    tables = load_config(tables_path)  # raises SpecError before anything is touched
    engine = Engine(tables, opts)
    engine.acquire()
    try:
        from . import kernels_info
        log(f"backend {kernels_info()}")
        engine.build_configured()
        engine.serve()
        engine.publish()
        if ready_fd is not None:
            os.write(ready_fd, b"ready\n")
            os.close(ready_fd)
        while not stop.wait(0.5):
            pass
    finally:
        engine.shutdown()
    return 0


def dry_run(tables_path: str | None) -> int:
    tables = load_config(tables_path)
    total = 0
    print(f"{'name':<20} {'family':<11} {'dtype':<9} {'length':>8} {'bytes':>12}")
    for ct in tables:
        t = ct.table
        nb = t.nbytes()
        total += nb
        print(f"{ct.name:<20} {t.family:<11} {str(t.dtype):<9} {t.length:>8} {nb:>12}")
    print(f"total {total} bytes ({total / 2**20:.1f} MiB) in {len(tables)} tables; "
          "add the on-demand budget (--memory-budget) to size /dev/shm")
    return 0


def add_parser(sub) -> None:
    e = sub.add_parser("engine", help="run the engine alone: precompute tables into shared memory")
    add_engine_args(e)
    e.add_argument("--dry-run", action="store_true", help="print the bytes each configured table uses and exit")
    e.set_defaults(func=_cmd_engine)


def add_engine_args(p) -> None:
    p.add_argument("--tables", help="table config JSON (default: POSENC_TABLES or the embedded set)")
    p.add_argument("--shm-dir", help="directory for segments (default /dev/shm)")
    p.add_argument("--namespace", help="segment name prefix (default posenc)")
    p.add_argument("--memory-budget", type=int, help="bytes for on-demand tables (default 2 GiB)")
    p.add_argument("--group", help="let this Unix group read the segments (mode 0640)")


def engine_options(args):
    """(settings, EngineOptions): this process's settings with the flags applied."""
    s = settings.current().override(
        tables=getattr(args, "tables", None), shm_dir=getattr(args, "shm_dir", None),
        namespace=getattr(args, "namespace", None), memory_budget_bytes=getattr(args, "memory_budget", None),
        shm_group=getattr(args, "group", None))
    return s, EngineOptions(shm_dir=s.shm_dir, namespace=s.namespace, memory_budget_bytes=s.memory_budget_bytes,
                            group=s.shm_group)


def _cmd_engine(args) -> int:
    s, opts = engine_options(args)
    if args.dry_run:
        return dry_run(s.tables)
    try:
        return run(s.tables, opts, parent_watch=False)
    except EngineRunning as e:
        log(str(e))
        return 1


def main(argv=None) -> int:
    """``python -m engine.engine_main`` (used by posenc serve): --ready-fd N reports readiness."""
    p = argparse.ArgumentParser(prog="posenc-engine")
    add_engine_args(p)
    p.add_argument("--ready-fd", type=int)
    p.add_argument("--exit-with-parent", action="store_true")
    args = p.parse_args(argv)
    s, opts = engine_options(args)
    try:
        return run(s.tables, opts, ready_fd=args.ready_fd, parent_watch=args.exit_with_parent)
    except SpecError as e:
        log(f"invalid table config: {e}")
        return 2
    except EngineRunning as e:
        log(str(e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
