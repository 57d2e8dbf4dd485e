"""The engine: precompute the configured tables into shared memory, publish the manifest, build
new tables on demand for readers, and clean up (``Engine``; ``run`` is its process's life). Its
command lines are cli.py (``posenc engine``) and main.py (``posenc serve``'s child).

Lifecycle
- One engine per (shm_dir, namespace): it holds an exclusive ``flock`` on ``{ns}.lock`` for its
  whole life. The kernel drops the lock when the process dies, however it dies, so a new engine
  that gets the lock knows every file of the namespace is a dead engine's and reclaims it.
- SIGTERM / SIGINT: stop taking requests, let the builds in progress end, remove the manifest
  (head and table log), socket and lock, and close every table's descriptor. A table is a sealed
  memfd segment (engine/store/segments.py), in no directory: nothing of it is left to unlink.
- Readers keep their mappings through all of this: a segment's memory is freed when its last
  descriptor and its last mapping, the engine's and every reader's, are gone.

On-demand builds: readers send ``{"op": "ensure", "table": KEY}`` as one JSON line over the Unix
socket ``{ns}.sock`` (engine/process/socket.py), where KEY is the canonical key of the table their request planned
(``TableDef.key``); the engine re-validates it (``TableDef.from_key``) and builds it. Concurrent asks
for one new table wait on a single build.
"""

from __future__ import annotations

import dataclasses
import fcntl
import logging
import os
import signal
import threading
import time

from .. import kernels
from ..core import settings
from ..core.errors import EngineRunning, NotStored, SpecError
from ..store import fdpass
from ..store import segments as store
from ..tables import TableDef
from ..tables.base import DEFAULT_LENGTH, on_demand_length
from . import adopt, coldstart, logs, proclife, upkeep
from . import socket as engine_socket
from .configured import ConfiguredTable, load_config
from .keeper import KeeperLink
from .manifest import ManifestLog
from .stats import BuildStats

_log = logging.getLogger("posenc.engine")
FD_RESERVE = 256  # descriptors the engine keeps for its socket's connections and its files


def log(msg: str) -> None:
    """One line on stderr: ``posenc engine[PID]: msg``, or JSON (the log_format setting; engine/process/logs.py)."""
    _log.info(msg)


class _Build(threading.Event):
    """One build in flight, waited on by the concurrent asks of the same table: set when it ends,
    with ``error`` its failure (None: it built; the table may be evicted again before a waiter
    looks, which is no failure)."""

    error: BaseException | None = None


@dataclasses.dataclass
class EngineOptions:
    shm_dir: str = "/dev/shm"
    namespace: str = "posenc"
    memory_budget_bytes: int = 2 * 2**30
    length: int = DEFAULT_LENGTH  # the longest on-demand table (the config's on_demand_length)
    group: str | None = None
    verify_interval_s: float = 60.0  # full checksum sweep period (engine/process/upkeep.py); 0: never
    keeper_fd: int | None = None  # posenc serve's keeper (engine/process/keeper.py), None: no keeper


class Engine(ManifestLog):
    """One engine's tables: built, held (one sealed segment's descriptor each), evicted, built on
    demand, checked, and removed at shutdown; what it publishes of them is ManifestLog's."""

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
        self.stats = BuildStats()  # builds and evictions, in the manifest (engine/process/stats.py)
        self.tables: dict[str, dict] = {}
        self.fds: dict[str, int] = {}  # digest -> the sealed segment's descriptor
        self.keeper = KeeperLink(opts.keeper_fd)
        # one descriptor per table: at most this many, the rest kept for the socket's connections
        self.max_tables = max(16, proclife.descriptors() - FD_RESERVE)
        self.inflight: dict[str, _Build] = {}
        self.builds: dict[str, int] = {}
        self.defs = adopt.AdoptedDefs()  # digest -> what it was built from (for repairs)
        self.missing: list[ConfiguredTable] = []  # configured tables that did not fit (retried)
        self.sweep = upkeep.Sweep(self, opts.verify_interval_s, log)
        self.generation = 0
        self._init_manifest(tables)  # engine/process/manifest.py
        self._lock_fd = None
        self._server = None
        self.closing = False  # set by shutdown: builds still running then are discarded

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
            holder = (store.read_head(self.opts.shm_dir, self.opts.namespace) or {}).get("pid", "?")
            raise EngineRunning(
                f"an engine (pid {holder}) already serves namespace {self.opts.namespace!r} "
                f"in {self.opts.shm_dir}"
            ) from None
        self._lock_fd = fd
        try:
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
        except OSError:  # a full directory: the lock holds without the pid in it
            pass
        # Generations only grow, also across restarts: readers compare them.
        self.generation = time.time_ns() // 1000
        adopt.adopt(self, log)  # what the keeper held of a dead engine is kept; leftover files go
        self.stats.adopted(self.tables)

    log = staticmethod(log)

    def build_configured(self, tables: list[ConfiguredTable] | None = None) -> None:
        """Build the configured tables that are not stored, in parallel; the ones that do not fit
        wait in ``missing`` and are retried while the engine runs (engine/process/coldstart.py)."""
        coldstart.build_configured(self, tables)

    def _build(
        self, t: TableDef, pinned: bool, name: str | None = None, rev: int = 0, spec: dict | None = None
    ) -> dict:
        if self.closing:  # no build starts once shutdown began
            raise NotStored("the engine is stopping")
        t0 = time.perf_counter()
        # the segment's name: unique per build, so readers see a rebuilt table is another one
        seg = f"{self.opts.namespace}.seg.{self.generation}.{t.digest}" + (f"-{rev}" if rev else "")
        fd, info = store.create_segment(seg, t.layout(), t.fill)
        entry = {
            "key": t.key,
            "family": t.family,
            "dtype": t.dtype,
            "length": t.length,
            "file": seg,
            "pinned": pinned,
            "name": name or t.family,
            "built_s": round(time.perf_counter() - t0, 4),
            "rev": rev,
            "last_used": time.time(),
            **info,
        }
        if spec is not None:  # a configured table: requests may name it ({"table": name})
            entry["spec"] = spec
        with self.lock:
            if self.closing:  # shut down while this was being built: it must not outlive us
                os.close(fd)
                raise NotStored("the engine is stopping")
            self._hold(t.digest, entry, fd)
            self.defs[t.digest] = t
            self.builds[t.digest] = self.builds.get(t.digest, 0) + 1
        return entry

    def _hold(self, digest: str, entry: dict, fd: int) -> None:
        """Publish a sealed segment as ``digest``'s table (the caller holds the lock); the one it
        replaces (grown, repaired) closes: readers that mapped it keep their mapping."""
        old = self.fds.pop(digest, None)
        self.tables[digest], self.fds[digest] = entry, fd
        self.keeper.keep(digest, entry, fd)
        if old is not None:
            os.close(old)
        self._note(digest)

    def segment_fds(self, digests) -> tuple[dict, list[int]]:
        """({digest: entry}, [a duplicate of its descriptor]) of the tables asked that are stored:
        what the socket's ``open`` hands a reader (duplicates, so an eviction meanwhile cannot
        close, or reuse, a descriptor being sent; the caller closes them)."""
        with self.lock:
            have = {d: self.tables[d] for d in digests if d in self.tables}
            return have, [os.dup(self.fds[d]) for d in have]

    def _evict_for(self, nbytes: int) -> None:
        """Drop least-recently-asked unpinned tables until nbytes fits the budget. Readers that
        mapped an evicted table keep it (its memory is freed with the last mapping)."""
        used = sum(e["nbytes"] for e in self.tables.values() if not e["pinned"])
        if used + nbytes <= self.opts.memory_budget_bytes and len(self.tables) < self.max_tables:
            return
        victims = sorted((e["last_used"], d) for d, e in self.tables.items() if not e["pinned"])
        while used + nbytes > self.opts.memory_budget_bytes and victims:
            used -= self._evict(victims.pop(0)[1], "to stay within the memory budget")
        while len(self.tables) >= self.max_tables and victims:
            self._evict(victims.pop(0)[1], f"to stay within {self.max_tables} tables (a descriptor each)")

    def _evict(self, digest: str, why: str) -> int:
        """Drop one table (the caller holds the lock): manifest first, then the file."""
        e = self.tables.pop(digest)
        self._note(digest)
        fdpass.close_all([self.fds.pop(digest)])
        self.keeper.drop(digest)
        log(f"evicted {e['name']} ({e['nbytes'] / 2**20:.1f} MiB) {why}")
        return e["nbytes"]

    # -- on demand ------------------------------------------------------------------------------
    def ensure(self, key, reach=None) -> tuple[str, dict]:
        """Store the table ``key`` names, long enough for ``reach`` rows (or distances): an
        on-demand table is sized to the rows asked (``on_demand_length``), and rebuilt longer when
        a later ask reaches past it. Returns (its digest, its manifest entry)."""
        if not isinstance(key, str):
            raise SpecError(("table",), "must be a table key (a string)")
        if reach is not None and (type(reach) is not int or reach < 1):
            raise SpecError(("reach",), "must be a positive integer (rows the request reads)")
        t = TableDef.from_key(key, self.opts.length)
        # a configured table still waiting for room is built as itself (pinned, named, its length),
        # not as an on-demand table that its next retry would have to adopt
        ct = next((c for c in self.missing if c.table.digest == t.digest), None)
        t = (
            ct.table
            if ct is not None
            else dataclasses.replace(
                t, length=t.fam.stored_length(t.spec, on_demand_length(reach, self.opts.length))
            )
        )

        def room():
            if t.nbytes() > self.opts.memory_budget_bytes:
                raise NotStored(
                    f"table of {t.nbytes()} bytes exceeds the engine's memory budget "
                    f"({self.opts.memory_budget_bytes} bytes)"
                )
            upkeep.make_room(self, t.nbytes())

        for _ in range(8):  # another ask may be building it shorter: then it grows after that
            with self.lock:
                have = self.tables.get(t.digest)
                if have is not None and self._holds(have, t):
                    have["last_used"] = time.time()  # (least recently asked: evicted first)
                    return t.digest, have
            was = have and have["length"]
            if self._build_once(
                t, pinned=ct is not None, before=room, name=ct and ct.name, spec=ct and ct.spec
            ):
                log(
                    f"built on demand: {t.key} ({t.length} rows, {t.nbytes() / 2**20:.1f} MiB)"
                    + (f", grown from {was}" if was else "")
                    + (f", the configured table {ct.name}" if ct else "")
                )
                if ct is not None:
                    with self.lock:
                        self.missing = [c for c in self.missing if c is not ct]
        raise NotStored("the table kept changing while it was asked for")

    @staticmethod
    def _holds(entry: dict, t: TableDef) -> bool:
        """A stored table serves an ask: configured tables keep their length (rows past them are
        computed), on-demand ones must be at least as long as the ask."""
        return entry["pinned"] or entry["length"] >= t.length

    def _build_once(
        self, t: TableDef, pinned: bool, name: str | None = None, before=None, spec: dict | None = None
    ) -> bool:
        """Build ``t`` unless a table that holds it is there (a shorter on-demand one is rebuilt
        at ``t``'s length under a new file name); concurrent asks (on demand, or the retry of a
        configured table) wait on one build. True if this call built it. No room: NotStored."""
        with self.lock:
            old = self.tables.get(t.digest)
            if old is not None and self._holds(old, t):
                old["last_used"] = time.time()
                return False
            ev = self.inflight.get(t.digest)
            builder = ev is None
            if builder:
                ev = self.inflight[t.digest] = _Build()
        if not builder:
            ev.wait()
            if ev.error is not None:  # that build's failure is this ask's
                raise ev.error
            # built; or built and evicted already by another ask's room (ensure() asks again)
            return False
        try:
            if before is not None:
                before()
            try:
                rev = old.get("rev", 0) + 1 if old is not None else 0
                self._build(
                    t,
                    pinned=pinned or bool(old and old["pinned"]),
                    name=name or (old and old["name"]),
                    spec=spec or (old and old.get("spec")),
                    rev=rev,
                )
            except Exception as e:
                if not upkeep.is_resource_error(e):
                    raise
                log(f"not built: {t.key} ({t.nbytes() / 2**20:.1f} MiB): {e}")
                raise NotStored(f"table not stored: {e}") from None
        except BaseException as e:
            ev.error = e
            raise
        finally:
            with self.lock:
                self.inflight.pop(t.digest, None)
            ev.set()
        return True

    def serve(self) -> None:
        """Answer readers' asks on the engine's socket (engine/process/socket.py)."""
        self._server = engine_socket.serve(self)

    def tick(self) -> None:
        """The main loop's upkeep: check the segments; retry configured tables that did not fit."""
        try:
            if self._manifest_pending:
                with self.lock:
                    if self.published:
                        self._write_manifest()
            self.sweep.tick()
            if self.missing and time.monotonic() >= self._retry_at:
                self._retry_at = time.monotonic() + 5.0
                self.build_configured(self.missing)
        except Exception as e:  # upkeep must never stop an engine that serves
            log(f"upkeep failed, retried shortly: {type(e).__name__}: {e}")

    _retry_at = 0.0

    # -- stop -----------------------------------------------------------------------------------
    def shutdown(self) -> None:
        self.sweep.stop()
        with self.lock:
            self.closing, self.published = True, False
            building = list(self.inflight.values())
        deadline = time.monotonic() + 5.0  # builds in progress end (and discard themselves) first
        for ev in building:
            ev.wait(max(0.0, deadline - time.monotonic()))
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self._remove_files()
        with self.lock:  # (a build still running discards its segment when it ends: closing is set)
            fdpass.close_all(self.fds.values())
            self.fds.clear()
            if self._log_fd is not None:
                os.close(self._log_fd)
                self._log_fd = None
        self.keeper.close()
        if self._lock_fd is not None:
            store.unlink(self._p(store.lock_path))
            os.close(self._lock_fd)
            self._lock_fd = None
        log("stopped; shared memory removed")

    def _remove_files(self) -> None:
        for p in self._p(store.our_files):
            if p != self._p(store.lock_path):
                store.unlink(p)


def run(
    tables_path: str | None, opts: EngineOptions, ready_fd: int | None = None, parent_watch: bool = False
) -> int:
    """Run an engine until SIGTERM or SIGINT (or, with ``parent_watch``, its parent's death);
    ``ready_fd`` gets "ready" once the first manifest is out."""
    logs.configure(settings.current().log_format, _log.name)
    stop: list[int] = []  # no Event: its set() in a handler deadlocks if the signal lands while
    # this thread holds the Event's lock (seen: an engine hung after SIGTERM)

    def on_signal(signum, frame):
        stop.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if parent_watch:
        proclife.exit_with_parent(signal.SIGTERM)
    tables = load_config(tables_path)  # raises SpecError before anything is touched
    opts = dataclasses.replace(opts, length=tables.on_demand_length)
    engine = Engine(tables, opts)
    engine.acquire()
    try:
        log(f"backend {kernels.info()}")
        engine.build_configured()
        engine.serve()
        engine.publish()
        if ready_fd is not None:
            os.write(ready_fd, b"ready\n")
            os.close(ready_fd)
        while not stop:
            time.sleep(0.25)
            if not stop:
                engine.tick()
    finally:
        engine.shutdown()
    return 0
