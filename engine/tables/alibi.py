"""ALiBi linear attention biases (Press et al., "Train Short, Test Long"; formulas in docs/reference.md, alibi).

Slopes: the paper's ``get_slopes`` (ofirpress/attention_with_linear_biases), identical to BLOOM's
``_get_alibi_slopes`` and MPT's ``build_mpt_alibi_tensor`` with max_bias 8: for c = 2^floor(log2 H),
m_j = 2^(−max_bias·j/c), j = 1..c; if H is not a power of two, the odd-indexed slopes of 2c heads
follow: 2^(−max_bias·j/(2c)) for j = 1, 3, 5, ... (so the slopes are not monotone).
Canonical block: causal B[h,i,j] = −m_h·(i − j) (the consumer masks j > i, or mask_future does);
symmetric −m_h·|i − j|. Evaluated in float64 directly (not as m·j − m·i) and rounded once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from .. import kernels
from ..core import dtypes as _dt
from ..core.errors import SpecError
from ..core.fields import (
    is_int,
    json_repr,
    refuse_unknown,
    req_bool,
    req_choice,
    req_float,
    req_int,
    require_object,
)
from ..core.selection import Selection
from .base import CHUNK, DTYPE_SCHEMA, SELECTION_SCHEMA, Family, Output, TableDef

MODES = ("causal", "symmetric")
MAX_HEADS = 1 << 16


def slopes_f64(num_heads: int, max_bias: float = 8.0) -> np.ndarray:
    c = 2 ** int(np.floor(np.log2(num_heads)))
    j = np.arange(1, c + 1, dtype=np.float64)
    s = np.exp2(-max_bias * j / c)
    if c != num_heads:
        extra = np.arange(1, 2 * (num_heads - c), 2, dtype=np.float64)  # 1, 3, 5, ...
        s = np.concatenate([s, np.exp2(-max_bias * extra / (2 * c))])
    return s


@dataclasses.dataclass(frozen=True)
class AlibiSpec:
    num_heads: int
    heads: tuple | None = None
    max_bias: float = 8.0
    mode: str = "causal"
    mask_future: bool = False

    @property
    def head_index(self) -> np.ndarray:
        if self.heads is None:
            return np.arange(self.num_heads, dtype=np.int64)
        return np.asarray(self.heads, dtype=np.int64)

    def slopes(self) -> np.ndarray:
        return slopes_f64(self.num_heads, self.max_bias)[self.head_index]


def parse_spec(req: Mapping) -> AlibiSpec:
    require_object(req)
    refuse_unknown(req, Alibi.fields)
    h = req_int(req, "num_heads", (), lo=1, hi=MAX_HEADS)
    heads = req.get("heads")
    if heads is not None:
        if not isinstance(heads, (list, tuple)):
            raise SpecError(
                ("heads",), f"must be a list of head indices, got {json_repr(heads)}", "list_type"
            )
        if not heads:
            raise SpecError(("heads",), "must not be empty (omit it for all heads)", "too_short")
        for i, x in enumerate(heads):
            if not is_int(x):
                raise SpecError(("heads", i), f"must be an integer, got {json_repr(x)}", "int_type")
            if not 0 <= x < h:
                raise SpecError(("heads", i), f"must be in [0, num_heads = {h}), got {x}")
        heads = tuple(heads)
    max_bias = req_float(req, "max_bias", (), gt=0.0, required=False, default=8.0)
    mode = req_choice(req, "mode", (), MODES, "causal")
    mask = req_bool(req, "mask_future", (), False)
    if mask and mode != "causal":
        raise SpecError(("mask_future",), "only with mode 'causal' (symmetric biases have no future)")
    spec = AlibiSpec(num_heads=h, heads=heads, max_bias=max_bias, mode=mode, mask_future=mask)
    if not (np.isfinite(slopes_f64(h, max_bias)).all() and (slopes_f64(h, max_bias) > 0).all()):
        raise SpecError(("max_bias",), "gives slopes that underflow to zero")
    return spec


def max_abs_bias(spec: AlibiSpec, query: Selection, key: Selection) -> float:
    """Largest |bias| the block can hold, found from the selections' extremes without building it."""
    q, k = query.array(), key.array()
    dist = max(abs(int(q.max()) - int(k.min())), abs(int(k.max()) - int(q.min())))
    return float(spec.slopes().max()) * dist


def block(m: np.ndarray, spec: AlibiSpec, sel, dtype: str) -> np.ndarray:
    """−m·(i − j) evaluated in float64 as 0 − m·(i − j) (so the diagonal is +0.0) and rounded once,
    by engine.kernels.alibi_block (numpy reference, or the C kernel, bit-identical)."""
    q, k = sel["query"].array(), sel["key"].array()
    out = np.empty((m.shape[0], q.shape[0], k.shape[0]), _dt.DTYPES[dtype])
    if kernels.alibi_block(m, q, k, out, dtype, spec.mode == "symmetric", spec.mask_future):
        raise SpecError(("dtype",), f"ALiBi biases overflow {dtype}; use a wider dtype")
    return out


def dist_rows(m: np.ndarray, deltas: np.ndarray, dtype: str) -> np.ndarray:
    """The stored table's cells −m_h·δ rounded once (δ >= 0; δ = 0 gives +0.0). Cells past the
    dtype's range become ±inf here; readers never serve them (they compute, and refuse, instead)."""
    with np.errstate(over="ignore"):
        v = m[:, None] * (-deltas).astype(np.float64)[None, :]
        if dtype == _dt.BFLOAT16:
            return _dt.f64_to_bf16_bits(v)
        return v.astype(_dt.DTYPES[dtype])


def far_distance(sel) -> int:
    """The largest |i − j| of a block: the last distance of the table it reads."""
    return max(abs(sel["query"].max - sel["key"].min), abs(sel["key"].max - sel["query"].min))


def finite_length(dist: np.ndarray, dtype: str) -> int:
    """Number of leading distances whose every head is finite."""
    bad = ~np.isfinite(_dt.to_float(dist, dtype)).all(axis=0)
    return int(np.argmax(bad)) if bad.any() else dist.shape[1]


def _negate(a: np.ndarray, dtype: str) -> np.ndarray:
    """Exact negation in the stored form (bfloat16 bits: flip the sign bit)."""
    return a ^ np.uint16(0x8000) if dtype == _dt.BFLOAT16 else -a


class Alibi(Family):
    name = "alibi"
    fields = ("num_heads", "heads", "max_bias", "mode", "mask_future", "query", "key", "dtype")
    selections = ("query", "key")
    outputs = (
        Output(
            "bias",
            ("len(heads)", "n_query", "n_key"),
            lambda spec, sel: (len(spec.head_index), sel["query"].n, sel["key"].n),
            batched=True,
        ),
        Output("slopes", ("len(heads)",), lambda spec, sel: (len(spec.head_index),), "float32"),
    )

    def parse_spec(self, req):
        return parse_spec(req)

    def precheck(self, spec, sel, dtype):
        # a block whose largest bias would round to infinity in the dtype: 422 on dtype, decided
        # from the selections' extremes before the block is built
        if not spec.mask_future:
            _dt.round_f64(np.array([max_abs_bias(spec, sel["query"], sel["key"])]), dtype)

    def compute(self, spec, sel, dtype):
        m = np.ascontiguousarray(spec.slopes())
        return {"bias": block(m, spec, sel, dtype), "slopes": m.astype(np.float32)}

    # -- stored tables: dist[h, δ] = −m_h·δ in the dtype (every block cell is ± one of these) ---
    def table_for(self, spec, dtype, sel, length):
        return TableDef(self.name, AlibiSpec(num_heads=spec.num_heads, max_bias=spec.max_bias), dtype, length)

    def reach(self, spec, sel):
        return far_distance(sel) + 1

    def table_key(self, tspec, variant):
        return {"family": "alibi", "num_heads": tspec.num_heads, "max_bias": tspec.max_bias}

    def table_spec(self, key):
        try:
            req = {"num_heads": key["num_heads"], "max_bias": key["max_bias"]}
        except (KeyError, TypeError):
            raise SpecError(("table",), "not an alibi table key") from None
        return parse_spec(req), None

    def layout(self, t):
        h = t.spec.num_heads
        return {"dist": ((h, t.length), _dt.DTYPES[t.dtype].name), "slopes": ((h,), "float64")}

    def fill(self, t, out):
        m = slopes_f64(t.spec.num_heads, t.spec.max_bias)
        out["slopes"][...] = m
        for lo in range(0, t.length, CHUNK):
            out["dist"][:, lo : lo + CHUNK] = dist_rows(
                m, np.arange(lo, min(t.length, lo + CHUNK), dtype=np.int64), t.dtype
            )
        return {}

    def attach(self, view):
        view.finite_length = finite_length(view.dist, view.dtype)

    def serve(self, view, spec, sel, dtype):
        heads = spec.head_index
        far = far_distance(sel)
        if kernels.BACKEND == "simd" or far >= view.finite_length:
            # The C kernel fills the block from the shared float64 slopes faster than a gather;
            # past the table numpy computes too. Same numbers as the table either way.
            m = np.ascontiguousarray(view.slopes[heads])
            return {"bias": block(m, spec, sel, dtype), "slopes": m.astype(np.float32)}
        q, k = sel["query"].array(), sel["key"].array()
        delta = q[:, None] - k[None, :]  # i − j
        out = view.dist[heads[:, None, None], np.abs(delta)[None, :, :]]  # −m·|i − j|
        if spec.mode == "causal":
            future = delta < 0
            if future.any():
                if spec.mask_future:
                    out[:, future] = _dt.mask_value(dtype)
                else:
                    out[:, future] = _negate(out[:, future], dtype)  # +m·(j − i)
        return {"bias": out, "slopes": view.slopes[heads].astype(np.float32)}

    # -- the hot path ------------------------------------------------------------------------
    def template(self, hot, req, view, limits):
        """The requested heads' float64 slopes; float32 cells computed as the kernels compute them
        (decode blocks copied from the engine's float32 distance table, which holds the same
        values); float16/bfloat16 blocks by the engine's own block kernel, lent to the shortcut
        (none with the numpy backend), which also says when a cell overflows (the full path's 422)."""
        spec, f32 = req.spec, req.dtype == _dt.FLOAT32
        if not f32 and kernels.c_api() is None:
            return None
        m = np.ascontiguousarray(view.slopes[spec.head_index], dtype=np.float64)
        m32, st = m.astype(np.float32), _dt.DTYPES[req.dtype]

        def header_for(nq: int, nk: int) -> bytes:
            return self.safetensors_header(
                {"bias": np.empty((m.shape[0], nq, nk), st), "slopes": m32}, req.dtype, req.shown
            )

        dist = view.dist if f32 and view.dist.dtype == np.float32 and view.dist.flags.c_contiguous else None
        return hot.AlibiTemplate(
            slopes=m,
            symmetric=spec.mode == "symmetric",
            mask_future=spec.mask_future,
            header_for=header_for,
            tail=m32.tobytes(),
            max_n=limits.max_positions,
            max_bytes=limits.max_bytes,
            dist=dist,
            rows=spec.head_index.tolist(),
            dtype=req.dtype,
        )

    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["num_heads", "query", "key"],
        "properties": {
            "num_heads": {"type": "integer", "minimum": 1, "maximum": MAX_HEADS},
            "heads": {"type": ["array", "null"], "items": {"type": "integer", "minimum": 0}, "minItems": 1},
            "max_bias": {"type": "number", "exclusiveMinimum": 0, "default": 8.0},
            "mode": {"type": "string", "enum": list(MODES), "default": "causal"},
            "mask_future": {"type": "boolean", "default": False},
            "query": SELECTION_SCHEMA,
            "key": SELECTION_SCHEMA,
            "dtype": DTYPE_SCHEMA,
        },
    }
    examples = {
        "decode row, 32 heads": {
            "value": {"num_heads": 32, "query": [4095], "key": {"start": 0, "stop": 4096}}
        },
        "masked prefill, 12 heads": {
            "value": {
                "num_heads": 12,
                "mask_future": True,
                "dtype": _dt.FLOAT16,
                "query": {"start": 0, "stop": 8},
                "key": {"start": 0, "stop": 8},
            }
        },
    }


FAMILY = Alibi()
