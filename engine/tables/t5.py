"""T5 relative-position buckets: ``T5Attention._relative_position_bucket``
(transformers models/t5/modeling_t5.py; SEMANTICS.md §4), for rel = key − query.

Buckets depend on rel alone and saturate at |rel| >= max_distance, so the whole function is a
lookup table over rel in [−max_distance, max_distance]; blocks are gathers from it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Mapping

import numpy as np

from ..errors import SpecError
from ..fields import refuse_unknown, req_bool, req_int, require_object
from ..selection import Selection, parse_selection

FIELDS = ("bidirectional", "num_buckets", "max_distance", "query", "key")
SELECTIONS = ("query", "key")


@dataclasses.dataclass(frozen=True)
class T5Spec:
    bidirectional: bool = True
    num_buckets: int = 32
    max_distance: int = 128

    def table_key(self) -> str:
        return json.dumps({"family": "t5-buckets", **dataclasses.asdict(self)}, sort_keys=True,
                          separators=(",", ":"))


def parse_spec(req: Mapping) -> T5Spec:
    require_object(req)
    refuse_unknown(req, FIELDS, why="t5-buckets has no such field (its output is always int32)"
                   if "dtype" in req else "")
    bi = req_bool(req, "bidirectional", (), True)
    nb = req_int(req, "num_buckets", (), lo=2, hi=1 << 20, required=False, default=32)
    if bi and nb < 4:
        raise SpecError(("num_buckets",), f"must be >= 4 when bidirectional, got {nb}")
    md = req_int(req, "max_distance", (), lo=1, hi=2**31, required=False, default=128)
    exact = (nb // 2 if bi else nb) // 2
    if not md > exact:
        raise SpecError(("max_distance",), f"must be greater than the exact range ({exact} for "
                        f"num_buckets={nb}, bidirectional={str(bi).lower()}), got {md}")
    return T5Spec(bidirectional=bi, num_buckets=nb, max_distance=md)


def parse(req: Mapping):
    spec = parse_spec(req)
    return spec, {k: parse_selection(req.get(k), (k,)) for k in SELECTIONS}


def buckets_of(spec: T5Spec, rel: np.ndarray) -> np.ndarray:
    """The formula itself on int64 relative positions (float64 log; T5 uses float32 — they agree
    for |rel| <= 3e5, SEMANTICS.md §4, and past max_distance every bucket is saturated)."""
    rel = np.asarray(rel, dtype=np.int64)
    nb = spec.num_buckets
    out = np.zeros(rel.shape, dtype=np.int64)
    if spec.bidirectional:
        nb //= 2
        out += (rel > 0) * nb
        n = np.abs(rel)
    else:
        n = np.maximum(-rel, 0)
    max_exact = nb // 2
    is_small = n < max_exact
    with np.errstate(divide="ignore"):
        large = max_exact + (np.log(np.maximum(n, 1).astype(np.float64) / max_exact)
                             / np.log(spec.max_distance / max_exact) * (nb - max_exact))
    large = np.minimum(np.trunc(np.where(is_small, 0, large)).astype(np.int64), nb - 1)
    return (out + np.where(is_small, n, large)).astype(np.int32)


def lut(spec: T5Spec) -> np.ndarray:
    """Buckets for rel = −R..R, R = max_distance; beyond it buckets equal the ends'."""
    r = spec.max_distance
    return buckets_of(spec, np.arange(-r, r + 1, dtype=np.int64))


def output_nbytes(spec: T5Spec, nq: int, nk: int, dtype=None) -> int:
    return nq * nk * 4


def compute(spec: T5Spec, sel: Mapping[str, Selection], dtype=None) -> dict:
    rel = sel["key"].array()[None, :] - sel["query"].array()[:, None]
    return {"buckets": buckets_of(spec, rel)}
