"""The co-located client: attach read-only to the engine's tables and read them zero-copy.

    from posenc.engine.client import Client
    c = Client()                                   # shm_dir="/dev/shm", namespace="posenc"
    t = c.table("rope", {"head_dim": 128, "rope_theta": 500000.0})   # a TableView
    t.cos, t.sin                                   # read-only numpy views [N, d/2] of shared memory
    t.torch("cos")                                 # a torch tensor over the same memory
    c.lookup("rope", {"head_dim": 128, "positions": [0, 17, 4096]})  # == engine.compute.compute(...)

``lookup`` answers exactly what ``engine.compute.compute`` answers (bit for bit), from shared
memory: row gathers for positions inside the table, exact computation past it, blocks for ALiBi
and T5 built from the shared distance/bucket tables. A spec that is not in shared memory is built
once by the engine (every process then shares it); the client never writes or unlinks a segment.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import threading
import time
import warnings
from collections import OrderedDict
from typing import Mapping

import numpy as np
import orjson

from . import dtypes as _dt
from . import kernels
from . import store
from .compute import DEFAULT_MAX_BYTES, check_size, family_module, output_nbytes, parse_request, precheck
from .errors import EngineUnavailable, SpecError
from .fields import require_object
from .selection import Selection, parse_selection
from .tabledefs import DEFAULT_LENGTH, TableDef, table_for
from .tables import rope, sinusoidal


class TableView:
    """One table in shared memory: read-only numpy views of its arrays."""

    def __init__(self, seg: store.Segment, generation: int):
        self.segment = seg
        self.family = seg.entry["family"]
        self.dtype = seg.entry["dtype"]
        self.generation = generation
        self.meta = seg.entry.get("meta", {})
        self.length = int(seg.entry["length"])
        for name, a in seg.arrays.items():
            setattr(self, name, a)
        if self.family == "alibi":  # distances whose value is finite in this dtype
            from .tabledefs import alibi_finite_length
            self.finite_length = alibi_finite_length(seg.arrays["dist"], self.dtype)

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        return self.segment.arrays

    def torch(self, name: str):
        """A torch tensor viewing the same shared memory (bfloat16 tables come back as
        torch.bfloat16). torch has no read-only tensors: the mapping is PROT_READ, so a write
        through this tensor faults the writing process and can never change the table."""
        import torch

        a = self.segment.arrays[name]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "The given NumPy array is not writable"
            t = torch.from_numpy(a)
        if self.dtype == "bfloat16" and a.dtype == np.uint16:
            t = t.view(torch.bfloat16)
        return t

    def rope_full(self, name: str, layout: str = "half_split") -> np.ndarray:
        """Zero-copy full-width view of a half-width rope array, shaped [N, 2, d/2] (half_split)
        or [N, d/2, 2] (interleaved) with a 0 stride; ``.reshape(N, d)`` makes the usual
        [N, d] (a copy)."""
        h = self.segment.arrays[name]
        n, w = h.shape
        if layout == "half_split":
            return np.lib.stride_tricks.as_strided(h, (n, 2, w), (h.strides[0], 0, h.strides[1]), writeable=False)
        return np.lib.stride_tricks.as_strided(h, (n, w, 2), (h.strides[0], h.strides[1], 0), writeable=False)


class Client:
    def __init__(self, shm_dir: str = "/dev/shm", namespace: str = "posenc", build_timeout: float = 60.0,
                 recheck_s: float = 0.05):
        self.shm_dir = shm_dir
        self.namespace = store.check_namespace(namespace)
        self.build_timeout = build_timeout
        self.recheck_s = recheck_s
        self._lock = threading.Lock()
        self._manifest: dict | None = None
        self._stamp = None
        self._checked = 0.0
        self._views: dict[str, TableView] = {}   # digest -> view (current generation)
        self._plans: OrderedDict = OrderedDict()  # canonical spec bytes -> validated spec

    # -- manifest ----------------------------------------------------------------------------
    def manifest(self, force: bool = False) -> dict | None:
        now = time.monotonic()
        if not force and self._manifest is not None and now - self._checked < self.recheck_s:
            return self._manifest
        stamp = store.manifest_stamp(self.shm_dir, self.namespace)
        self._checked = now
        if stamp != self._stamp or force:
            try:
                m = store.read_manifest(self.shm_dir, self.namespace)
            except (ValueError, OSError):
                m = None
            with self._lock:
                if m is None:
                    # Engine gone (or restarting): keep serving what we already mapped.
                    self._stamp = stamp
                    return self._manifest
                if self._manifest is None or m["generation"] != self._manifest["generation"]:
                    self._views = {}      # a new engine: remap lazily from the new generation
                else:                     # same engine: forget evicted tables (mappings stay valid)
                    self._views = {d: v for d, v in self._views.items() if d in m["tables"]}
                self._manifest, self._stamp = m, stamp
        return self._manifest

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
                raise EngineUnavailable(f"no engine manifest in {self.shm_dir} for namespace {self.namespace!r}")
            time.sleep(0.02)

    def tables(self) -> list[dict]:
        m = self.manifest() or {"tables": {}}
        return [{"digest": d, **{k: v for k, v in e.items() if k not in ("arrays",)}} for d, e in m["tables"].items()]

    # -- attaching -----------------------------------------------------------------------------
    def attach(self, tdef: TableDef, build: bool = True, request=None) -> TableView:
        """The mapped view of a table; ``request`` (a dict, or a callable returning one) is what
        the engine builds it from if it is not in shared memory yet."""
        digest = tdef.digest
        m = self.manifest()  # refreshes at most every recheck_s; a new generation drops old views
        v = self._views.get(digest)
        if v is not None:
            return v
        for attempt in range(3):
            if m is not None and digest in m["tables"]:
                entry = m["tables"][digest]
                try:
                    seg = store.Segment(os.path.join(self.shm_dir, entry["file"]), entry)
                except FileNotFoundError:  # evicted or reclaimed between manifest read and open
                    m = self.manifest(force=True)
                    continue
                view = TableView(seg, m["generation"])
                with self._lock:
                    if self._manifest is not None and self._manifest["generation"] == m["generation"]:
                        self._views[digest] = view
                return view
            if not build:
                break
            self._ensure(tdef, request)
            m = self.manifest(force=True)
        raise EngineUnavailable(f"table {tdef.key} is not in shared memory")

    def attach_all(self, verify: bool = True, timeout: float = 60.0) -> int:
        """Map every table in the manifest (and check its crc32): what a worker does before it
        reports ready, so first requests find their tables mapped."""
        m = self.wait_ready(timeout)
        views = {}
        for digest, entry in m["tables"].items():
            seg = store.Segment(os.path.join(self.shm_dir, entry["file"]), entry)
            if verify and not seg.verify():
                raise RuntimeError(f"checksum mismatch in {entry['file']}")
            views[digest] = TableView(seg, m["generation"])
        with self._lock:
            if self._manifest is not None and self._manifest["generation"] == m["generation"]:
                self._views.update(views)
        return len(views)

    def _ensure(self, tdef: TableDef, request: Mapping | None) -> None:
        """Ask the engine to build a table (it builds each new table once)."""
        if callable(request):
            request = request()
        if request is None:
            raise EngineUnavailable("no request to build from")
        reply = self.call({"op": "ensure", "family": tdef.family, "request": dict(request)})
        if not reply.get("ok"):
            if reply.get("status") == 422:
                raise SpecError(tuple(reply.get("loc") or ("family",)), reply.get("msg") or reply.get("error"))
            raise EngineUnavailable(f"engine could not build the table: {reply.get('error')}")

    def call(self, msg: dict) -> dict:
        path = store.socket_path(self.shm_dir, self.namespace)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(self.build_timeout)
                s.connect(path)
                s.sendall(json.dumps(msg).encode() + b"\n")
                data = b""
                while not data.endswith(b"\n"):
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        except (OSError, socket.timeout) as e:
            raise EngineUnavailable(f"engine not reachable at {path}: {e}") from None
        if not data:
            raise EngineUnavailable("engine closed the connection")
        return json.loads(data)

    def table(self, family: str, spec: Mapping, dtype: str | None = "float32", seq_len: int | None = None) -> TableView:
        """The shared table for a spec (no selections), built on demand. For rope, seq_len picks
        longrope's short/long set or dynamic's frequencies (default: the short/base set)."""
        req = dict(spec)
        for name in family_module(family).SELECTIONS:
            req[name] = [max(0, (seq_len or 1) - 1)] if family == "rope" else [0]
        if family != "t5-buckets" and dtype is not None:
            req["dtype"] = dtype
        mod, s, sel, dt = parse_request(family, req)
        t = table_for(family, s, dt, sel, DEFAULT_LENGTH)
        if t is None:
            raise SpecError(("seq_len",), "no stable table for these frequencies (dynamic NTK past M)")
        return self.attach(t, request=req)

    # -- lookups ---------------------------------------------------------------------------------
    def resolve(self, family: str, request: Mapping) -> "Resolved":
        """Validate a request and find the table that answers it. The spec part (everything but
        the selections) is validated once per distinct spec and cached under its canonical bytes;
        later requests with that spec only parse their selections."""
        mod = family_module(family)
        require_object(request)
        spec_part = {k: v for k, v in request.items() if k not in mod.SELECTIONS}
        try:
            key = (family, orjson.dumps(spec_part, option=orjson.OPT_SORT_KEYS))
        except (TypeError, orjson.JSONEncodeError):   # not JSON data: validate the long way
            key = None
        plan = self._plans.get(key) if key is not None else None
        if plan is None:
            _, spec, sel, dtype = parse_request(family, request)  # full validation, names the field
            plan = _Plan(spec, dtype)
            if key is not None:
                self._plans[key] = plan
                if len(self._plans) > PLAN_CACHE:
                    self._plans.popitem(last=False)
        else:
            spec, dtype = plan.spec, plan.dtype
            sel = {n: parse_selection(request.get(n), (n,)) for n in mod.SELECTIONS}
        # Which table: fixed per spec, except rope types whose frequencies follow the length.
        variant = rope.variant(spec, rope.effective_seq_len(spec, sel["positions"])) \
            if family == "rope" and spec.rope_type in ("dynamic", "longrope") else None
        table = plan.tables.get(variant, _MISSING)
        if table is _MISSING:
            if len(plan.tables) > 64:   # dynamic NTK: one variant per length; keep it bounded
                plan.tables.clear()
            table = plan.tables[variant] = table_for(family, spec, dtype, sel, DEFAULT_LENGTH)
        return Resolved(family, mod, spec, sel, dtype, table, request)

    def is_mapped(self, r: "Resolved") -> bool:
        """True when answering needs no build and no new mapping (cheap enough to run inline)."""
        return r.table is None or r.table.digest in self._views

    def answer(self, r: "Resolved") -> dict:
        """The arrays for a resolved request: from its shared table, or computed directly."""
        if r.table is None:
            return r.mod.compute(r.spec, r.sel, r.dtype)
        view = self.attach(r.table, request=r.ensure_request)
        return serve(view, r.spec, r.sel, r.dtype)

    def lookup(self, family: str, request: Mapping, max_bytes: int | None = DEFAULT_MAX_BYTES) -> dict:
        """Exactly engine.compute.compute(family, request), served from shared memory."""
        r = self.resolve(family, request)
        check_size(output_nbytes(r.mod, r.spec, r.sel, r.dtype), max_bytes)
        precheck(r.mod, r.spec, r.sel, r.dtype)
        return self.answer(r)


PLAN_CACHE = 1024
_MISSING = object()


class _Plan:
    __slots__ = ("spec", "dtype", "tables")

    def __init__(self, spec, dtype):
        self.spec, self.dtype, self.tables = spec, dtype, {}


@dataclasses.dataclass(slots=True)
class Resolved:
    family: str
    mod: object
    spec: object
    sel: dict
    dtype: str | None
    table: TableDef | None   # the shared table that answers; None: computed directly
    request: Mapping

    def ensure_request(self) -> dict:
        """What the engine builds this table from: the spec with one-element selections (rope
        keeps its effective seq_len through the largest position)."""
        out = {k: v for k, v in self.request.items() if k not in self.mod.SELECTIONS}
        out.update({name: [sel.max] for name, sel in self.sel.items()})
        return out


# ---------------------------------------------------------------------------------------------
# Serving a parsed request from a table view (also the HTTP workers' path).

def gather(table: np.ndarray, rows: np.ndarray, length: int, compute_rows) -> np.ndarray:
    """table[rows] for rows < length; compute_rows(rows) for the rest (past the table)."""
    if rows.size and rows.max() >= length:
        inside = rows < length
        out = np.empty((rows.shape[0], *table.shape[1:]), dtype=table.dtype)
        out[inside] = table[rows[inside]]
        out[~inside] = compute_rows(rows[~inside])
        return out
    return table[rows]


def serve(view: TableView, spec, sel: Mapping[str, Selection], dtype: str | None) -> dict:
    """Answer a parsed request from a mapped table; the hot loops run on engine.kernels (numpy,
    or the C SIMD extension, bit-identical)."""
    fam = view.family
    if fam == "rope":
        inv64, scaling = view.inv_freq64, view.meta["attention_scaling"]
        rows = sel["positions"].array()
        if sel["positions"].max >= view.length:          # past the table: computed exactly
            inside = rows < view.length
            past_cos, past_sin = rope.half_rows(inv64, scaling, rows[~inside], dtype)
            cos = np.empty((rows.shape[0], view.cos.shape[1]), view.cos.dtype)
            sin = np.empty_like(cos)
            cos[inside], sin[inside] = view.cos[rows[inside]], view.sin[rows[inside]]
            cos[~inside], sin[~inside] = past_cos, past_sin
            full_cos, full_sin = rope.expand(cos, spec.layout), rope.expand(sin, spec.layout)
        else:                                            # one pass: gather + expand to width d
            full_cos = np.empty((rows.shape[0], 2 * view.cos.shape[1]), view.cos.dtype)
            full_sin = np.empty_like(full_cos)
            kernels.rope_expand(view.cos, rows, full_cos, spec.layout)
            kernels.rope_expand(view.sin, rows, full_sin, spec.layout)
        return {"cos": full_cos, "sin": full_sin, "inv_freq": view.inv_freq,   # read-only view
                "attention_scaling": float(scaling)}
    if fam == "sinusoidal":
        rows = sel["positions"].array() + spec.offset
        if sel["positions"].max + spec.offset >= view.length:
            stored = gather(view.table, rows, view.length, lambda r: sinusoidal.table_rows(spec, r, dtype))
        else:
            stored = np.empty((rows.shape[0], view.table.shape[1]), view.table.dtype)
            kernels.gather_rows(view.table, rows, stored)
        return {"encoding": sinusoidal.arrange(stored, spec)}
    if fam == "alibi":
        return _alibi_block(view, spec, sel, dtype)
    q, k = sel["query"].array(), sel["key"].array()
    out = np.empty((q.shape[0], k.shape[0]), np.int32)
    kernels.t5_block(view.lut, q, k, out, view.length)
    return {"buckets": out}


def _negate(a: np.ndarray, dtype: str) -> np.ndarray:
    """Exact negation in the stored form (bfloat16 bits: flip the sign bit)."""
    return a ^ np.uint16(0x8000) if dtype == "bfloat16" else -a


def _alibi_block(view: TableView, spec, sel, dtype) -> dict:
    q, k = sel["query"].array(), sel["key"].array()
    heads = spec.head_index
    far = max(abs(sel["query"].max - sel["key"].min), abs(sel["key"].max - sel["query"].min))
    if kernels.BACKEND == "simd" or far >= view.finite_length:
        # The C kernel fills the block from the shared float64 slopes faster than a gather;
        # past the table numpy computes too. Same numbers as the table either way.
        m = np.ascontiguousarray(view.slopes[heads])
        out = np.empty((heads.shape[0], q.shape[0], k.shape[0]), _dt.DTYPES[dtype])
        if kernels.alibi_block(m, q, k, out, dtype, spec.mode == "symmetric", spec.mask_future):
            raise SpecError(("dtype",), f"ALiBi biases overflow {dtype}; use a wider dtype")
        return {"bias": out, "slopes": m.astype(np.float32)}
    delta = q[:, None] - k[None, :]                       # i − j
    dist = view.dist
    out = dist[heads[:, None, None], np.abs(delta)[None, :, :]]   # −m·|i − j|
    if spec.mode == "causal":
        future = delta < 0
        if future.any():
            if spec.mask_future:
                out[:, future] = _dt.mask_value(dtype)
            else:
                out[:, future] = _negate(out[:, future], dtype)   # +m·(j − i)
    return {"bias": out, "slopes": view.slopes[heads].astype(np.float32)}
