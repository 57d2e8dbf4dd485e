"""The resolved lookup: one spec, answered for any positions in one call into the C extension.

    h = Client().handle("rope", {"head_dim": 128, "rope_theta": 500000.0, "dtype": "bfloat16"})
    h.lookup([17])                       # {"cos": [1, 128], "sin": [1, 128]}: numpy, new arrays
    h.lookup(np.array([[0, 5], [9, 2]])) # a [B, N] batch: [B, N, 128] each, one call
    h.lookup(torch.tensor([3, 4]))       # torch positions -> torch tensors (bfloat16 included)
    h.lookup([3, 4], out=(cos, sin))     # preallocated outputs (numpy or torch, C-contiguous)
    h.extras                             # the answer's other entries: inv_freq, attention_scaling
                                         # (None where they follow the positions: longrope, dynamic)

``lookup`` answers exactly what ``posenc.engine.compute`` answers for the spec with these
positions (bit for bit): one C call (kernels ``rows_lookup``) checks every position, gathers the
rows from the mapped table through the family's column map, and computes the rows past the table
with the pipeline's own sincos kernel. Where it applies, and what it uses, is decided by the
family's own code: its ``row_plan`` (engine/tables/base.py RowPlan: the arrays, column map, row offset
and rule for rows past the table — rope: the table's ``inv_freq64`` and ``attention_scaling``;
sinusoidal: the spec's frequencies — the plan the C shortcut's RowsTemplate reads too, so the handle and
the shortcut follow one rule, and copy rows by the one row gather, engine/kernels/row_gather.h). A
handle checks itself against the pipeline when it binds a table and takes the pipeline path (same bits,
slower) where it does not match, where the spec has no row plan (the rope types whose frequencies follow
the sequence length), or with the numpy backend.
Specs whose selections are not ``positions`` alone (ALiBi, T5, ``position_ids``) get a SelectionHandle
from ``Client.handle`` instead (engine/reader/selections.py). Views stay fresh without a syscall per call: the
mapped table is re-read from the Client at most every ``recheck_s`` (a monotonic clock read, no system call,
in between); a mapping stays valid after the engine evicts it or restarts (sealed segments), so answers stay
right.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping

import numpy as np

from .. import kernels
from ..answer import pipeline
from ..core.dtypes import DTYPES
from ..core.errors import SpecError
from ..core.selection import parse_selection

try:
    from ..kernels import _native
except ImportError:  # no extension: every lookup takes the pipeline path
    _native = None

POSITION_LIMIT = 2**31
_POSITIONS = ("positions",)  # the field a handle's positions are refused at


ONE_BLOCK_BYTES = 1 << 20  # outputs of a call at least this big together: one allocation for all


def _allocators(names, widths, dt):
    """(new(n): the outputs for n positions, pack(outs): the answer), written out for the usual two
    outputs (cos, sin): in a one-row lookup the Python around the C call costs more than the call.
    From ONE_BLOCK_BYTES on, the outputs are consecutive C-contiguous parts of one new array: a few
    MiB is mapped fresh by the allocator, and one mapping the size of the answer faults in (or gets
    huge pages for) the same bytes a user's own new array of that size would, where one mapping per
    output faulted page by page (4,096 float32 rows: 2.9 ms against 0.16 ms for a 4 MiB copy)."""
    row = sum(widths)
    cuts = np.cumsum((0, *widths))

    def block(n):
        flat = np.empty(n * row, dt)
        return tuple(flat[n * a : n * b].reshape(n, b - a) for a, b in zip(cuts[:-1], cuts[1:]))

    big = ONE_BLOCK_BYTES // max(1, row * np.dtype(dt).itemsize)
    if len(names) == 2:
        (k0, k1), (w0, w1) = names, widths

        def new2(n):
            return (np.empty((n, w0), dt), np.empty((n, w1), dt)) if n < big else block(n)

        return new2, (lambda o: {k0: o[0], k1: o[1]})
    return (
        (lambda n: tuple([np.empty((n, w), dt) for w in widths]) if n < big else block(n)),
        (lambda o: dict(zip(names, o))),
    )


class Handle:
    """One resolved spec of a Client (``Client.handle``): ``lookup(positions, out=None)``."""

    def __init__(
        self, client, family: str, spec: Mapping, max_bytes: int | None = pipeline.DEFAULT_MAX_BYTES
    ):
        self.client, self.family, self.spec = client, family, dict(spec)
        self.max_bytes = max_bytes
        self._req = client.resolve(family, {**self.spec, "positions": [0]})  # validates the spec
        pipeline.check(self._req, max_bytes)
        probe = pipeline.arrays(self._req, None)
        fam = self._req.family
        self.names = tuple(k for k, v in probe.items() if k in fam.dtyped and isinstance(v, np.ndarray))
        self.width = {k: probe[k].shape[-1] for k in self.names}
        self.dtype = self._req.dtype
        self.np_dtype = DTYPES[self.dtype] if self.dtype else None
        self._widths = tuple(self.width[k] for k in self.names)
        self._new, self._pack = _allocators(self.names, self._widths, self.np_dtype)
        row_bytes = sum(self._widths) * (self.np_dtype.itemsize if self.dtype else 4)
        self._max_rows = (
            (1 << 62) if max_bytes is None else max_bytes // row_bytes
        )  # more: the pipeline's 413
        self._extras = {k: v for k, v in probe.items() if k not in self.names}
        for v in self._extras.values():  # one array for every answer (Client.lookup's too): read-only,
            if isinstance(v, np.ndarray):  # so that nobody's in-place change reaches the next answer
                v.setflags(write=False)
        self.extras = None  # the answer's other entries, where they do not follow the positions
        self._plan, self._view, self._next, self.past_in_c = None, None, 0.0, False
        if self._req.table is not None:
            self._bind(client.attach(self._req.table, reach=self._req.reach()))

    # -- binding a mapped table ----------------------------------------------------------------
    def _bind(self, view) -> None:
        """Plan the C call for ``view`` (None when the pipeline must answer), checked against it."""
        self._view, self._plan, self.past_in_c = view, None, False
        plan = self._req.family.row_plan(self._req, view) if view is not None else None
        self.extras = self._extras if plan else None  # a row plan: the rows follow the positions only
        if (
            _native is None
            or kernels.BACKEND != "simd"
            or plan is None
            or plan.axes is not None
            or len(plan.arrays) != len(self.names)
            or not 0 <= plan.offset <= 2**53 - POSITION_LIMIT
            or any(not t.flags.c_contiguous or t.dtype != self.np_dtype for t in plan.arrays)
        ):
            return
        gather = _native.RowGather(plan=plan, length=view.length)
        if self._agrees(plan, gather, view):
            self._plan, self.past_in_c = gather, plan.past is not None
        elif plan.past is not None:  # gathers only; past rows: the pipeline
            plan = dataclasses.replace(plan, past=None)
            gather = _native.RowGather(plan=plan, length=view.length)
            if self._agrees(plan, gather, view):
                self._plan = gather

    def _agrees(self, plan, gather, view) -> bool:
        """The gather's rows equal the pipeline's for the table's first and last rows, and (computed,
        with the table's length taken as 0) the computed rows equal the stored ones."""
        last = view.length - 1 - plan.offset
        probe = np.array(sorted({0, max(0, last)}), np.int64)
        want = pipeline.arrays(
            self.client.resolve(self.family, {**self.spec, "positions": probe.tolist()}), view
        )
        gathers = (gather, _native.RowGather(plan=plan, length=0)) if plan.past is not None else (gather,)
        for g in gathers:
            outs = tuple(np.empty((probe.size, self.width[k]), self.np_dtype) for k in self.names)
            if _native.rows_lookup(g, probe, outs) < 0:
                return False
            if any(o.tobytes() != want[k].tobytes() for o, k in zip(outs, self.names)):
                return False
        return True

    @property
    def fast(self) -> bool:
        """True when lookups take the one C call (else the pipeline answers, row by row)."""
        return self._plan is not None and self.extras is not None

    def refresh(self) -> None:
        """Re-read the mapped table from the Client when recheck_s has passed (else nothing)."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.client.recheck_s
        if self._req.table is not None:
            v = self.client.view(self._req)  # reads the manifest at most every recheck_s
            if v is not None and v is not self._view:
                self._bind(v)

    # -- answering -----------------------------------------------------------------------------
    def lookup(self, positions, out=None) -> dict:
        """{name: array} for these positions ([N] or [B, N]): numpy, or torch when ``out`` or
        ``positions`` is torch; written into ``out`` ({name: array}, or a tuple in ``names``
        order) when given."""
        if time.monotonic() >= self._next:
            self.refresh()
        plan = self._plan
        if type(positions) is dict:  # a range, {"start", "stop"[, "step"]}
            positions = self._range(positions)
        if out is None and plan is not None:  # the common call, kept short: new numpy outputs
            tp = type(positions)
            if tp is list or tp is np.ndarray and positions.ndim == 1:
                n = len(positions)
                if 0 < n <= self._max_rows:
                    outs = self._new(n)
                    try:  # C reads a list of ints itself, and refuses any other item, an array not
                        r = _native.rows_lookup(plan, positions, outs)  # int64 or not contiguous
                    except (ValueError, BufferError):
                        r = -2  # the general path below converts them, or refuses them as the pipeline
                    if r == 0 or r > 0 and not self._view.growable:
                        return self._pack(outs)
        pos, as_torch = self._positions(positions)
        outs, as_torch = self._outs(pos.shape, out, as_torch)
        if plan is not None:
            r = _native.rows_lookup(plan, pos, outs[1])
        else:
            r = -3
            if pos.min() < 0 or pos.max() >= POSITION_LIMIT:
                self._refuse(pos)
        if r < 0:
            if r <= -4 or r == -1:  # a bad position, or an overflow: refused as the pipeline does
                self._refuse(pos)
            self._answer_by_pipeline(pos, outs[1])
        elif r and self._view.growable:  # past an on-demand table: ask the engine for a longer one
            self.client._ask(self._req.table, r)
        return dict(zip(self.names, outs[0]))

    def _positions(self, positions):
        as_torch = False
        if type(positions) is not np.ndarray:
            if hasattr(positions, "numpy") and hasattr(positions, "dtype"):  # a torch tensor
                as_torch = True
                positions = positions.detach().cpu().numpy()
            elif isinstance(positions, (list, tuple)):
                nested = bool(positions) and isinstance(positions[0], (list, tuple))
                rows = positions if nested else [positions]
                for b, row in enumerate(rows):
                    if not row or not all(type(v) is int for v in row):  # the pipeline's refusal, if any
                        parse_selection(list(row), ("positions", b) if nested else ("positions",))
                try:
                    positions = np.array(positions, np.int64)
                except (OverflowError, ValueError, TypeError):
                    self._refuse_list(rows, nested)
            elif isinstance(positions, Mapping):
                positions = np.asarray(self._range(positions), np.int64)
            else:
                parse_selection(positions, ("positions",))
                positions = np.asarray(positions)
        if positions.dtype != np.int64 or not positions.flags.c_contiguous:
            if positions.dtype.kind not in "iu" or positions.ndim not in (1, 2):
                raise SpecError(
                    ("positions",),
                    f"must be a [N] or [B, N] array of integers, got {positions.dtype} "
                    f"{list(positions.shape)}",
                )
            if positions.dtype.kind == "u" and positions.size and positions.max() >= POSITION_LIMIT:
                self._refuse(positions)
            positions = np.ascontiguousarray(positions, np.int64)
        if positions.ndim not in (1, 2) or positions.size == 0:
            self._refuse(positions)
        return positions, as_torch

    def _range(self, value):
        """A range selection's positions, by the selection grammar's own rule (parse_selection:
        its refusals are the pipeline's): a list of a few (C reads a list itself, cheaper than
        an array's buffer), else an int64 array. One of more rows than an answer may hold gets the
        pipeline's 413 from the range itself, never from its positions made first."""
        sel = parse_selection(value, _POSITIONS)
        rows = range(sel.start, sel.stop, sel.step)
        if len(rows) > self._max_rows:
            self._by_pipeline(dict(value))  # raises the pipeline's 413
        return list(rows) if len(rows) <= 64 else sel.array()

    def _refuse(self, pos):
        """Raise the pipeline's error for these positions (each row parsed as a ``positions`` list)."""
        pos = np.asarray(pos)
        if pos.ndim == 1:
            parse_selection(pos, ("positions",))
        elif pos.ndim == 2 and pos.shape[0] > 0:
            for b, row in enumerate(pos):
                parse_selection(row, ("positions", b))
        else:
            raise SpecError(("positions",), f"must be a [N] or [B, N] array, got shape {list(pos.shape)}")
        for row in pos.reshape(-1, pos.shape[-1]):  # positions fine: what the pipeline refuses
            self._by_pipeline(row.tolist())
        raise SpecError(("positions",), "refused")

    def _by_pipeline(self, positions) -> dict:
        """The pipeline's answer (or refusal: 413, 422) for these positions, never through a handle."""
        req = self.client.resolve(self.family, {**self.spec, "positions": positions})
        pipeline.check(req, self.max_bytes)
        return self.client.answer(req)

    def _refuse_list(self, rows, nested):
        for b, row in enumerate(rows):
            parse_selection(list(row), ("positions", b) if nested else ("positions",))
        raise SpecError(("positions",), "must be a [N] or [B, N] list of integers (every row as long)")

    def _outs(self, shape, out, as_torch):
        """(what lookup returns, their numpy views for C) for positions of ``shape``."""
        if out is None:
            n = shape[0] * (shape[1] if len(shape) > 1 else 1)
            if n > self._max_rows:
                self._by_pipeline(list(range(n)))  # raises the pipeline's 413
            if as_torch:
                return _torch_empty(self, shape)
            arrs = tuple(a.reshape(*shape, a.shape[-1]) for a in self._new(n))
            return (arrs, arrs), False
        given = (
            tuple(out[k] for k in self.names)
            if isinstance(out, Mapping)
            else (out,)
            if len(self.names) == 1 and not isinstance(out, (tuple, list))
            else tuple(out)
        )
        if len(given) != len(self.names):
            raise SpecError(("out",), f"must be {len(self.names)} arrays ({', '.join(self.names)})")
        views = tuple(_writable_view(self, k, o, (*shape, self.width[k])) for k, o in zip(self.names, given))
        return (given, views), as_torch

    def _answer_by_pipeline(self, pos, views):
        """The same bits through the pipeline, row by row of a batch, copied into ``views``."""
        for b, row in enumerate(pos.reshape(-1, pos.shape[-1])):
            ans = self._by_pipeline(row.tolist())
            for k, v in zip(self.names, views):
                v.reshape(-1, row.size, self.width[k])[b] = ans[k]


def _torch_empty(h: Handle, shape):
    import torch

    ts = tuple(torch.empty((*shape, h.width[k]), dtype=getattr(torch, h.dtype)) for k in h.names)
    return (ts, tuple(_torch_numpy(t) for t in ts)), True


def _torch_numpy(t):
    import torch

    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _writable_view(h: Handle, name: str, o, shape) -> np.ndarray:
    """A numpy view of an ``out`` array (numpy, or a CPU torch tensor), refused at ("out", name)
    unless it is C-contiguous, writable, of the answer's shape and dtype."""
    loc = ("out", name)
    if not isinstance(o, np.ndarray):
        if not (hasattr(o, "numpy") and hasattr(o, "is_contiguous")):
            raise SpecError(loc, f"must be a numpy array or a torch tensor, got {type(o).__name__}")
        import torch

        want = getattr(torch, h.dtype)
        if o.dtype != want or o.device.type != "cpu" or not o.is_contiguous() or tuple(o.shape) != shape:
            raise SpecError(
                loc,
                f"must be a contiguous CPU torch.{h.dtype} tensor of shape "
                f"{list(shape)}, got {o.dtype} {list(o.shape)} on {o.device}",
            )
        return _torch_numpy(o)
    if o.dtype != h.np_dtype or o.shape != shape or not o.flags.c_contiguous or not o.flags.writeable:
        raise SpecError(
            loc,
            f"must be a writable C-contiguous {h.np_dtype} array of shape {list(shape)}, got "
            f"{o.dtype} {list(o.shape)}",
        )
    return o
