"""T5 relative-position buckets: ``T5Attention._relative_position_bucket``
(transformers models/t5/modeling_t5.py; docs/reference.md, t5-buckets), for rel = key − query.

Buckets depend on rel alone and saturate at |rel| >= max_distance, so the whole function is a
lookup table over rel in [−max_distance, max_distance]; blocks are gathers from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from .. import kernels
from ..core.errors import SpecError
from ..core.fields import refuse_unknown, req_bool, req_int, require_object
from .base import SELECTION_SCHEMA, Family, Output, TableDef

MAX_LUT_RADIUS = 1 << 22  # larger max_distance: blocks are computed (the table would be 32 MiB+)


@dataclasses.dataclass(frozen=True)
class T5Spec:
    bidirectional: bool = True
    num_buckets: int = 32
    max_distance: int = 128


def parse_spec(req: Mapping) -> T5Spec:
    require_object(req)
    refuse_unknown(
        req,
        T5Buckets.fields,
        why="t5-buckets has no such field (its output is always int32)" if "dtype" in req else "",
    )
    bi = req_bool(req, "bidirectional", (), True)
    nb = req_int(req, "num_buckets", (), lo=2, hi=1 << 20, required=False, default=32)
    if bi and nb < 4:
        raise SpecError(("num_buckets",), f"must be >= 4 when bidirectional, got {nb}")
    md = req_int(req, "max_distance", (), lo=1, hi=2**31, required=False, default=128)
    exact = (nb // 2 if bi else nb) // 2
    if not md > exact:
        raise SpecError(
            ("max_distance",),
            f"must be greater than the exact range ({exact} for "
            f"num_buckets={nb}, bidirectional={str(bi).lower()}), got {md}",
        )
    return T5Spec(bidirectional=bi, num_buckets=nb, max_distance=md)


def buckets_of(spec: T5Spec, rel: np.ndarray) -> np.ndarray:
    """The formula itself on int64 relative positions (float64 log; T5 uses float32 — they agree
    for |rel| <= 3e5, docs/reference.md, and past max_distance every bucket is saturated)."""
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
        large = max_exact + (
            np.log(np.maximum(n, 1).astype(np.float64) / max_exact)
            / np.log(spec.max_distance / max_exact)
            * (nb - max_exact)
        )
    large = np.minimum(np.trunc(np.where(is_small, 0, large)).astype(np.int64), nb - 1)
    return (out + np.where(is_small, n, large)).astype(np.int32)


def lut(spec: T5Spec) -> np.ndarray:
    """Buckets for rel = −R..R, R = max_distance; beyond it buckets equal the ends'."""
    r = spec.max_distance
    return buckets_of(spec, np.arange(-r, r + 1, dtype=np.int64))


class T5Buckets(Family):
    name = "t5-buckets"
    fields = ("bidirectional", "num_buckets", "max_distance", "query", "key")
    selections = ("query", "key")
    outputs = (  # buckets are always int32: no dtype field
        Output(
            "buckets",
            ("n_query", "n_key"),
            lambda spec, sel: (sel["query"].n, sel["key"].n),
            "int32",
            batched=True,
            note=": the bucket of key - query",
        ),
    )

    def parse_spec(self, req):
        return parse_spec(req)

    def compute(self, spec, sel, dtype=None):
        rel = sel["key"].array()[None, :] - sel["query"].array()[:, None]
        return {"buckets": buckets_of(spec, rel)}

    # -- stored tables: the bucket of every rel in [−max_distance, max_distance] ---------------
    def table_for(self, spec, dtype, sel, length):
        if spec.max_distance > MAX_LUT_RADIUS:
            return None
        return TableDef(self.name, spec, None, self.stored_length(spec, length))

    def stored_length(self, tspec, length):
        return tspec.max_distance  # its length is its radius: the whole function

    def table_key(self, tspec, variant):
        return {"family": "t5-buckets", **dataclasses.asdict(tspec)}

    def table_spec(self, key):
        try:
            req = {k: key[k] for k in ("bidirectional", "num_buckets", "max_distance")}
        except (KeyError, TypeError):
            raise SpecError(("table",), "not a t5-buckets table key") from None
        return parse_spec(req), None

    def layout(self, t):
        return {"lut": ((2 * t.length + 1,), "int32")}

    def fill(self, t, out):
        out["lut"][...] = lut(t.spec)
        return {}

    def serve(self, view, spec, sel, dtype=None):
        q, k = sel["query"].array(), sel["key"].array()
        out = np.empty((q.shape[0], k.shape[0]), np.int32)
        kernels.t5_block(view.lut, q, k, out, view.length)
        return {"buckets": out}

    # -- the hot path: the same kernel over the mapped table, in the C shortcut -----------------
    def template(self, hot, req, view, limits):
        """The engine's block kernel over the mapped table (service/shortcut/hot_t5.c), as ``serve``
        calls it; none with the numpy backend (no kernel to lend)."""
        if kernels.c_api() is None:
            return None

        def header_for(nq: int, nk: int) -> bytes:
            return self.safetensors_header({"buckets": np.empty((nq, nk), np.int32)}, req.dtype, req.shown)

        return hot.T5Template(
            lut=view.lut,
            radius=view.length,
            header_for=header_for,
            tail=b"",
            max_n=limits.max_positions,
            max_bytes=limits.max_bytes,
        )

    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["query", "key"],
        "properties": {
            "bidirectional": {"type": "boolean", "default": True},
            "num_buckets": {"type": "integer", "minimum": 2, "default": 32},
            "max_distance": {"type": "integer", "minimum": 1, "default": 128},
            "query": SELECTION_SCHEMA,
            "key": SELECTION_SCHEMA,
        },
    }
    examples = {
        "encoder block": {"value": {"query": {"start": 0, "stop": 8}, "key": {"start": 0, "stop": 8}}},
        "decoder step": {"value": {"bidirectional": False, "query": [100], "key": {"start": 0, "stop": 101}}},
    }


FAMILY = T5Buckets()
