"""ALiBi linear attention biases (Press et al., "Train Short, Test Long"; SEMANTICS.md §2).

Slopes: the paper's ``get_slopes`` (ofirpress/attention_with_linear_biases), identical to BLOOM's
``_get_alibi_slopes`` and MPT's ``build_mpt_alibi_tensor`` with max_bias 8: for c = 2^floor(log2 H),
m_j = 2^(−max_bias·j/c), j = 1..c; if H is not a power of two, the odd-indexed slopes of 2c heads
follow: 2^(−max_bias·j/(2c)) for j = 1, 3, 5, ... (so the slopes are not monotone).
Canonical block: causal B[h,i,j] = −m_h·(i − j) (the consumer masks j > i, or mask_future does);
symmetric −m_h·|i − j|. Evaluated in float64 directly (not as m·j − m·i) and rounded once.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Mapping

import numpy as np

from .. import dtypes as _dt
from ..errors import SpecError
from ..fields import (is_int, json_repr, refuse_unknown, req_bool, req_choice, req_float, req_int,
                      require_object)
from ..selection import Selection, parse_selection

MODES = ("causal", "symmetric")
FIELDS = ("num_heads", "heads", "max_bias", "mode", "mask_future", "query", "key", "dtype")
SELECTIONS = ("query", "key")


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

    def table_key(self) -> str:
        return json.dumps({"family": "alibi", "num_heads": self.num_heads, "max_bias": self.max_bias},
                          sort_keys=True, separators=(",", ":"))


def parse_spec(req: Mapping) -> AlibiSpec:
    require_object(req)
    refuse_unknown(req, FIELDS)
    h = req_int(req, "num_heads", (), lo=1, hi=1 << 16)
    heads = req.get("heads")
    if heads is not None:
        if not isinstance(heads, (list, tuple)):
            raise SpecError(("heads",), f"must be a list of head indices, got {json_repr(heads)}", "list_type")
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


def parse(req: Mapping):
    spec = parse_spec(req)
    return spec, {k: parse_selection(req.get(k), (k,)) for k in SELECTIONS}


def output_nbytes(spec: AlibiSpec, nq: int, nk: int, dtype: str) -> int:
    return len(spec.head_index) * nq * nk * _dt.DTYPES[dtype].itemsize + len(spec.head_index) * 4


def max_abs_bias(spec: AlibiSpec, query: Selection, key: Selection) -> float:
    """Largest |bias| the block can hold, found from the selections' extremes without building it."""
    q, k = query.array(), key.array()
    dist = max(abs(int(q.max()) - int(k.min())), abs(int(k.max()) - int(q.min())))
    return float(spec.slopes().max()) * dist


def compute(spec: AlibiSpec, sel: Mapping[str, Selection], dtype: str) -> dict:
    # −m·(i − j) evaluated in float64 as 0 − m·(i − j) (so the diagonal is +0.0) and rounded once,
    # by engine.kernels.alibi_block (numpy reference, or the C kernel, bit-identical).
    from .. import kernels
    q, k = sel["query"].array(), sel["key"].array()
    m = np.ascontiguousarray(spec.slopes())
    out = np.empty((m.shape[0], q.shape[0], k.shape[0]), _dt.DTYPES[dtype])
    if kernels.alibi_block(m, q, k, out, dtype, spec.mode == "symmetric", spec.mask_future):
        raise SpecError(("dtype",), f"ALiBi biases overflow {dtype}; use a wider dtype")
    return {"bias": out, "slopes": m.astype(np.float32)}
