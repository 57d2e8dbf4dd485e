"""Absolute sinusoidal encodings (formulas in docs/reference.md, sinusoidal).

Layouts (a registry: name -> column arrangement of one sin/cos table):
- interleaved: "Attention Is All You Need" / DistilBERT ``_create_sinusoidal_embeddings``:
  PE[p, 2k] = sin(p·ω_k), PE[p, 2k+1] = cos(p·ω_k), ω_k = base^(−2k/d).
- concat: Marian / RoFormer / Pegasus ``create_weight``: ceil(d/2) sin columns, then floor(d/2)
  cos columns, same ω_k.
- fairseq: fairseq / tensor2tensor / M2M100 ``get_embedding``: h = d//2, ω_k = base^(−k/(h−1)),
  [sin | cos], a zero column appended for odd d (transformers computes it in float32; we use
  float64).
- fairseq_cos_first: AudioCraft's MusicGen (transformers ``MusicgenSinusoidalPositionalEmbedding
  .get_embedding``): the fairseq frequencies with the halves swapped, [cos | sin], a zero column
  appended for odd d.
interleaved and concat share their numbers, so one stored table ("aiayn") serves both; the two
fairseq layouts share the other ("fairseq").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from .. import kernels
from ..core import dtypes as _dt
from ..core.errors import SpecError
from ..core.fields import refuse_unknown, req_choice, req_float, req_int, require_object
from .base import CHUNK, DTYPE_SCHEMA, SELECTION_SCHEMA, Family, Output, PastRows, RowPlan, TableDef


def _aiayn_freqs(d: int, base: float) -> np.ndarray:
    # ceil(d/2) frequencies ω_k = base^(−2k/d): with odd d the last sin column has exponent (d−1)/d
    return np.power(float(base), -np.arange(0, d, 2, dtype=np.float64) / d)


def _fairseq_freqs(d: int, base: float) -> np.ndarray:
    h = d // 2
    return np.exp(np.arange(h, dtype=np.float64) * -(np.log(base) / (h - 1)))


@dataclasses.dataclass(frozen=True)
class Layout:
    table: str  # which stored table: "aiayn" or "fairseq"
    min_d: int
    canonical: str  # the layout a stored table's spec carries (one per stored table)


INTERLEAVED, CONCAT, FAIRSEQ, FAIRSEQ_COS_FIRST = "interleaved", "concat", "fairseq", "fairseq_cos_first"
LAYOUTS: dict[str, Layout] = {
    INTERLEAVED: Layout("aiayn", 2, CONCAT),
    CONCAT: Layout("aiayn", 2, CONCAT),
    FAIRSEQ: Layout("fairseq", 4, FAIRSEQ),  # h − 1 = 0 divides by zero for d in {2, 3}
    FAIRSEQ_COS_FIRST: Layout("fairseq", 4, FAIRSEQ),
}
DEFAULT_LAYOUT = INTERLEAVED  # "Attention Is All You Need"


@dataclasses.dataclass(frozen=True)
class SinusoidalSpec:
    d_model: int
    base: float = 10000.0
    layout: str = DEFAULT_LAYOUT
    offset: int = 0

    @property
    def table(self) -> str:
        return LAYOUTS[self.layout].table

    def freqs(self) -> np.ndarray:
        return (_aiayn_freqs if self.table == "aiayn" else _fairseq_freqs)(self.d_model, self.base)


def parse_spec(req: Mapping) -> SinusoidalSpec:
    require_object(req)
    refuse_unknown(req, Sinusoidal.fields)
    layout = req_choice(req, "layout", (), tuple(LAYOUTS), DEFAULT_LAYOUT)
    min_d = LAYOUTS[layout].min_d
    d = req_int(req, "d_model", (), lo=2)
    if d < min_d:
        raise SpecError(("d_model",), f"must be >= {min_d} for layout {layout!r}, got {d}")
    base = req_float(req, "base", (), gt=1.0, required=False, default=10000.0)
    offset = req_int(req, "offset", (), lo=0, required=False, default=0)
    return SinusoidalSpec(d_model=d, base=base, layout=layout, offset=offset)


ROW_LIMIT = 2**53  # position + offset stays below it (a float64 angle's position is exact)


def table_rows(spec: SinusoidalSpec, rows: np.ndarray, dtype: str) -> np.ndarray:
    """Stored form, [n, width]: sin columns then cos columns (fairseq: h sin, h cos; aiayn:
    ceil(d/2) sin, floor(d/2) cos). ``rows`` are table rows, i.e. position + offset."""
    cos, sin = kernels.cos_sin(spec.freqs(), rows, 1.0, dtype)
    return stored_columns(cos, sin, spec)


def stored_columns(cos: np.ndarray, sin: np.ndarray, spec: SinusoidalSpec) -> np.ndarray:
    """The stored row of its cos and sin [n, len(freqs)] (numbers, or item numbers)."""
    n_cos = spec.d_model // 2  # odd d (aiayn): one more sin column than cos columns
    return np.concatenate([sin, cos[:, :n_cos]], axis=1)


def arrange(stored: np.ndarray, spec: SinusoidalSpec) -> np.ndarray:
    """Stored [sin | cos] rows -> the layout's columns."""
    d = spec.d_model
    if spec.layout == CONCAT:
        return stored
    if spec.layout == INTERLEAVED:
        out = np.empty((stored.shape[0], d), dtype=stored.dtype)
        n_sin = (d + 1) // 2
        out[:, 0::2] = stored[:, :n_sin]
        out[:, 1::2] = stored[:, n_sin:]
        return out
    if spec.layout == FAIRSEQ_COS_FIRST:
        h = d // 2
        stored = np.concatenate([stored[:, h:], stored[:, :h]], axis=1)
    if d % 2:  # fairseq: zero column appended for odd d
        return np.concatenate([stored, np.zeros((stored.shape[0], 1), stored.dtype)], axis=1)
    return stored


class Sinusoidal(Family):
    name = "sinusoidal"
    fields = ("d_model", "base", "layout", "offset", "positions", "dtype")
    selections = ("positions",)
    outputs = (
        Output(
            "encoding", ("n", "d_model"), lambda spec, sel: (sel["positions"].n, spec.d_model), batched=True
        ),
    )

    def parse_spec(self, req):
        return parse_spec(req)

    def check_selections(self, spec, sel):
        if sel["positions"].max + spec.offset >= ROW_LIMIT:
            raise SpecError(("offset",), "position + offset must stay below 2**53")

    def compute(self, spec, sel, dtype):
        rows = sel["positions"].array() + spec.offset
        return {"encoding": arrange(table_rows(spec, rows, dtype), spec)}

    # -- stored tables: [N, width] of sin columns then cos columns; offset shifts rows -------
    def table_for(self, spec, dtype, sel, length):
        return TableDef(
            self.name,
            dataclasses.replace(spec, layout=LAYOUTS[spec.layout].canonical, offset=0),
            dtype,
            length,
        )

    def reach(self, spec, sel):
        return sel["positions"].max + spec.offset + 1

    def table_key(self, tspec, variant):
        return {"family": "sinusoidal", "table": tspec.table, "d_model": tspec.d_model, "base": tspec.base}

    def table_spec(self, key):
        canon = {layout.table: layout.canonical for layout in LAYOUTS.values()}
        try:
            req = {"d_model": key["d_model"], "base": key["base"], "layout": canon[key["table"]]}
        except (KeyError, TypeError):
            raise SpecError(("table",), "not a sinusoidal table key") from None
        return parse_spec(req), None

    def layout(self, t):
        h = t.spec.freqs().shape[0]  # freqs64: what a reader computes rows past the table from
        return {
            "table": ((t.length, h + t.spec.d_model // 2), _dt.DTYPES[t.dtype].name),
            "freqs64": ((h,), "float64"),
        }

    def fill(self, t, out):
        out["freqs64"][...] = t.spec.freqs()
        for lo in range(0, t.length, CHUNK):
            rows = np.arange(lo, min(t.length, lo + CHUNK), dtype=np.int64)
            out["table"][lo : lo + rows.size] = table_rows(t.spec, rows, t.dtype)
        return {}

    def serve(self, view, spec, sel, dtype):
        rows = sel["positions"].array() + spec.offset
        if sel["positions"].max + spec.offset >= view.length:  # past the table: computed exactly
            inside = rows < view.length
            stored = np.empty((rows.shape[0], view.table.shape[1]), view.table.dtype)
            stored[inside] = view.table[rows[inside]]
            stored[~inside] = table_rows(spec, rows[~inside], dtype)
        else:
            stored = np.empty((rows.shape[0], view.table.shape[1]), view.table.dtype)
            kernels.gather_rows(view.table, rows, stored)
        return {"encoding": arrange(stored, spec)}

    # -- the hot path ------------------------------------------------------------------------
    def row_plan(self, req, view):
        """Rows of the stored [sin | cos] table through the layout's column map: the engine's own
        ``arrange`` applied to column numbers + 1 (its zero column becomes -1); rows past the
        table are computed as ``serve`` computes them (the stored row of one row's [cos | sin]:
        item numbers 0..h-1, h..2h-1)."""
        spec = req.spec
        colmap = (arrange(np.arange(1, view.table.shape[1] + 1)[None, :], spec)[0] - 1).tolist()
        freqs = spec.freqs()
        h = freqs.shape[0]
        items = stored_columns(np.arange(h)[None, :], h + np.arange(h)[None, :], spec)[0]
        past = PastRows(
            freqs=freqs, scale=1.0, dtype=req.dtype, maps=(tuple(items.tolist()),), row_limit=ROW_LIMIT
        )
        return RowPlan(arrays=(view.table,), colmap=tuple(colmap), offset=spec.offset, past=past)

    def template(self, hot, req, view, limits):
        """The row plan's RowsTemplate (lists or ranges)."""
        spec, dtype = req.spec, req.dtype
        st = _dt.DTYPES[dtype]

        def header_for(n: int) -> bytes:
            return self.safetensors_header({"encoding": np.empty((n, spec.d_model), st)}, dtype, req.shown)

        return hot.RowsTemplate(
            plan=self.row_plan(req, view),
            max_rows=limits.max_rows,
            lists_only=False,
            header_for=header_for,
            tail=b"",
        )

    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["d_model", "positions"],
        "properties": {
            "d_model": {"type": "integer", "minimum": 2},
            "base": {"type": "number", "exclusiveMinimum": 1, "default": 10000.0},
            "layout": {"type": "string", "enum": list(LAYOUTS), "default": DEFAULT_LAYOUT},
            "offset": {"type": "integer", "minimum": 0, "default": 0},
            "positions": SELECTION_SCHEMA,
            "dtype": DTYPE_SCHEMA,
        },
    }
    examples = {
        "transformer-base": {"value": {"d_model": 512, "positions": [0, 1, 2, 3]}},
        "M2M100 (fairseq, padding_idx 1)": {
            "value": {"d_model": 1024, "layout": FAIRSEQ, "offset": 2, "positions": {"start": 0, "stop": 8}}
        },
    }


FAMILY = Sinusoidal()
