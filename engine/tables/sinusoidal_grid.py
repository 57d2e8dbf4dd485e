"""2-D and 3-D sin-cos tables over patch grids (docs/reference.md, sinusoidal-grid).

Reference: diffusers 0.42 ``get_2d_sincos_pos_embed`` / ``get_2d_sincos_pos_embed_from_grid`` /
``get_1d_sincos_pos_embed_from_grid`` (DiT, PixArt, SD3's ``PatchEmbed``), ``get_3d_sincos_pos_embed``
(CogVideoX's ``CogVideoXPatchEmbed``), MAE's ``util/pos_embed.py`` and transformers' ViTMAE.
- 1-D part of width E over coordinates c: [sin(c·ω_j) | cos(c·ω_j)], ω_j = 10000^(−j/(E/2)).
- 2-D (width D): the first D/2 columns encode the column (w) coordinate, the next D/2 the row (h)
  coordinate (MAE's swapped naming, kept by diffusers and transformers); rows h-major.
- coordinates along an axis of n patches: i / (n / base_size) / interpolation_scale (diffusers'
  base_size), or i / interpolation_scale without base_size (MAE, ViTMAE). Evaluated exactly
  (the float64 nearest the rational value), where the libraries round them through float32.
- 3-D (width D): D/4 columns for t / temporal_interpolation_scale, then the 2-D form of width 3D/4
  over i / interpolation_scale; rows t-major.
- ``extra_tokens`` rows of zeros come first (a CLS token; CogVideoX's text tokens).
- ``crop`` [top, left, height, width] (2-D): the rows are that window of the grid_size table, its
  coordinates the table's own (SD3's and OmniGen's centred crop of their ``pos_embed_max_size``
  table, ``PatchEmbed.cropped_pos_embed``).

Stored: the whole table (extra rows included) where it is small (``FULL_BYTES``): serving, and the
template shortcut, are then row gathers as for ``sinusoidal``; otherwise one small table per axis
([W, ·], [H, ·], and [T, ·] in 3-D) of the 1-D rows, a grid row being its axes' rows side by side.
Either way each value is rounded once to the dtype, so both give the computed bits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from fractions import Fraction

import numpy as np

from .. import kernels
from ..core import dtypes as _dt
from ..core.errors import SpecError
from ..core.fields import is_int, json_repr, refuse_unknown, req_float, req_int, require_object
from ..core.selection import POSITION_LIMIT, Selection, parse_selection
from .base import CHUNK, DTYPE_SCHEMA, SELECTION_SCHEMA, Family, Output, RowPlan, TableDef

BASE = 10000.0  # MAE / diffusers' fixed base
MAX_EMBED_DIM = 1 << 16
MAX_STORED_BYTES = 64 * 2**20  # a grid whose axis tables are larger is computed per request
FULL_BYTES = 32 * 2**20  # a whole table up to this size is stored as rows (variant "rows")
ROWS, AXES = "rows", "axes"  # the two stored forms (TableDef.variant)


@dataclasses.dataclass(frozen=True)
class GridSpec:
    embed_dim: int
    grid_h: int
    grid_w: int
    base_size: float | None = None
    interpolation_scale: float = 1.0
    temporal_size: int | None = None
    temporal_interpolation_scale: float = 1.0
    extra_tokens: int = 0
    crop: tuple[int, int, int, int] | None = None  # (top, left, height, width) of the grid

    @property
    def frames(self) -> int:
        return self.temporal_size or 1

    @property
    def shape(self) -> tuple[int, int]:
        """(height, width) of the rows' grid: the crop's, else the whole grid's."""
        return (self.grid_h, self.grid_w) if self.crop is None else (self.crop[2], self.crop[3])

    @property
    def rows(self) -> int:
        """Rows of the flattened table: extra tokens, then the grid (or its crop)."""
        h, w = self.shape
        return self.extra_tokens + self.frames * h * w

    @property
    def widths(self) -> dict[str, int]:
        """Columns of each axis's part, in output order (t, then w, then h)."""
        d = self.embed_dim
        if self.temporal_size is None:
            return {"w": d // 2, "h": d // 2}
        return {"t": d // 4, "w": 3 * d // 8, "h": 3 * d // 8}

    def sizes(self) -> dict[str, int]:
        h, w = self.shape
        return {"t": self.frames, "w": w, "h": h}

    def steps(self) -> dict[str, tuple[int, int]]:
        """Each axis's index of grid index g (row minus extra tokens, frame-major, then h, then
        w) as (div, mod): (g // div) % mod."""
        h, w = self.shape
        return {"t": (h * w, self.frames), "h": (w, h), "w": (1, w)}

    def coordinates(self, axis: str, idx: np.ndarray) -> np.ndarray:
        """The float64 nearest to each exact coordinate of indices ``idx`` (of the rows' grid,
        the crop's when there is one) along ``axis``."""
        first = 0
        if axis == "t":
            scale, n, base = self.temporal_interpolation_scale, None, None
        else:
            scale, base = self.interpolation_scale, self.base_size
            n = self.grid_w if axis == "w" else self.grid_h
            if self.crop is not None:
                first = self.crop[1] if axis == "w" else self.crop[0]
        step = 1 / Fraction(scale) if base is None else Fraction(base) / (n * Fraction(scale))
        return np.array([float((first + int(i)) * step) for i in idx], dtype=np.float64)


def axis_rows(spec: GridSpec, axis: str, idx: np.ndarray, dtype: str) -> np.ndarray:
    """[len(idx), width] 1-D rows [sin(c·ω) | cos(c·ω)] of axis coordinates, rounded once."""
    half = spec.widths[axis] // 2
    omega = 1.0 / np.power(BASE, np.arange(half, dtype=np.float64) / half)
    angle = np.multiply.outer(spec.coordinates(axis, idx), omega)
    return _dt.round_f64(np.concatenate([np.sin(angle), np.cos(angle)], axis=1), dtype)


def assemble(spec: GridSpec, rows: np.ndarray, lookup, dtype) -> np.ndarray:
    """Grid rows from per-axis rows: ``lookup(axis, indices)`` gives that axis's 1-D rows."""
    out = np.zeros((rows.shape[0], spec.embed_dim), dtype)
    grid = rows >= spec.extra_tokens
    g = rows[grid] - spec.extra_tokens
    idx = {axis: (g // div) % mod for axis, (div, mod) in spec.steps().items()}
    col = 0
    for axis, width in spec.widths.items():
        if g.size:
            out[grid, col : col + width] = lookup(axis, idx[axis])
        col += width
    return out


CROP = ("top", "left", "height", "width")


def _parse_crop(crop, hw, temporal) -> tuple[int, int, int, int] | None:
    """``crop`` [top, left, height, width]: a window inside the [H, W] grid (2-D only)."""
    if crop is None:
        return None
    if temporal is not None:
        raise SpecError(("crop",), "not used in 3-D (a crop is of a 2-D table)")
    if not isinstance(crop, (list, tuple)) or len(crop) != 4:
        raise SpecError(("crop",), f"must be [top, left, height, width], got {json_repr(crop)}")
    for i, (name, v) in enumerate(zip(CROP, crop)):
        lo = 0 if i < 2 else 1
        if not is_int(v) or v < lo:
            raise SpecError(("crop", i), f"{name} must be an integer >= {lo}, got {json_repr(v)}")
    top, left, h, w = crop
    for i, (first, n, side) in enumerate(((top, h, hw[0]), (left, w, hw[1]))):
        if first + n > side:
            raise SpecError(
                ("crop", i + 2),
                f"the crop's {CROP[i + 2]} from {CROP[i]} {first} reaches {first + n}, "
                f"past grid_size's {side}",
            )
    return (top, left, h, w)


def parse_spec(req: Mapping) -> GridSpec:
    require_object(req)
    refuse_unknown(req, SinusoidalGrid.fields)
    temporal = req_int(req, "temporal_size", (), lo=1, required=False)
    d = req_int(req, "embed_dim", (), lo=4, hi=MAX_EMBED_DIM)
    unit = 16 if temporal is not None else 4
    if d % unit:
        raise SpecError(
            ("embed_dim",),
            f"must be divisible by {unit}" + (" with temporal_size" if unit == 16 else "") + f", got {d}",
        )
    g = req.get("grid_size")
    if g is None:
        raise SpecError(("grid_size",), "field required", "missing")
    hw = [g, g] if is_int(g) else g
    if not isinstance(hw, (list, tuple)) or len(hw) != 2:
        raise SpecError(("grid_size",), f"must be an integer or [H, W], got {json_repr(g)}")
    for i, v in enumerate(hw):
        if not is_int(v) or v < 1:
            raise SpecError(
                ("grid_size",) if is_int(g) else ("grid_size", i),
                f"must be an integer >= 1, got {json_repr(v)}",
            )
    base = req_float(req, "base_size", (), gt=0.0, required=False)
    if base is not None and temporal is not None:
        raise SpecError(("base_size",), "not used in 3-D (get_3d_sincos_pos_embed has no base_size)")
    tis = req_float(req, "temporal_interpolation_scale", (), gt=0.0, required=False)
    if tis is not None and temporal is None:
        raise SpecError(("temporal_interpolation_scale",), "only with temporal_size")
    crop = _parse_crop(req.get("crop"), hw, temporal)
    spec = GridSpec(
        embed_dim=d,
        grid_h=hw[0],
        grid_w=hw[1],
        base_size=base,
        interpolation_scale=req_float(req, "interpolation_scale", (), gt=0.0, required=False, default=1.0),
        temporal_size=temporal,
        temporal_interpolation_scale=1.0 if tis is None else tis,
        extra_tokens=req_int(req, "extra_tokens", (), lo=0, required=False, default=0),
        crop=crop,
    )
    whole = spec.extra_tokens + spec.frames * spec.grid_h * spec.grid_w  # the crop's table too
    if whole > POSITION_LIMIT:
        raise SpecError(("grid_size",), f"the table has {whole} rows; rows are positions < 2**31")
    return spec


class SinusoidalGrid(Family):
    name = "sinusoidal-grid"
    fields = (
        "embed_dim",
        "grid_size",
        "base_size",
        "interpolation_scale",
        "temporal_size",
        "temporal_interpolation_scale",
        "extra_tokens",
        "crop",
        "positions",
        "dtype",
    )
    selections = ("positions",)
    outputs = (
        Output(
            "encoding",
            ("n", "embed_dim"),
            lambda spec, sel: (sel["positions"].n, spec.embed_dim),
            batched=True,
        ),
    )

    def parse_spec(self, req):
        return parse_spec(req)

    def spec_json(self, spec):
        out = dataclasses.asdict(spec)
        out["grid_size"] = [out.pop("grid_h"), out.pop("grid_w")]
        if spec.temporal_size is None:
            del out["temporal_interpolation_scale"]
        if spec.crop is not None:
            out["crop"] = list(spec.crop)
        return {k: v for k, v in out.items() if v is not None}

    def parse_selections(self, spec, req):
        """``positions`` is optional: absent means every row of the table."""
        if req.get("positions") is None:
            return {"positions": Selection(0, spec.rows, 1)}
        return {"positions": parse_selection(req.get("positions"), ("positions",))}

    def check_selections(self, spec, sel):
        s = sel["positions"]
        if s.max >= spec.rows:
            if s.values is None:
                raise SpecError(
                    ("positions", "stop"), f"must be <= the table's {spec.rows} rows, got {s.stop}"
                )
            i = int(np.argmax(s.values >= spec.rows))
            raise SpecError(
                ("positions", i),
                f"row {int(s.values[i])} is past the table's {spec.rows} rows "
                f"({spec.extra_tokens} extra + the grid)",
            )

    def compute(self, spec, sel, dtype):
        def lookup(axis, idx):
            uniq, inverse = np.unique(idx, return_inverse=True)
            return axis_rows(spec, axis, uniq, dtype)[inverse]

        return {"encoding": assemble(spec, sel["positions"].array(), lookup, _dt.DTYPES[dtype])}

    # -- stored tables: the whole table (small grids) or one 1-D table per axis ------------------
    def table_for(self, spec, dtype, sel, length):
        full = TableDef(self.name, spec, dtype, spec.rows, ROWS)
        if full.nbytes() <= FULL_BYTES:
            return full
        t = TableDef(
            self.name, dataclasses.replace(spec, extra_tokens=0), dtype, spec.rows - spec.extra_tokens, AXES
        )
        return t if t.nbytes() <= MAX_STORED_BYTES else None

    def stored_length(self, tspec, length):
        return tspec.rows

    def table_key(self, tspec, variant):
        return {"family": self.name, **self.spec_json(tspec), "variant": variant}

    def table_spec(self, key):
        if (
            not isinstance(key, Mapping)
            or key.get("family") != self.name
            or key.get("variant") not in (ROWS, AXES)
        ):
            raise SpecError(("table",), "not a sinusoidal-grid table key")
        spec = parse_spec({k: v for k, v in key.items() if k not in ("family", "variant")})
        if key["variant"] == AXES and spec.extra_tokens:
            raise SpecError(("table", "extra_tokens"), "not part of a stored axis table")
        return spec, key["variant"]

    def layout(self, t):
        st = _dt.DTYPES[t.dtype].name
        if t.variant == ROWS:
            return {"table": ((t.spec.rows, t.spec.embed_dim), st)}
        sizes = t.spec.sizes()
        return {axis: ((sizes[axis], width), st) for axis, width in t.spec.widths.items()}

    def fill(self, t, out):
        tables = {
            axis: axis_rows(t.spec, axis, np.arange(n), t.dtype)
            for axis, n in t.spec.sizes().items()
            if axis in t.spec.widths
        }
        if t.variant == AXES:
            for axis, rows in tables.items():
                out[axis][...] = rows
            return {}
        for lo in range(0, t.spec.rows, CHUNK):
            rows = np.arange(lo, min(t.spec.rows, lo + CHUNK), dtype=np.int64)
            out["table"][lo : lo + rows.size] = assemble(
                t.spec, rows, lambda a, i: tables[a][i], out["table"].dtype
            )
        return {}

    def serve(self, view, spec, sel, dtype):
        rows = sel["positions"].array()
        if "table" in view.arrays:  # the whole table: one gather
            out = np.empty((rows.shape[0], spec.embed_dim), view.table.dtype)
            kernels.gather_rows(view.table, rows, out)
            return {"encoding": out}
        return {"encoding": assemble(spec, rows, lambda axis, idx: view.arrays[axis][idx], _dt.DTYPES[dtype])}

    # -- the hot path: rows of the whole table (as sinusoidal's), or assembled as ``serve`` does ----
    def row_plan(self, req, view):
        """The whole table's rows, as they are (a table stored per axis: no row plan)."""
        if "table" not in view.arrays:
            return None
        return RowPlan(arrays=(view.table,), colmap=tuple(range(req.spec.embed_dim)))

    def template(self, hot, req, view, limits):
        if not isinstance(req.body.get("positions"), list):
            return None
        spec, st = req.spec, _dt.DTYPES[req.dtype]

        def header_for(n: int) -> bytes:
            return self.safetensors_header(
                {"encoding": np.empty((n, spec.embed_dim), st)}, req.dtype, req.shown
            )

        plan = self.row_plan(req, view)
        if plan is not None:
            return hot.RowsTemplate(
                plan=plan, max_rows=limits.max_rows, lists_only=True, header_for=header_for, tail=b""
            )
        # per-axis tables (service/shortcut/hot_grid.c), indexed by assemble's own steps
        steps = spec.steps()
        return hot.GridTemplate(
            arrays=tuple(view.arrays[a] for a in spec.widths),
            steps=tuple(steps[a] for a in spec.widths),
            extra=spec.extra_tokens,
            rows=spec.rows,
            max_rows=limits.max_rows,
            header_for=header_for,
            tail=b"",
        )

    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["embed_dim", "grid_size"],
        "properties": {
            "embed_dim": {"type": "integer", "minimum": 4, "maximum": MAX_EMBED_DIM, "multipleOf": 4},
            "grid_size": {
                "type": ["integer", "array"],
                "minimum": 1,
                "minItems": 2,
                "maxItems": 2,
                "items": {"type": "integer", "minimum": 1},
                "description": "patches per side, or [H, W]",
            },
            "base_size": {"type": ["number", "null"], "exclusiveMinimum": 0},
            "interpolation_scale": {"type": "number", "exclusiveMinimum": 0, "default": 1.0},
            "temporal_size": {"type": ["integer", "null"], "minimum": 1},
            "temporal_interpolation_scale": {"type": "number", "exclusiveMinimum": 0, "default": 1.0},
            "extra_tokens": {"type": "integer", "minimum": 0, "default": 0},
            "crop": {
                "type": ["array", "null"],
                "minItems": 4,
                "maxItems": 4,
                "items": {"type": "integer", "minimum": 0},
                "description": "[top, left, height, width]: the rows are this window of the grid (2-D)",
            },
            "positions": SELECTION_SCHEMA,
            "dtype": DTYPE_SCHEMA,
        },
    }
    examples = {
        "SD3 patch grid (base_size 64)": {
            "value": {"embed_dim": 1536, "grid_size": 192, "base_size": 64, "positions": [0, 1, 2]}
        },
        "ViT-MAE base with its CLS row": {"value": {"embed_dim": 768, "grid_size": 14, "extra_tokens": 1}},
        "SD3 at 64x64 patches (the centred crop of its 192-patch table)": {
            "value": {
                "embed_dim": 1536,
                "grid_size": 192,
                "base_size": 64,
                "crop": [64, 64, 64, 64],
                "positions": {"start": 0, "stop": 4},
            }
        },
        "CogVideoX 3-D": {
            "value": {
                "embed_dim": 1920,
                "grid_size": [30, 45],
                "temporal_size": 13,
                "interpolation_scale": 1.875,
                "positions": {"start": 0, "stop": 4},
            }
        },
    }


FAMILY = SinusoidalGrid()
