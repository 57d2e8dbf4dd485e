"""Absolute sinusoidal encodings (SEMANTICS.md §3).

Layouts (a registry: name -> column arrangement of one sin/cos table):
- interleaved: "Attention Is All You Need" / DistilBERT ``_create_sinusoidal_embeddings``:
  PE[p, 2k] = sin(p·ω_k), PE[p, 2k+1] = cos(p·ω_k), ω_k = base^(−2k/d).
- concat: Marian / RoFormer / Pegasus ``create_weight``: ceil(d/2) sin columns, then floor(d/2)
  cos columns, same ω_k.
- fairseq: fairseq / tensor2tensor / M2M100 ``get_embedding``: h = d//2, ω_k = base^(−k/(h−1)),
  [sin | cos], a zero column appended for odd d (transformers computes it in float32; we use
  float64).
interleaved and concat share their numbers, so one stored table ("aiayn") serves both.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Mapping

import numpy as np

from .. import dtypes as _dt
from ..errors import SpecError
from ..fields import refuse_unknown, req_choice, req_float, req_int, require_object
from ..selection import Selection, parse_selection

FIELDS = ("d_model", "base", "layout", "offset", "positions", "dtype")
SELECTIONS = ("positions",)


def _aiayn_freqs(d: int, base: float) -> np.ndarray:
    # ceil(d/2) frequencies ω_k = base^(−2k/d): with odd d the last sin column has exponent (d−1)/d
    return np.power(float(base), -np.arange(0, d, 2, dtype=np.float64) / d)


def _fairseq_freqs(d: int, base: float) -> np.ndarray:
    h = d // 2
    return np.exp(np.arange(h, dtype=np.float64) * -(np.log(base) / (h - 1)))


@dataclasses.dataclass(frozen=True)
class Layout:
    table: str            # which stored table family: "aiayn" or "fairseq"
    min_d: int


LAYOUTS: dict[str, Layout] = {
    "interleaved": Layout("aiayn", 2),
    "concat": Layout("aiayn", 2),
    "fairseq": Layout("fairseq", 4),  # h − 1 = 0 divides by zero for d in {2, 3}
}


@dataclasses.dataclass(frozen=True)
class SinusoidalSpec:
    d_model: int
    base: float = 10000.0
    layout: str = "interleaved"
    offset: int = 0

    @property
    def table(self) -> str:
        return LAYOUTS[self.layout].table

    def table_key(self) -> str:
        return json.dumps({"family": "sinusoidal", "table": self.table, "d_model": self.d_model,
                           "base": self.base}, sort_keys=True, separators=(",", ":"))

    def freqs(self) -> np.ndarray:
        return (_aiayn_freqs if self.table == "aiayn" else _fairseq_freqs)(self.d_model, self.base)


def parse_spec(req: Mapping) -> SinusoidalSpec:
    require_object(req)
    refuse_unknown(req, FIELDS)
    layout = req_choice(req, "layout", (), tuple(LAYOUTS), "interleaved")
    min_d = LAYOUTS[layout].min_d
    d = req_int(req, "d_model", (), lo=2)
    if d < min_d:
        raise SpecError(("d_model",), f"must be >= {min_d} for layout {layout!r}, got {d}")
    base = req_float(req, "base", (), gt=1.0, required=False, default=10000.0)
    offset = req_int(req, "offset", (), lo=0, required=False, default=0)
    return SinusoidalSpec(d_model=d, base=base, layout=layout, offset=offset)


def parse(req: Mapping):
    spec = parse_spec(req)
    sel = parse_selection(req.get("positions"), ("positions",))
    if sel.max + spec.offset >= 2**53:
        raise SpecError(("offset",), "position + offset must stay below 2**53")
    return spec, {"positions": sel}


def table_rows(spec: SinusoidalSpec, rows: np.ndarray, dtype: str) -> np.ndarray:
    """Stored form, [n, width]: sin columns then cos columns (fairseq: h sin, h cos; aiayn:
    ceil(d/2) sin, floor(d/2) cos). ``rows`` are table rows, i.e. position + offset."""
    w = spec.freqs()
    cos, sin = _dt.sincos(w, rows, 1.0, dtype)
    n_cos = spec.d_model // 2  # odd d (aiayn): one more sin column than cos columns
    return np.concatenate([sin, cos[:, :n_cos]], axis=1)


def arrange(stored: np.ndarray, spec: SinusoidalSpec) -> np.ndarray:
    """Stored [sin | cos] rows -> the layout's columns."""
    d = spec.d_model
    if spec.layout == "concat":
        return stored
    if spec.layout == "interleaved":
        out = np.empty((stored.shape[0], d), dtype=stored.dtype)
        n_sin = (d + 1) // 2
        out[:, 0::2] = stored[:, :n_sin]
        out[:, 1::2] = stored[:, n_sin:]
        return out
    if d % 2:  # fairseq: zero column appended for odd d
        return np.concatenate([stored, np.zeros((stored.shape[0], 1), stored.dtype)], axis=1)
    return stored


def output_nbytes(spec: SinusoidalSpec, n: int, dtype: str) -> int:
    return n * spec.d_model * _dt.DTYPES[dtype].itemsize


def compute(spec: SinusoidalSpec, sel: Mapping[str, Selection], dtype: str) -> dict:
    rows = sel["positions"].array() + spec.offset
    return {"encoding": arrange(table_rows(spec, rows, dtype), spec)}
