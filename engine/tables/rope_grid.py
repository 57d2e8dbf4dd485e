"""Frequencies given as data and fractional coordinates (docs/reference.md, rope, "Frequencies as
data, coordinates per axis"): the two rope spec fields a model read from its config uses when its
library computes what posenc's rope types do not (timm's ViT bands and DINOv3 periods, diffusers'
scaled and shifted grids).

- ``inv_freq``: the d/2 frequencies themselves, in half-column order (the order ``mrope_section``
  or ``axes_dim`` deals them to the axes), JSON floats (float64, exact); instead of ``rope_theta``
  and a rope type.
- ``axes_coords``: per axis a pair [scale, offset]: index i of that axis stands for the
  coordinate scale·i + offset (EVA's reference-shape rescaling, DINOv3's centred [-1, 1] grid, a
  pipeline's shifted frames). Rows stay indexed by integers (``position_ids`` give each axis's
  index), so every door (stored tables, gathers, shared memory) works as for any rope spec; only
  a row's values change: column j of row i is cos((scale·i + offset)·f_j), evaluated in float64
  when the row is computed and rounded once.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from ..core import dtypes as _dt
from ..core.errors import SpecError
from ..core.fields import is_number, json_repr
from ..core.selection import POSITION_LIMIT
from . import rope_axes as axes

F32_TINY, F32_MAX = float(np.finfo(np.float32).tiny), float(np.finfo(np.float32).max)
DEALING = (
    "mrope_section",
    "mrope_interleaved",
    "mrope_axes",
)  # the spec fields that deal columns to axes (axes_dim: keyed)
COORD_LIMIT = float(POSITION_LIMIT)  # |scale| and |offset| at most this: every angle stays finite


def parse(req, scaling, src: str, d: int, rope_type: str, section, axes_dim, mrope_axes=None) -> tuple:
    """(inv_freq, axes_coords) of a rope request, each None when absent (SpecError naming the field)."""
    inv = _inv_freq(req, scaling, src, d, rope_type)
    coords = _coords(req, section, axes_dim, mrope_axes)
    return inv, coords


def _inv_freq(req, scaling, src, d, rope_type):
    v = req.get("inv_freq")
    if v is None:
        return None
    for key, where in (("rope_theta", ()), ("rope_theta", (src,))):
        if (scaling if where else req).get(key) is not None:
            raise SpecError(
                (*where, key), "send either inv_freq or rope_theta: inv_freq gives the frequencies"
            )
    if rope_type != "default":
        raise SpecError((src, "rope_type"), f"inv_freq takes only the default rope_type, got {rope_type!r}")
    if not isinstance(v, (list, tuple)) or len(v) != d // 2:
        n = len(v) if isinstance(v, (list, tuple)) else json_repr(v)
        raise SpecError(("inv_freq",), f"must be a list of d/2 = {d // 2} frequencies, got {n}", "list_type")
    for i, x in enumerate(v):
        if not is_number(x) or not F32_TINY <= x <= F32_MAX:
            raise SpecError(
                ("inv_freq", i), f"must be a number in float32's normal range, got {json_repr(x)}"
            )
    return tuple(float(x) for x in v)


def _coords(req, section, axes_dim, mrope_axes=None):
    v = req.get("axes_coords")
    if v is None:
        return None
    if section is None and axes_dim is None and mrope_axes is None:
        raise SpecError(
            ("axes_coords",), "only with mrope_section, mrope_axes or axes_dim (it maps each axis's index)"
        )
    k = max(mrope_axes) + 1 if mrope_axes is not None else len(section if section is not None else axes_dim)
    if not isinstance(v, (list, tuple)) or len(v) != k:
        raise SpecError(
            ("axes_coords",),
            f"must be {k} pairs [scale, offset], one per axis, got {json_repr(v)}",
            "list_type",
        )
    out = []
    for a, pair in enumerate(v):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise SpecError(("axes_coords", a), f"must be a pair [scale, offset], got {json_repr(pair)}")
        for i, x in enumerate(pair):
            if not is_number(x) or not math.isfinite(x) or abs(x) > COORD_LIMIT:
                raise SpecError(
                    ("axes_coords", a, i), f"must be a finite number in [-2**31, 2**31], got {json_repr(x)}"
                )
        out.append((float(pair[0]), float(pair[1])))
    return tuple(out)


def coords_of(spec):
    """(scale, offset) of every half column (float64 arrays of d/2), or None without axes_coords."""
    if spec.axes_coords is None:
        return None
    return _half_coords(spec)


@functools.lru_cache(maxsize=256)
def _half_coords(spec):
    half_col, axis, _ = axes.spec_column_map(spec)
    axis_of_half = np.empty(spec.d // 2, dtype=np.int64)
    axis_of_half[half_col] = axis
    c = np.array(spec.axes_coords, dtype=np.float64)
    scale, offset = c[axis_of_half, 0], c[axis_of_half, 1]
    scale.flags.writeable = offset.flags.writeable = False
    return scale, offset


def keep_dealing(tspec, spec):
    """A stored table's spec keeps the axes' dealing where columns have coordinates (rope._strip)."""
    if spec.axes_coords is None:
        return tspec
    return dataclasses.replace(tspec, **{k: getattr(spec, k) for k in DEALING})


def cos_sin(inv_freq: np.ndarray, scaling: float, positions: np.ndarray, dtype: str, coords) -> tuple:
    """rope.half_rows with coordinates: angle = (scale_j·p + offset_j)·f_j in float64, cos and sin
    times ``scaling``, each rounded once to ``dtype``: two [n, d/2] arrays."""
    scale, offset = coords
    p = np.asarray(positions, dtype=np.float64)[:, None]
    angle = (p * scale + offset) * np.asarray(inv_freq, dtype=np.float64)
    out = []
    for fn in (np.cos, np.sin):
        v = fn(angle)
        if scaling != 1.0:
            v = v * scaling
        out.append(_dt.round_f64(v, dtype))
    return out[0], out[1]


def spec_json(spec) -> dict:
    """The canonical spec's fields of this module (absent ones left out)."""
    out = {}
    if spec.inv_freq is not None:
        out["inv_freq"] = list(spec.inv_freq)
    if spec.axes_coords is not None:
        out["axes_coords"] = [list(c) for c in spec.axes_coords]
    return out


def table_key(tspec) -> dict:
    """What a stored table's key adds: the frequencies, and with coordinates the axes' dealing
    (each half column's coordinate follows its axis; axes_dim is in every key)."""
    key = spec_json(tspec)
    if tspec.axes_coords is not None:
        for k in DEALING:
            if getattr(tspec, k) is not None:
                key[k] = getattr(tspec, k)
    return key


def from_key(key) -> dict:
    """The request fields of ``table_key``'s additions (for rope.table_spec)."""
    return {k: key.get(k) for k in ("inv_freq", "axes_coords", *DEALING)}


# The request schema's fields (OpenAPI), part of rope's schema.
SCHEMA = {
    "inv_freq": {
        "type": ["array", "null"],
        "items": {"type": "number", "exclusiveMinimum": 0},
        "description": "the d/2 frequencies as data, in half-column order (instead of rope_theta)",
    },
    "axes_coords": {
        "type": ["array", "null"],
        "items": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2},
        "description": "per axis [scale, offset]: index i stands for coordinate scale*i + offset",
    },
}
