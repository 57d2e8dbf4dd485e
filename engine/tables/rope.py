"""RoPE cos/sin (rotary position embeddings) with every scaling transformers ships.

Reference: transformers 5.24 ``modeling_rope_utils.py`` and ``LlamaRotaryEmbedding.forward``;
formulas in docs/reference.md, rope. Everything is evaluated in float64 (transformers uses
float32) and rounded once to the output dtype; ``inv_freq`` is the float32 rounding of the float64
frequencies actually used. The rope types themselves (frequencies, validators, which stable sets
they store) are ``rope_types.ROPE_TYPES``; the request's spec and its parsing are rope_spec.py.
This module is the family: what a rope table stores, how it is filled, served and templated.

Stored: half-width cos and sin [N, d/2], already times attention_scaling (both layouts are column
arrangements of them), plus inv_freq in float64 and float32. Layout, seq_len and M (where M does
not feed the formula) never split a table.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import kernels
from ..core import dtypes as _dt
from ..core.errors import SpecError
from ..core.selection import POSITION_LIMIT, Selection
from . import rope_axes as axes
from . import rope_grid
from .base import CHUNK, DTYPE_SCHEMA, SELECTION_SCHEMA, Family, Output, PastRows, RowPlan, TableDef
from .rope_spec import (
    DEFAULT_LAYOUT,
    FIELDS,
    HALF_SPLIT,
    INTERLEAVED,
    LAYOUTS,
    MAX_HEAD_DIM,
    RopeSpec,
    frequencies,
    parse_spec,
)
from .rope_types import ROPE_TYPES

# ---------------------------------------------------------------------------------------------
# Rows


def effective_seq_len(spec: RopeSpec, positions: Selection) -> int:
    """dynamic / longrope pick frequencies from the sequence length: the request's seq_len, else
    max(position) + 1 (a fresh module's value; docs/reference.md on dynamic's runtime state)."""
    return spec.seq_len if spec.seq_len is not None else positions.max + 1


def half_rows(inv_freq: np.ndarray, scaling: float, positions: np.ndarray, dtype: str, coords=None):
    """cos and sin of p·inv_freq (float64 angles), times attention_scaling, rounded once:
    two [n, d/2] arrays. Both layouts are column arrangements of these. ``coords``: each column's
    coordinate of p (rope_grid.coords_of)."""
    if coords is not None:
        return rope_grid.cos_sin(inv_freq, scaling, positions, dtype, coords)
    return kernels.cos_sin(inv_freq, positions, scaling, dtype)


def expand(half: np.ndarray, layout: str) -> np.ndarray:
    """Half width -> rotary width. half_split (Llama rotate_half): [h | h]; interleaved (GPT-J
    rotate_every_two): each column twice, [c0, c0, c1, c1, ...]."""
    if layout == HALF_SPLIT:
        return np.concatenate([half, half], axis=-1)
    return np.repeat(half, 2, axis=-1)


def _strip(spec: RopeSpec) -> RopeSpec:
    """The table spec: layout and seq_len arrange or select, and M matters only where it feeds
    the formula (dynamic; longrope's default attention factor), so none of them splits a table."""
    stripped = dataclasses.replace(
        spec,
        layout=DEFAULT_LAYOUT,
        seq_len=None,
        mrope_section=None,
        mrope_interleaved=False,
        mrope_axes=None,
        max_position_embeddings=spec.max_position_embeddings if spec.type.needs_max_position else None,
    )
    return rope_grid.keep_dealing(stripped, spec)  # coordinates follow each column's axis


def _rows(spec, sel) -> tuple[int, int]:
    """The shape of ``cos`` and ``sin``: a row of width d per position."""
    return axes.positions_of(sel).n, spec.d


class Rope(Family):
    name = "rope"
    fields = FIELDS
    selections = ("positions",)
    selection_fields = ("positions", "position_ids")
    axis_fields = frozenset({"position_ids"})
    outputs = (
        Output("cos", ("n", "d"), _rows, batched=True, note=", times attention_scaling"),
        Output("sin", ("n", "d"), _rows, batched=True, note=", times attention_scaling"),
        Output(
            "inv_freq", ("d/2",), lambda spec, sel: (spec.d // 2,), "float32", note=": the frequencies used"
        ),
        Output("attention_scaling", (), None, "float64", note="the factor cos and sin carry"),
    )

    def parse_spec(self, req):
        return parse_spec(req)

    def parse_selections(self, spec, req):
        return axes.selections(spec, req)

    def probe_selections(self, spec, position):
        return axes.probe(spec, position) or super().probe_selections(spec, position)

    def spec_json(self, spec):
        scaling = {
            "rope_type": spec.rope_type,
            **{k: list(v) if isinstance(v, tuple) else v for k, v in spec.params if v is not None},
        }
        out = {
            "head_dim": spec.head_dim,
            "rope_theta": spec.rope_theta,
            "partial_rotary_factor": spec.partial_rotary_factor,
            "rope_scaling": scaling,
            "max_position_embeddings": spec.max_position_embeddings,
            "seq_len": spec.seq_len,
            "layout": spec.layout,
            "mrope_section": spec.mrope_section and list(spec.mrope_section),
            "mrope_interleaved": spec.mrope_interleaved or None,
            "axes_dim": spec.axes_dim and list(spec.axes_dim),
            "mrope_axes": spec.mrope_axes and list(spec.mrope_axes),
            **rope_grid.spec_json(spec),
        }
        if spec.inv_freq is not None:  # it stands for rope_theta
            del out["rope_theta"]
        return {k: v for k, v in out.items() if v is not None}

    def compute(self, spec, sel, dtype):
        positions = axes.positions_of(sel)
        inv, scaling = frequencies(spec, effective_seq_len(spec, positions))
        if "position_ids" in sel:  # each column at its axis's position (rope_axes.py)
            cos, sin = axes.computed(
                lambda p: half_rows(inv, scaling, p, dtype, rope_grid.coords_of(spec)),
                positions.array(),
                *axes.spec_column_map(spec)[:2],
            )
            return {
                "cos": cos,
                "sin": sin,
                "inv_freq": inv.astype(np.float32),
                "attention_scaling": float(scaling),
            }
        cos, sin = half_rows(inv, scaling, positions.array(), dtype, rope_grid.coords_of(spec))
        return {
            "cos": expand(cos, spec.layout),
            "sin": expand(sin, spec.layout),
            "inv_freq": inv.astype(np.float32),
            "attention_scaling": float(scaling),
        }

    # -- stored tables -------------------------------------------------------------------------
    def variant_of(self, spec, sel):
        rt = spec.type
        return rt.variant(spec, effective_seq_len(spec, axes.positions_of(sel))) if rt.uses_seq_len else None

    def table_for(self, spec, dtype, sel, length):
        rt = spec.type
        v = self.variant_of(spec, sel) if sel else rt.stable_variants(spec)[0]
        if not rt.stores(spec, v):  # dynamic NTK past M: frequencies change with every length
            return None
        return TableDef(self.name, _strip(spec), dtype, length, v)

    def stable_tables(self, spec, dtype, length):
        return [TableDef(self.name, _strip(spec), dtype, length, v) for v in spec.type.stable_variants(spec)]

    def reach(self, spec, sel):
        return axes.positions_of(sel).max + 1

    def table_key(self, tspec, variant):
        key = {
            "family": "rope",
            "d": tspec.d,
            "rope_theta": tspec.rope_theta,
            "rope_type": tspec.rope_type,
            "params": tspec.params,
            "max_position_embeddings": tspec.max_position_embeddings,
            "variant": variant,
        }
        if tspec.axes_dim is not None:  # its own frequencies per axis block
            key["axes_dim"] = tspec.axes_dim
        if tspec.rotary_dim != tspec.d:  # an odd rotary width: its exponents are over it, not d
            key["rotary_dim"] = tspec.rotary_dim
        key.update(rope_grid.table_key(tspec))
        if tspec.type.pads_zeros:  # proportional: the factor picks which frequencies are 0
            key["partial_rotary_factor"] = tspec.partial_rotary_factor
        return key

    def table_spec(self, key):
        try:
            scaling = {"rope_type": key["rope_type"], **{k: v for k, v in key["params"]}}
            req = {
                "head_dim": key.get("rotary_dim", key["d"]),
                "rope_theta": key["rope_theta"],
                "rope_scaling": scaling,
                "max_position_embeddings": key["max_position_embeddings"],
                "partial_rotary_factor": key.get("partial_rotary_factor"),
                "axes_dim": key.get("axes_dim"),
                **rope_grid.from_key(key),
            }
            if req["inv_freq"] is not None:
                del req["rope_theta"]
            variant = key["variant"]
        except (KeyError, TypeError, ValueError):
            raise SpecError(("table",), "not a rope table key") from None
        spec = _strip(parse_spec(req))
        if variant not in spec.type.stable_variants(spec):
            raise SpecError(("table", "variant"), f"not a stored frequency set of {spec.rope_type!r}")
        return spec, variant

    def layout(self, t):
        h = t.spec.d // 2
        st = _dt.DTYPES[t.dtype].name
        return {
            "cos": ((t.length, h), st),
            "sin": ((t.length, h), st),
            "inv_freq64": ((h,), "float64"),
            "inv_freq": ((h,), "float32"),
        }

    def fill(self, t, out):
        inv, scaling = frequencies(t.spec, t.spec.type.seq_len_of(t.spec, t.variant))
        out["inv_freq64"][...] = inv
        out["inv_freq"][...] = inv.astype(np.float32)
        for lo in range(0, t.length, CHUNK):
            rows = np.arange(lo, min(t.length, lo + CHUNK), dtype=np.int64)
            out["cos"][lo : lo + rows.size], out["sin"][lo : lo + rows.size] = half_rows(
                inv, scaling, rows, t.dtype, rope_grid.coords_of(t.spec)
            )
        return {"attention_scaling": float(scaling), "rows_past": float(not t.spec.type.uses_seq_len)}

    def serve(self, view, spec, sel, dtype):
        inv64, scaling = view.inv_freq64, view.meta["attention_scaling"]
        if "position_ids" in sel:  # gathers through the column -> axis map (rope_axes.py)
            if sel["position_ids"].max >= view.length:
                return self.compute(spec, sel, dtype)
            half_col, axis, _ = axes.spec_column_map(spec)
            pos = sel["position_ids"].array()
            cos, sin = axes.gather((view.cos, view.sin), pos, half_col, axis)
            return {"cos": cos, "sin": sin, "inv_freq": view.inv_freq, "attention_scaling": float(scaling)}
        rows = sel["positions"].array()
        if sel["positions"].max >= view.length:  # past the table: computed exactly
            inside = rows < view.length
            past_cos, past_sin = half_rows(inv64, scaling, rows[~inside], dtype, rope_grid.coords_of(spec))
            cos = np.empty((rows.shape[0], view.cos.shape[1]), view.cos.dtype)
            sin = np.empty_like(cos)
            cos[inside], sin[inside] = view.cos[rows[inside]], view.sin[rows[inside]]
            cos[~inside], sin[~inside] = past_cos, past_sin
            full_cos, full_sin = expand(cos, spec.layout), expand(sin, spec.layout)
        else:  # one pass: gather + expand to width d
            full_cos = np.empty((rows.shape[0], 2 * view.cos.shape[1]), view.cos.dtype)
            full_sin = np.empty_like(full_cos)
            kernels.rope_expand(view.cos, rows, full_cos, spec.layout)
            kernels.rope_expand(view.sin, rows, full_sin, spec.layout)
        return {
            "cos": full_cos,
            "sin": full_sin,
            "inv_freq": view.inv_freq,  # read-only view
            "attention_scaling": float(scaling),
        }

    # -- the hot path ------------------------------------------------------------------------
    def row_plan(self, req, view):
        """Rows gathered from the half-width tables through a column map: the engine's own
        ``expand`` applied to column numbers, so every layout matches ``serve``; rows past the table
        are computed from the mapped float64 frequencies, as ``serve`` computes them (half_rows'
        [cos | sin] of one row: items 0..half-1 the stored cos row, half..2*half-1 the sin row).
        ``positions`` as a list or a range; not for types whose table follows the positions;
        ``position_ids`` (lists): rope_axes.row_plan."""
        spec = req.spec
        ids = req.body.get("position_ids")
        if (
            spec.type.uses_seq_len
            or spec.axes_coords is not None  # C computes rows past the table as p·f: not these
            or not isinstance(
                req.body.get("positions" if ids is None else "position_ids"),
                list if ids is not None else (list, dict),
            )
        ):
            return None
        half = view.cos.shape[1]
        past = PastRows(
            freqs=np.ascontiguousarray(view.inv_freq64),
            scale=float(view.meta["attention_scaling"]),
            dtype=req.dtype,
            maps=(tuple(range(half)), tuple(range(half, 2 * half))),
            row_limit=POSITION_LIMIT,
        )
        if ids is not None:
            return axes.row_plan(spec, view, past)
        colmap = tuple(expand(np.arange(half)[None, :], spec.layout)[0].tolist())
        return RowPlan(arrays=(view.cos, view.sin), colmap=colmap, past=past)

    def template(self, hot, req, view, limits):
        """The row plan's RowsTemplate: ``positions`` as a list or a range (``{start, stop[, step]}``,
        parsed in C as the pipeline parses it: a prefill or a feature batch sends ranges),
        ``position_ids`` as lists."""
        plan = self.row_plan(req, view)
        if plan is None:
            return None
        dtype, half, scaling = req.dtype, view.cos.shape[1], plan.past.scale
        st = _dt.DTYPES[dtype]

        def header_for(n: int) -> bytes:
            arrays = {
                "cos": np.empty((n, 2 * half), st),
                "sin": np.empty((n, 2 * half), st),
                "inv_freq": view.inv_freq,
                "attention_scaling": scaling,
            }
            return self.safetensors_header(arrays, dtype, req.shown)

        return hot.RowsTemplate(
            plan=plan,
            max_rows=limits.max_rows,
            lists_only=plan.axes is not None,
            header_for=header_for,
            tail=view.inv_freq.tobytes() + np.float64(scaling).tobytes(),
        )

    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["head_dim"],
        "properties": {
            "head_dim": {"type": "integer", "minimum": 2, "maximum": MAX_HEAD_DIM},
            "rope_theta": {"type": "number", "exclusiveMinimum": 0, "default": 10000.0},
            "partial_rotary_factor": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 1.0},
            "max_position_embeddings": {"type": ["integer", "null"], "minimum": 1},
            "rope_scaling": None,
            "rope_parameters": None,  # filled below from ROPE_TYPES
            "original_max_position_embeddings": {"type": ["integer", "null"], "minimum": 1},
            "seq_len": {"type": ["integer", "null"], "minimum": 1},
            "layout": {"type": "string", "enum": list(LAYOUTS), "default": DEFAULT_LAYOUT},
            **axes.SCHEMA,
            **rope_grid.SCHEMA,
            "positions": SELECTION_SCHEMA,
            "dtype": DTYPE_SCHEMA,
        },
    }
    examples = {
        "llama-3.1 decode step": {
            "value": {
                "head_dim": 128,
                "rope_theta": 500000.0,
                "max_position_embeddings": 131072,
                "rope_scaling": {
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192,
                },
                "positions": [4096],
                "dtype": _dt.BFLOAT16,
            }
        },
        "yarn prefill": {
            "value": {
                "head_dim": 64,
                "max_position_embeddings": 4096,
                "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
                "positions": {"start": 0, "stop": 16},
            }
        },
        "GPT-J interleaved, partial": {
            "value": {
                "head_dim": 256,
                "partial_rotary_factor": 0.25,
                "layout": INTERLEAVED,
                "positions": [0, 1, 2],
            }
        },
        **axes.EXAMPLES,
    }


_SCALING = {
    "type": ["object", "null"],
    "description": "transformers' rope_scaling / rope_parameters; keys by rope_type: "
    + "; ".join(f"{n}: {', '.join(t.keys) or '-'}" for n, t in ROPE_TYPES.items()),
    "properties": {
        "rope_type": {"type": "string", "enum": list(ROPE_TYPES)},
        "type": {"type": "string", "enum": list(ROPE_TYPES)},
        **{k: {} for k in sorted({k for t in ROPE_TYPES.values() for k in t.keys})},
    },
}
Rope.schema["properties"].update(rope_scaling=_SCALING, rope_parameters=_SCALING)
FAMILY = Rope()
