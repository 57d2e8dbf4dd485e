"""What the engine stores for each family, and which stored table serves a request.

A ``TableDef`` is a table's identity (a canonical key that also names its segment and its
manifest entry) plus how to build it. Stored forms avoid waste (issue #3):
- rope: half-width cos and sin [N, d/2] (both layouts are column arrangements of them),
  already times attention_scaling, plus inv_freq in float64 and float32;
- sinusoidal: [N, width] of sin columns then cos columns; interleaved and concat share one table;
- alibi: dist[h, δ] = −m_h·δ for δ in [0, L) in the output dtype (every block cell is ± one of
  these), plus the float64 slopes;
- t5-buckets: the bucket of every rel in [−max_distance, max_distance].
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from typing import Any, Mapping

import numpy as np

from . import dtypes as _dt
from .tables import alibi, rope, sinusoidal, t5

DEFAULT_LENGTH = 131072
T5_MAX_LUT_RADIUS = 1 << 22
CHUNK = 8192  # rows per build step


@dataclasses.dataclass(frozen=True)
class TableDef:
    family: str
    spec: Any            # the family's frozen spec
    dtype: str | None
    length: int          # rows (rope, sinusoidal), distances (alibi), radius (t5)
    variant: Any = None  # rope: None, 'short'/'long' (longrope) or L (dynamic)

    @functools.cached_property
    def key(self) -> str:
        if self.family == "rope":
            base = self.spec.table_key(self.variant)
        else:
            base = self.spec.table_key()
        # The length is not part of the identity: any stored length serves a request (rows past
        # it are computed), so readers find a table whatever length the engine was configured with.
        return json.dumps({"table": json.loads(base), "dtype": self.dtype}, sort_keys=True, separators=(",", ":"))

    @functools.cached_property
    def digest(self) -> str:
        return hashlib.sha1(self.key.encode()).hexdigest()[:20]

    def nbytes(self) -> int:
        return sum(int(np.prod(shape)) * np.dtype(dt).itemsize for shape, dt in self.layout().values())

    def layout(self) -> dict[str, tuple[tuple, str]]:
        """name -> (shape, numpy dtype name) of every array in the segment."""
        st = _dt.DTYPES[self.dtype].name if self.dtype else None
        n = self.length
        if self.family == "rope":
            h = self.spec.d // 2
            return {"cos": ((n, h), st), "sin": ((n, h), st), "inv_freq64": ((h,), "float64"),
                    "inv_freq": ((h,), "float32")}
        if self.family == "sinusoidal":
            return {"table": ((n, self.spec.freqs().shape[0] + self.spec.d_model // 2), st)}
        if self.family == "alibi":
            return {"dist": ((self.spec.num_heads, n), st), "slopes": ((self.spec.num_heads,), "float64")}
        return {"lut": ((2 * n + 1,), "int32")}

    def build(self) -> tuple[dict[str, np.ndarray], dict]:
        """The arrays (freshly allocated) and scalar metadata."""
        out = {name: np.empty(shape, dtype) for name, (shape, dtype) in self.layout().items()}
        return out, self.fill(out)

    def fill(self, out: dict[str, np.ndarray]) -> dict:
        """Write the table into preallocated arrays (e.g. views of a new segment), CHUNK rows at a
        time so a build never holds the whole table in float64. Returns scalar metadata."""
        n = self.length
        if self.family == "rope":
            inv, scaling = rope.frequencies(self.spec, rope_seq_len(self.spec, self.variant))
            out["inv_freq64"][...] = inv
            out["inv_freq"][...] = inv.astype(np.float32)
            for lo in range(0, n, CHUNK):
                rows = np.arange(lo, min(n, lo + CHUNK), dtype=np.int64)
                out["cos"][lo:lo + rows.size], out["sin"][lo:lo + rows.size] = rope.half_rows(
                    inv, scaling, rows, self.dtype)
            return {"attention_scaling": float(scaling)}
        if self.family == "sinusoidal":
            for lo in range(0, n, CHUNK):
                rows = np.arange(lo, min(n, lo + CHUNK), dtype=np.int64)
                out["table"][lo:lo + rows.size] = sinusoidal.table_rows(self.spec, rows, self.dtype)
            return {}
        if self.family == "alibi":
            m = alibi.slopes_f64(self.spec.num_heads, self.spec.max_bias)
            out["slopes"][...] = m
            for lo in range(0, n, CHUNK):
                out["dist"][:, lo:lo + CHUNK] = alibi_dist(m, np.arange(lo, min(n, lo + CHUNK), dtype=np.int64),
                                                           self.dtype)
            return {}
        out["lut"][...] = t5.lut(self.spec)
        return {}


def alibi_dist(m: np.ndarray, deltas: np.ndarray, dtype: str) -> np.ndarray:
    """−m_h·δ rounded once (δ >= 0; δ = 0 gives +0.0). Cells past the dtype's range become
    ±inf here; readers never serve them (they compute, and refuse, instead)."""
    with np.errstate(over="ignore"):
        v = m[:, None] * (-deltas).astype(np.float64)[None, :]
        if dtype == "bfloat16":
            return _dt.f64_to_bf16_bits(v)
        return v.astype(_dt.DTYPES[dtype])


def alibi_finite_length(dist: np.ndarray, dtype: str) -> int:
    """Number of leading distances whose every head is finite."""
    vals = _dt.to_float(dist, dtype)
    bad = ~np.isfinite(vals).all(axis=0)
    return int(np.argmax(bad)) if bad.any() else dist.shape[1]


def rope_seq_len(spec, variant) -> int:
    if variant == "long":
        return spec.p["original_max_position_embeddings"] + 1
    if isinstance(variant, int):
        return variant
    return 1


def table_for(family: str, spec, dtype: str | None, sel: Mapping, length: int = DEFAULT_LENGTH):
    """The stored table that serves this request, or None when no stable table fits (dynamic NTK
    past M: its frequencies change with every sequence length, so those rows are computed)."""
    if family == "rope":
        v = rope.variant(spec, rope.effective_seq_len(spec, sel["positions"]))
        if spec.rope_type == "dynamic" and v != spec.max_position_embeddings:
            return None
        return TableDef("rope", _strip_rope(spec), dtype, length, v)
    if family == "sinusoidal":
        return TableDef("sinusoidal", dataclasses.replace(spec, layout=_canon_layout(spec), offset=0),
                        dtype, length)
    if family == "alibi":
        return TableDef("alibi", alibi.AlibiSpec(num_heads=spec.num_heads, max_bias=spec.max_bias), dtype, length)
    if spec.max_distance > T5_MAX_LUT_RADIUS:
        return None
    return TableDef("t5-buckets", spec, None, spec.max_distance)


def stable_tables(family: str, spec, dtype: str | None, length: int = DEFAULT_LENGTH) -> list[TableDef]:
    """Every stable table a configured spec needs (longrope has two frequency sets)."""
    if family == "rope":
        s = _strip_rope(spec)
        if spec.rope_type == "longrope":
            return [TableDef("rope", s, dtype, length, "short"), TableDef("rope", s, dtype, length, "long")]
        if spec.rope_type == "dynamic":
            return [TableDef("rope", s, dtype, length, spec.max_position_embeddings)]
        return [TableDef("rope", s, dtype, length, None)]
    t = table_for(family, spec, dtype, {}, length) if family != "rope" else None
    return [t] if t else []


def _strip_rope(spec):
    # layout and seq_len arrange or select, and M matters only where it feeds the formula
    # (dynamic; longrope's default attention factor), so none of them splits a table.
    keep_m = spec.rope_type in ("dynamic", "longrope")
    return dataclasses.replace(spec, layout="half_split", seq_len=None,
                               max_position_embeddings=spec.max_position_embeddings if keep_m else None)


def _canon_layout(spec) -> str:
    return "concat" if spec.table == "aiayn" else "fairseq"
