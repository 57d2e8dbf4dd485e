"""The co-located client: attach read-only to the engine's tables and read them zero-copy.

    from posenc.engine.reader.client import Client
    c = Client()                                   # shm_dir="/dev/shm", namespace="posenc"
    t = c.table("rope", {"head_dim": 128, "rope_theta": 500000.0})   # a TableView
    t.cos, t.sin                                   # read-only numpy views [N, d/2] of shared memory
    t.torch("cos")                                 # a torch tensor over the same memory
    c.lookup("rope", {"head_dim": 128, "positions": [0, 17, 4096]})  # == posenc.engine.compute(...)

``lookup`` answers exactly what ``posenc.engine.compute`` answers (bit for bit), from
shared memory, through the one pipeline (engine/answer/pipeline.py) with a mapped view as its source: each
family's ``serve`` gathers rows inside the table, computes exactly past it, and builds ALiBi and T5
blocks from the shared distance/bucket tables. A table that is not in shared memory is asked of
the engine by its key and the rows it must hold (every process then shares it), and meanwhile
the request is computed exactly, so a new spec's first answer never waits for a build; an
on-demand table that a later request reaches past is asked for again, longer. ``table()`` (the
zero-copy view) waits for the build. The client never writes or unlinks a segment.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Mapping

import numpy as np
import orjson

from ..answer import pipeline
from ..answer.pipeline import DEFAULT_MAX_BYTES, Pipeline, Request
from ..core.dtypes import DEFAULT_DTYPE
from ..core.errors import EngineUnavailable, NotStored, SpecError
from ..store import fdpass
from ..store import segments as store
from ..tables import TableDef
from .lookup import Handle
from .selections import handle_for
from .views import TableView

NO_FILE_RECHECK_S = 1.0  # how often the engine is asked for its manifest when there is no file
ASK_TIMEOUT_S = 5.0  # a manifest or a segment asked of the engine (not a build) takes at most this
# ... but on a request's path (a manifest refresh, a table mapped for the request) the engine's
# answer is awaited this long only: an engine that does not answer (stopped, swamped) costs a
# request this wait, then it is asked nothing on request paths for ASK_AGAIN_S (computed meanwhile)
REQUEST_WAIT_S = 0.25
ASK_AGAIN_S = 2.0  # an ask that did not lead to a table (no room, engine away) is repeated after this
MAX_PENDING_ASKS = 64  # tables asked for at once; more are dropped (and their requests computed)
MAX_HANDLES = 256  # resolved specs Client.lookup keeps (engine/reader/lookup.py); past it, it starts afresh
ASKED_SHOWN_S = 0.2  # after a build, no new ask for that long: readers see the manifest within recheck_s


def connect(s: socket.socket, path: str, timeout: float) -> None:
    """Connect ``s`` to the engine's socket within ``timeout`` s, then leave that timeout on it.
    A Unix socket whose listen backlog is full refuses a connect with a timeout set (EAGAIN) at
    once, where a blocking one would wait: so a crowd of askers is retried, backing off from
    1 ms to 50 ms, until the deadline, not failed (a missing socket, ECONNREFUSED, fails at once)."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"connect: the engine's listen backlog stayed full for {timeout:g}s")
        s.settimeout(left)
        try:
            s.connect(path)
            s.settimeout(timeout)
            return
        except (BlockingIOError, InterruptedError):
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.05)


class Client:
    def __init__(
        self,
        shm_dir: str = "/dev/shm",
        namespace: str = "posenc",
        build_timeout: float = 60.0,
        recheck_s: float = 0.05,
    ):
        self.shm_dir = shm_dir
        self.namespace = store.check_namespace(namespace)
        self.build_timeout = build_timeout
        self.recheck_s = recheck_s
        self._lock = threading.Lock()
        self._manifest: dict | None = None
        self._stamp = None
        self._checked = 0.0
        self._asked_at = -NO_FILE_RECHECK_S
        self._quiet_until = 0.0  # an ask timed out: none on request paths until then (REQUEST_WAIT_S)
        self._views: dict[str, TableView] = {}  # digest -> view (current generation)
        self._named: tuple = (None, {})  # (manifest it was read from, named tables)
        self._asks: dict[str, tuple[int, float]] = {}  # digest -> (rows asked, when): asked, not yet there
        self._queue: queue.SimpleQueue | None = None  # digests to ask the engine for, by daemon threads
        self._flying: dict[str, list] = {}  # digest -> [TableDef, reach]: queued or on its way
        self._handles: dict = {}  # (family, max_bytes, spec JSON) -> Handle
        self.pipeline = Pipeline(named=self.named_tables)

    # -- manifest ----------------------------------------------------------------------------
    def manifest(self, force: bool = False) -> dict | None:
        """The engine's manifest, refreshed at most every ``recheck_s``: on a request's path
        (not ``force``) its asks wait REQUEST_WAIT_S at most, and none is made while the engine
        is left alone after one timed out; ``force``: asked now, waiting up to ASK_TIMEOUT_S."""
        now = time.monotonic()
        if not force and self._manifest is not None and now - self._checked < self.recheck_s:
            return self._manifest
        if not force and now < self._quiet_until:
            return self._manifest
        stamp = store.manifest_stamp(self.shm_dir, self.namespace)
        self._checked = now
        # The table log grows (or is replaced) with every change: then the engine is asked what
        # changed since this manifest's sequence number (the file only says that something
        # changed: anyone of the same user can write it). With no file (no room for it in
        # shm_dir), the engine is asked every NO_FILE_RECHECK_S.
        if (stamp != self._stamp or self._manifest is None or stamp is None) and (
            stamp is not None or now - self._asked_at >= NO_FILE_RECHECK_S or force
        ):
            self._asked_at = now
            old = self._manifest
            m, changed = self._fetch(old, ASK_TIMEOUT_S if force else REQUEST_WAIT_S)
            with self._lock:
                if m is None:
                    # Engine gone (or restarting): keep serving what we already mapped; one that
                    # did not answer in time is asked again once it is no longer left alone
                    if time.monotonic() >= self._quiet_until:
                        self._stamp = stamp
                    return self._manifest
                if self._manifest is not old:  # another thread refreshed meanwhile: its turn counts
                    return self._manifest
                if old is None or m["generation"] != old["generation"]:
                    self._views = {}  # a new engine: remap lazily from the new generation
                else:  # same engine: forget evicted and rebuilt tables
                    for d in list(self._views if changed is None else changed):  # (their mappings stay valid)
                        v = self._views.get(d)
                        if v is not None and m["tables"].get(d, {}).get("file") != v.segment.entry["file"]:
                            del self._views[d]
                self._manifest, self._stamp = m, stamp
        return self._manifest

    def _fetch(self, old: dict | None, timeout: float = ASK_TIMEOUT_S) -> tuple[dict | None, set | None]:
        """(the engine's manifest now, the digests changed since ``old`` or None: read whole), or
        (None, None) when the engine does not answer. With ``old`` of the same engine, only what
        changed is asked (``changes``) and applied to a copy of its tables; a whole manifest when
        the engine says reset (a new engine, or ``old`` too far behind)."""
        try:
            if old is not None and type(old.get("seq")) is int:
                r = self.call(
                    {"op": "changes", "since": old["seq"], "generation": old["generation"]},
                    timeout=timeout,
                )
                got = r.get("tables")
                if (
                    r.get("ok")
                    and not r.get("reset")
                    and r.get("generation") == old["generation"]
                    and isinstance(got, dict)
                    and type(r.get("seq")) is int
                ):
                    if not got and "named" not in r:
                        return old, set()  # nothing changed (the same object: callers compare it)
                    tables = dict(old["tables"])  # a copy (pointers only): callers may hold the old one
                    for d, e in got.items():
                        if e is None:
                            tables.pop(d, None)
                        else:
                            tables[d] = e
                    m = {**old, "tables": tables, "seq": r["seq"]}
                    if isinstance(r.get("named"), list):
                        m["named"] = r["named"]
                    return m, set(got)
                # it answered (a reset: another engine, or too far behind): a whole manifest takes
                # its build and transfer (5,016 tables: 0.06-0.17 s to its first byte), not a stall
                timeout = ASK_TIMEOUT_S
            m = self.call({"op": "manifest"}, timeout=timeout)["manifest"]
            if m.get("format") != store.MANIFEST_FORMAT:
                raise EngineUnavailable(f"manifest format {m.get('format')} is not {store.MANIFEST_FORMAT}")
            return m, None
        except (EngineUnavailable, KeyError, TypeError, ValueError, AttributeError):
            return None, None

    @property
    def generation(self) -> int | None:
        m = self.manifest()
        return m["generation"] if m else None

    def wait_ready(self, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            m = self.manifest(force=True)
            if m is not None:
                return m
            if time.monotonic() > deadline:
                raise EngineUnavailable(
                    f"no engine manifest in {self.shm_dir} for namespace {self.namespace!r}"
                )
            time.sleep(0.02)

    def named_tables(self) -> dict:
        """{name: (family, spec fields)} of the engine's configured tables (its manifest's pinned
        entries): what a ``table`` body may name."""
        m = self.manifest()
        if self._named[0] is not m:
            named: dict[str, tuple] = {}
            for e in (m or {}).get("named", ()):  # configured tables, stored or computed; a name's
                named.setdefault(e["name"], (e["family"], e["spec"]))  # first entry is its default dtype
            self._named = (m, named)
        return self._named[1]

    def tables(self) -> list[dict]:
        m = self.manifest() or {"tables": {}}
        return [
            {"digest": d, **{k: v for k, v in e.items() if k not in ("arrays",)}}
            for d, e in m["tables"].items()
        ]

    # -- attaching -----------------------------------------------------------------------------
    def attach(
        self, tdef: TableDef, build: bool = True, reach: int | None = None, timeout: float = ASK_TIMEOUT_S
    ) -> TableView:
        """The mapped view of a table, asking the engine to build it (once) if it is new, and
        waiting for it: long enough for ``reach`` rows (None: as long as the engine builds);
        ``timeout``: how long its segment is awaited."""
        digest = tdef.digest
        m = self.manifest()  # refreshes at most every recheck_s; a new generation drops old views
        v = self._views.get(digest)
        if v is not None:
            return v
        for _attempt in range(3):
            if m is not None and digest in m["tables"]:
                segs = self._open([digest], timeout)
                if digest not in segs:  # evicted or replaced since the manifest said so
                    m = self.manifest(force=True)
                    continue
                view = TableView(segs[digest], m["generation"], m.get("on_demand_length", 0))
                with self._lock:
                    if self._manifest is not None and self._manifest["generation"] == m["generation"]:
                        self._views[digest] = view
                return view
            if not build:
                break
            self._ensure(tdef, reach)
            m = self.manifest(force=True)
        raise EngineUnavailable(f"table {tdef.key} is not in shared memory")

    def attach_all(self, verify: bool = True, timeout: float = 60.0) -> int:
        """Map every table in the manifest (and check its crc32): what a worker does before it
        reports ready, so first requests find their tables mapped."""
        m = self.wait_ready(timeout)
        digests, segs = list(m["tables"]), {}
        for i in range(0, len(digests), fdpass.MAX_FDS):
            segs.update(self._open(digests[i : i + fdpass.MAX_FDS]))
        for _digest, seg in segs.items():
            if verify and not seg.verify():
                self._ask_verify()  # the engine rebuilds it; the caller tries again
                self.manifest(force=True)
                raise RuntimeError(f"checksum mismatch in {seg.entry['file']}")
        views = {d: TableView(seg, m["generation"], m.get("on_demand_length", 0)) for d, seg in segs.items()}
        with self._lock:
            if self._manifest is not None and self._manifest["generation"] == m["generation"]:
                self._views.update(views)
        return len(views)

    def _open(self, digests: list[str], timeout: float = ASK_TIMEOUT_S) -> dict[str, store.Segment]:
        """Map the tables ``digests`` names that the engine stores: their sealed segments come
        over its socket (engine/process/socket.py ``open``), are checked and mapped read-only, and
        their descriptors closed at once."""
        reply, fds = self.call_fds({"op": "open", "digests": digests}, timeout=timeout)
        try:
            if not reply.get("ok") or len(fds) != len(reply.get("tables", ())):
                raise EngineUnavailable(f"the engine did not hand over the tables: {reply.get('error')}")
            return {d: store.Segment(fd, entry) for (d, entry), fd in zip(reply["tables"].items(), fds)}
        finally:
            fdpass.close_all(fds)

    def _ask_verify(self) -> None:
        try:
            self.call({"op": "verify"})
        except EngineUnavailable:
            pass

    def _ensure(self, tdef: TableDef, reach: int | None = None) -> None:
        """Ask the engine to build a table by its key (it builds each new table once), long
        enough for ``reach`` rows; returns when it is stored."""
        reply = self.call({"op": "ensure", "table": tdef.key, **({"reach": reach} if reach else {})})
        if not reply.get("ok"):
            if reply.get("status") == NotStored.status:
                raise NotStored(reply.get("error"))
            if reply.get("status") == 422:
                raise SpecError(
                    tuple(reply.get("loc") or ("table",)), reply.get("msg") or str(reply.get("error"))
                )
            raise EngineUnavailable(f"engine could not build the table: {reply.get('error')}")

    def call(self, msg: dict, timeout: float | None = None) -> dict:
        reply, fds = self.call_fds(msg, timeout)
        fdpass.close_all(fds)
        return reply

    def call_fds(self, msg: dict, timeout: float | None = None) -> tuple[dict, list[int]]:
        """One ask of the engine: (its reply, the descriptors attached; the caller closes them)."""
        path = store.socket_path(self.shm_dir, self.namespace)
        timeout = timeout or self.build_timeout
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                connect(s, path, timeout)
                fdpass.send_line(s, msg)
                return fdpass.recv_line(s)
        except (TimeoutError, OSError, EOFError, ValueError) as e:
            if isinstance(e, TimeoutError):  # it did not answer: request paths leave it alone a while
                self._quiet_until = time.monotonic() + ASK_AGAIN_S
            raise EngineUnavailable(f"engine not reachable at {path}: {e}") from None

    def table(
        self, family: str, spec: Mapping, dtype: str | None = DEFAULT_DTYPE, seq_len: int | None = None
    ) -> TableView:
        """The shared table for a spec (no selections), built on demand. ``spec`` may also be
        ``{"hf_config": {...}, "layer_type": ...}`` or ``{"table": NAME}``. For rope, seq_len picks
        longrope's short/long set or dynamic's frequencies (default: the short/base set)."""
        fam = pipeline.family_of(family)
        body = dict(spec)
        try:  # one position that selects the table (rope: by seq_len)
            tspec = fam.parse_spec(pipeline.expand(fam, body, self.named_tables())[0])
        except SpecError:  # refused below, at the field the body gave
            tspec = None
        body.update(fam.probe_selections(tspec, max(0, (seq_len or 1) - 1)))
        if fam.has_dtype and dtype is not None:
            body["dtype"] = dtype
        req = pipeline.parse(family, body, named=self.named_tables())
        if req.table is None:
            raise SpecError(("seq_len",), "no stable table for these frequencies (dynamic NTK past M)")
        return self.attach(req.table)

    # -- lookups ---------------------------------------------------------------------------------
    def resolve(self, family: str, body: Mapping) -> Request:
        """Validate and plan a request (the spec part is validated once per distinct spec)."""
        return self.pipeline.request(family, body)

    def is_mapped(self, req: Request) -> bool:
        """True when answering needs no build and no new mapping (cheap enough to run inline)."""
        return req.table is None or req.table.digest in self._views

    def view(self, req: Request) -> TableView | None:
        """The mapped table that answers a request, or None: computed exactly. Never waits for a
        build: a table the engine does not have yet (or an on-demand one shorter than the rows
        asked) is asked for in the background, and this request is computed (or served from the
        shorter table, computing the rows past it). Also None when the table cannot be had: too
        large for the budget, no room in shared memory, the engine down, no descriptor left. The
        answer is the same bits, and its size was bounded by the response limit before this."""
        t = req.table
        if t is None:
            return None
        self.manifest()  # (at most every recheck_s: a new generation drops old views)
        v = self._views.get(t.digest)
        if v is None and time.monotonic() >= self._quiet_until:
            try:
                v = self.attach(t, build=False, timeout=REQUEST_WAIT_S)  # in the manifest: mapped now
            except (EngineUnavailable, OSError):
                v = None
        if v is None or v.growable:
            reach = req.reach()
            if v is None or (reach is not None and reach > v.length):
                self._ask(t, reach)
        return v

    def _ask(self, t: TableDef, reach: int | None) -> None:
        """Queue an ask for ``t`` (``reach`` rows) unless the same or a longer one was made lately.
        Asks coalesce: while one for a table is queued or on its way, a new one only raises the
        reach it will ask for, so a stalled engine is asked once per table however often (and
        however far) requests reach meanwhile, then once more at the longest reach."""
        now, reach = time.monotonic(), None if reach is None else int(reach)
        with self._lock:
            prev = self._asks.get(t.digest)
            if prev is not None and (prev[0] or 0) >= (reach or 0) and now - prev[1] < ASK_AGAIN_S:
                return
            self._asks[t.digest] = (reach or 0, now)
            if len(self._asks) > 4 * MAX_PENDING_ASKS:  # forget old asks (their tables came or were refused)
                self._asks = {d: a for d, a in self._asks.items() if now - a[1] < ASK_AGAIN_S}
            flying = self._flying.get(t.digest)
            if flying is not None:  # queued or on its way: the next ask goes as far as this one
                flying[1] = None if reach is None or flying[1] is None else max(flying[1], reach)
                return
            if len(self._flying) >= MAX_PENDING_ASKS:
                return
            self._flying[t.digest] = [t, reach]
            if self._queue is None:
                self._queue = queue.SimpleQueue()
                for i in range(2):  # two: a long build does not hold up every other ask
                    threading.Thread(
                        target=self._asker, args=(self._queue,), daemon=True, name=f"posenc-ask-{i}"
                    ).start()
            self._queue.put(t.digest)

    def _asker(self, asks: queue.SimpleQueue) -> None:
        while True:
            digest = asks.get()
            with self._lock:
                t, reach = self._flying[digest]
                self._flying[digest] = [t, 0]  # what asks raise while this one is on its way
            try:
                self._ensure(t, reach)
            except Exception:  # no room, engine away, ...: its requests are computed, and it
                pass  # is asked for again after ASK_AGAIN_S; this thread must live on
            else:  # built: asked again (evicted since) once the manifest has shown it
                with self._lock:
                    self._asks[digest] = (reach or 0, time.monotonic() - ASK_AGAIN_S + ASKED_SHOWN_S)
            with self._lock:
                later = self._flying[digest][1]
                if later is None and reach is not None or (later or 0) > (reach or 0):
                    self._flying[digest][1] = later  # asked further meanwhile: once more, that far
                    asks.put(digest)
                else:
                    del self._flying[digest]

    def answer(self, req: Request) -> dict:
        """The arrays for a planned request: from its shared table, or computed directly."""
        return pipeline.arrays(req, self.view(req))

    def handle(self, family: str, spec: Mapping, max_bytes: int | None = DEFAULT_MAX_BYTES, selections=None):
        """A resolved lookup for one spec, a body less its selections (engine/reader/selections.py)."""
        return handle_for(self, family, spec, max_bytes, selections)

    def lookup(self, family: str, body: Mapping, max_bytes: int | None = DEFAULT_MAX_BYTES) -> dict:
        """Exactly posenc.engine.compute.compute(family, body), served from shared memory. The
        ``positions`` (a list of integers, a 1-D integer array, or a range {"start", "stop",
        "step"}) of a spec seen before, its table mapped, take the spec's Handle: no resolve, one
        C call. The spec's key is its JSON text as given (orjson: 64 and 64.0, True and 1, 0.0 and
        -0.0 stay apart), a few hundred ns; the same spec with its fields in another order is
        another key of the same table."""
        key = spec = None
        if type(body) is dict and "table" not in body:  # (names follow the config)
            spec = body.copy()
            pos = spec.pop("positions", None)
            # a flat list (a [B, N] list is compute's error, where a handle takes it as a batch)
            if (
                type(pos) is list
                and pos
                and type(pos[0]) is int
                or type(pos) is np.ndarray
                and pos.ndim == 1
                and pos.dtype.kind in "iu"
                or type(pos) is dict  # a range (the handle parses it by the selection rule)
            ):
                try:
                    key = (family, max_bytes, orjson.dumps(spec))
                except (TypeError, orjson.JSONEncodeError):
                    key = None
                h = self._handles.get(key) if key is not None else None
                if h is not None and h.fast:
                    out = h.lookup(pos)
                    out.update(h.extras)
                    return out
        req = self.resolve(family, body)
        pipeline.check(req, max_bytes)
        out = self.answer(req)
        if key is not None and key not in self._handles and req.table is not None and self.is_mapped(req):
            # seen: next time (its table mapped, a row template), its handle answers
            if len(self._handles) >= MAX_HANDLES:
                self._handles.clear()
            try:
                self._handles[key] = Handle(self, family, spec or {}, max_bytes)  # (key: spec is a dict)
            except (EngineUnavailable, OSError):
                pass
        return out
