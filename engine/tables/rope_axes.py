"""Multi-axis RoPE (docs/reference.md, rope, "Multi-axis RoPE"): which axis and which half-width
frequency column feed each output column, and ``position_ids``, the per-axis positions.

- ``mrope_section`` (Qwen2-VL / Qwen2.5-VL ``Qwen2VLRotaryEmbedding.recomposition_frequencies``):
  one frequency set over d; the d/2 half columns are dealt to the axes in contiguous runs of the
  section's counts. ``mrope_interleaved`` (Qwen3-VL ``Qwen3VLTextRotaryEmbedding``): half column k
  comes from axis 1 when k % 3 == 1 and k < 3·section[1], from axis 2 when k % 3 == 2 and
  k < 3·section[2], else from axis 0.
- ``mrope_axes``: the same, with the axis of each of the d/2 frequencies given as data, for the
  classes that deal them otherwise (``DEALINGS``: ERNIE-4.5-VL pairs h and w, NeoMME alternates
  row and column, Qwen4-Exp and the Qwen3-Omni talker interleave over fewer columns than d/2).
- ``axes_dim`` (diffusers ``FluxPosEmbed``: ``get_1d_rotary_pos_embed`` per axis, blocks
  concatenated): axis a has its own frequencies θ^(−2j/axes_dim[a]) over its block of axes_dim[a]
  columns, and ``layout`` pairs columns within each block.

Either way an answer's column j is the stored half-width table's column ``half[j]`` at the
position of axis ``axis[j]``: rows are gathers from an ordinary rope table through a column map
(mrope: the plain table of the same frequencies; axes_dim: the table of the concatenated
frequencies), so no other kind of stored table exists for them.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

from ..core.errors import SpecError
from ..core.fields import is_int, json_repr
from ..core.selection import POSITION_LIMIT, parse_selection
from .base import RowPlan

HALF_SPLIT, INTERLEAVED = "half_split", "interleaved"  # rope.LAYOUTS (kernels.ROPE_LAYOUTS)
MAX_AXES = 8
# the OpenAPI examples of the multi-axis forms (rope.py's Rope.examples takes them)
EXAMPLES = {
    "Qwen2.5-VL mrope, text then image tokens": {
        "value": {
            "head_dim": 128,
            "rope_theta": 1000000.0,
            "mrope_section": [16, 24, 24],
            "position_ids": [[0, 1, 2, 2, 2, 2], [0, 1, 2, 2, 3, 3], [0, 1, 2, 3, 2, 3]],
        }
    },
    "Flux axes": {
        "value": {
            "head_dim": 128,
            "axes_dim": [16, 56, 56],
            "layout": INTERLEAVED,
            "position_ids": [[0, 0, 0], [0, 0, 1], [0, 1, 0]],
        }
    },
}


def parse_int_list(req, key: str, lo: int, even: bool = False) -> tuple | None:
    """A list of ints >= lo (even ones where ``even``), or None when absent or null."""
    v = req.get(key)
    if v is None:
        return None
    if not isinstance(v, (list, tuple)) or not 1 <= len(v) <= MAX_AXES:
        raise SpecError(
            (key,), f"must be a list of 1 to {MAX_AXES} integers, got {json_repr(v)}", "list_type"
        )
    for i, x in enumerate(v):
        if not is_int(x) or x < lo or (even and x % 2):
            want = f"an even integer >= {lo}" if even else f"an integer >= {lo}"
            raise SpecError((key, i), f"must be {want}, got {json_repr(x)}")
    return tuple(v)


def parse_axes(req, d: int) -> tuple | None:
    """``mrope_axes``: d/2 axis numbers in [0, MAX_AXES), the axis each frequency takes its
    position from (None when absent)."""
    v = req.get("mrope_axes")
    if v is None:
        return None
    if not isinstance(v, (list, tuple)) or len(v) != d // 2:
        n = f"{len(v)} entries" if isinstance(v, (list, tuple)) else json_repr(v)
        raise SpecError(
            ("mrope_axes",),
            f"must be a list of d/2 = {d // 2} axis numbers (d = rotary width), got {n}",
            "list_type",
        )
    for i, x in enumerate(v):
        if not is_int(x) or not 0 <= x < MAX_AXES:
            raise SpecError(
                ("mrope_axes", i), f"must be an axis number in [0, {MAX_AXES}), got {json_repr(x)}"
            )
    return tuple(v)


def check_sections(
    mrope_section, interleaved: bool, axes_dim, d: int, rope_type: str, src: str, mrope_axes=None
) -> None:
    """The cross-field rules of the multi-axis fields (SpecError naming the field to change)."""
    if mrope_section is not None and axes_dim is not None:
        raise SpecError(("axes_dim",), "send either mrope_section or axes_dim, not both")
    if mrope_axes is not None and (mrope_section is not None or axes_dim is not None or interleaved):
        raise SpecError(
            ("mrope_axes",),
            "gives each frequency's axis by itself: send it without mrope_section, mrope_interleaved, axes_dim",
        )
    if interleaved and mrope_section is None:
        raise SpecError(
            ("mrope_interleaved",), "only with mrope_section (Qwen3-VL's dealing of its frequencies)"
        )
    if mrope_section is not None:
        if sum(mrope_section) != d // 2:
            raise SpecError(
                ("mrope_section",), f"must sum to d/2 = {d // 2} (d = rotary width), got {sum(mrope_section)}"
            )
        if interleaved and len(mrope_section) != 3:
            raise SpecError(
                ("mrope_section",),
                f"must have 3 entries (t, h, w) with mrope_interleaved, got {len(mrope_section)}",
            )
    if axes_dim is not None:
        if sum(axes_dim) != d:
            raise SpecError(("axes_dim",), f"must sum to the rotary width d = {d}, got {sum(axes_dim)}")
        if rope_type != "default":
            raise SpecError(
                (src, "rope_type"), f"axes_dim takes only the default rope_type, got {rope_type!r}"
            )


def axes_inv_freq(theta: float, axes_dim) -> np.ndarray:
    """Each axis's frequencies θ^(−2j/axes_dim[a]) (float64, as FluxPosEmbed's freqs_dtype),
    concatenated in axis order: the d/2 half columns of an axes_dim table."""
    return np.concatenate(
        [1.0 / np.power(float(theta), np.arange(0, a, 2, dtype=np.float64) / a) for a in axes_dim]
    )


def _interleaved(section, h: int) -> np.ndarray:
    """Qwen3-VL's ``recomposition_frequencies`` for k = len(section) axes: frequency j goes to axis
    a >= 1 when j % k == a and j < k·section[a], else to axis 0 (slices clipped at d/2, as torch's)."""
    out = np.zeros(h, dtype=np.int64)
    k = len(section)
    for a in range(1, k):
        out[a : k * section[a] : k] = a
    return out


def _paired(section, h: int) -> np.ndarray:
    """ERNIE-4.5-VL (``Ernie4_5_VLMoeTextRotaryEmbedding``): section [h, w, t]; its pre-rotated
    frequencies put the first h + w in pairs, even ones to axis 1 (h) and odd ones to axis 2 (w),
    the last t to axis 0 (t). Its ``torch.stack`` needs h == w and the three to sum to d/2."""
    if len(section) != 3 or section[0] != section[1] or sum(section) != h:
        raise SpecError(
            ("mrope_section",),
            f"must be [h, w, t] with h == w and summing to d/2 = {h} (ERNIE-4.5-VL's pairs), got {list(section)}",
        )
    out = np.zeros(h, dtype=np.int64)
    hw = 2 * section[0]
    out[:hw] = 1 + np.arange(hw) % 2
    return out


def _sections(section, h: int) -> np.ndarray:
    return np.repeat(np.arange(len(section)), section)


# The dealings of the d/2 frequencies to the axes that Qwen-VL's two forms do not say, by name:
# (section, d/2) -> the axis of each, as the model readers (engine/models/config.py) turn a config's
# mrope_section into ``mrope_axes``. "interleaved": Qwen3-VL's rule where 3·section[a] < d/2
# (Qwen4-Exp) or past it (Qwen3-Omni's talker); "alternating" (NeoMME, two axes, no section): row
# and column take turns, Qwen3-VL's rule over two axes of d/4 each.
DEALINGS = {
    "interleaved": _interleaved,
    "paired": _paired,
    "alternating": lambda section, h: _interleaved((h // 2, h // 2), h),
}


def dealt(name: str, section, h: int) -> list:
    """The ``mrope_axes`` of a named dealing (SpecError naming mrope_section when it cannot deal it)."""
    return DEALINGS[name](section, h).tolist()


@functools.lru_cache(maxsize=256)
def column_map(
    d: int, layout: str, mrope_section=None, interleaved: bool = False, axes_dim=None, mrope_axes=None
):
    """(half column, axis) of every output column, two int64 arrays of d, and the number of axes.
    Without multi-axis fields: the plain layout, one axis."""
    h = d // 2
    axis_of_half = np.zeros(h, dtype=np.int64)
    if mrope_axes is not None:
        axis_of_half[:] = mrope_axes
        blocks = [(0, h)]
        k = max(mrope_axes) + 1
    elif axes_dim is not None:
        blocks = [(sum(axes_dim[:a]) // 2, w // 2) for a, w in enumerate(axes_dim)]
        k = len(axes_dim)
    else:
        blocks = [(0, h)]
        k = 1
        if mrope_section is not None:
            k = len(mrope_section)
            if interleaved:  # Qwen3VLTextRotaryEmbedding.recomposition_frequencies
                axis_of_half[:] = _interleaved(mrope_section, h)
            else:  # Qwen2VLRotaryEmbedding.recomposition_frequencies
                axis_of_half[:] = _sections(mrope_section, h)
    half = []
    for offset, width in blocks:
        if layout == HALF_SPLIT:  # [c | c] within the block (rotate_half)
            half.append(offset + np.tile(np.arange(width), 2))
        else:  # [c0, c0, c1, c1, ...] (rotate_every_two; Flux's repeat_interleave_real)
            half.append(offset + np.repeat(np.arange(width), 2))
        if axes_dim is not None:
            axis_of_half[offset : offset + width] = len(half) - 1
    half_col = np.concatenate(half)
    half_col.flags.writeable = False
    axis = axis_of_half[half_col]
    axis.flags.writeable = False
    return half_col, axis, k


def spec_column_map(spec):
    return column_map(
        spec.d, spec.layout, spec.mrope_section, spec.mrope_interleaved, spec.axes_dim, spec.mrope_axes
    )


def n_axes(spec) -> int | None:
    """The number of position axes a spec's position_ids carry (None: one, plain positions)."""
    if spec.mrope_axes is not None:
        return max(spec.mrope_axes) + 1
    if spec.mrope_section is None and spec.axes_dim is None:
        return None
    return len(spec.mrope_section if spec.mrope_section is not None else spec.axes_dim)


class AxisPositions:
    """Parsed ``position_ids``: int64 [k, n] (transformers' [3, n] layout for one sequence)."""

    __slots__ = ("values", "hi")

    def __init__(self, values: np.ndarray):
        self.values = values
        self.hi = int(values.max())

    @property
    def n(self) -> int:
        return int(self.values.shape[1])

    @property
    def max(self) -> int:
        return self.hi

    @property
    def min(self) -> int:
        return int(self.values.min())

    def array(self) -> np.ndarray:
        return self.values


def parse_position_ids(value, k: int, loc=("position_ids",)) -> AxisPositions:
    """k equal-length lists of positions in [0, 2**31) (or a [k, n] integer array)."""
    if isinstance(value, np.ndarray):
        arr = value
    else:
        if not isinstance(value, (list, tuple)) or not all(isinstance(r, (list, tuple)) for r in value):
            raise SpecError(
                loc,
                f"must be a list of {k} lists of positions (one per axis), got {json_repr(value)}",
                "list_type",
            )
        if len(value) != k:
            raise SpecError(loc, f"must have one list per axis: {k}, got {len(value)}")
        n = len(value[0]) if value else 0
        for a, row in enumerate(value):
            if len(row) != n:
                raise SpecError(
                    (*loc, a), f"must have as many positions as position_ids[0] ({n}), got {len(row)}"
                )
        flat = list(itertools.chain.from_iterable(value))
        if flat and (set(map(type, flat)) != {int} or min(flat) < 0 or max(flat) >= POSITION_LIMIT):
            for a, row in enumerate(value):  # name the first bad value (no int64 overflow)
                for i, v in enumerate(row):
                    if not is_int(v):
                        raise SpecError((*loc, a, i), f"must be an integer, got {json_repr(v)}", "int_type")
                    if not 0 <= v < POSITION_LIMIT:
                        raise SpecError((*loc, a, i), f"must be in [0, 2**31), got {v}")
        arr = np.array(value, dtype=np.int64) if n else np.empty((k, 0), np.int64)
    if arr.ndim != 2 or arr.dtype.kind not in "iu":
        raise SpecError(
            loc, f"must be [k, n] integers, got an array of {arr.dtype} and shape {list(arr.shape)}"
        )
    if arr.shape[0] != k:
        raise SpecError(loc, f"must have one row per axis: {k}, got {arr.shape[0]}")
    if arr.shape[1] == 0:
        raise SpecError((*loc, 0), "must not be empty", "too_short")
    bad = (arr < 0) | (arr >= POSITION_LIMIT)
    if bad.any():
        a, i = (int(x) for x in np.argwhere(bad)[0])
        raise SpecError((*loc, a, i), f"must be in [0, 2**31), got {int(arr[a, i])}")
    if arr.dtype != np.int64 or not (arr.flags.aligned and arr.flags.c_contiguous):
        arr = np.array(arr, dtype=np.int64)  # binary tensors arrive at any byte offset
    return AxisPositions(arr)


def selections(spec, req) -> dict:
    """A rope request's selections: ``positions``, or with a multi-axis spec ``position_ids``
    (mrope also takes plain positions: every axis at that position, which is the plain answer)."""
    pid = req.get("position_ids")
    if pid is None:
        if spec.axes_dim is not None:
            raise SpecError(("position_ids",), "field required with axes_dim (one list per axis)", "missing")
        return {"positions": parse_selection(req.get("positions"), ("positions",))}
    if n_axes(spec) is None:
        raise SpecError(
            ("position_ids",), "only with mrope_section, mrope_axes or axes_dim; plain rope takes positions"
        )
    if req.get("positions") is not None:
        raise SpecError(("positions",), "send either positions or position_ids, not both")
    return {"position_ids": parse_position_ids(pid, n_axes(spec))}


def probe(spec, position: int) -> dict | None:
    """``position_ids`` reading one position on every axis where a spec requires them."""
    if spec is not None and spec.axes_dim is not None:
        return {"position_ids": [[position]] * len(spec.axes_dim)}
    return None


def positions_of(sel):
    """A rope request's positions: ``positions`` or ``position_ids`` (both have n and max)."""
    return sel["positions"] if "positions" in sel else sel["position_ids"]


def gather(tables, rows: np.ndarray, half_col: np.ndarray, axis: np.ndarray) -> list:
    """out[i, j] = table[rows[axis[j], i], half_col[j]] for each half-width table (cos, sin):
    ``rows`` [k, n] are each axis's rows of the tables. One fancy index per table."""
    flat = rows.T[:, axis] * tables[0].shape[1] + half_col  # element offsets: one 1-D take each
    return [np.take(t.reshape(-1), flat) for t in tables]


def computed(half_rows, pos: np.ndarray, half_col: np.ndarray, axis: np.ndarray) -> list:
    """The same from ``half_rows(positions)`` -> (cos, sin) of every axis's positions at once."""
    k, n = pos.shape
    return gather(half_rows(pos.reshape(-1)), np.arange(k * n).reshape(k, n), half_col, axis)


def row_plan(spec, view, past):
    """The row plan of a ``position_ids`` request (the shortcut's service/shortcut/hot_axes.c): the
    gather ``serve`` does, out[i, j] = table[ids[axis[j]][i], half[j]], from the same half-width
    tables through the same column map; an axis's row past the table is computed by ``past`` (the
    plain plan's: [cos | sin] of the row), as ``computed`` computes it. JSON is the full path's."""
    half_col, axis, k = spec_column_map(spec)
    return RowPlan(
        arrays=(view.cos, view.sin),
        colmap=tuple(half_col.tolist()),
        past=past,
        axes=tuple(axis.tolist()),
        naxes=k,
    )


# The request schema's multi-axis fields (OpenAPI), part of rope's schema.
SCHEMA = {
    "mrope_section": {
        "type": ["array", "null"],
        "items": {"type": "integer", "minimum": 1},
        "description": "Qwen-VL multimodal RoPE: the d/2 frequencies dealt to the axes (sum d/2)",
    },
    "mrope_interleaved": {
        "type": "boolean",
        "default": False,
        "description": "Qwen3-VL's interleaved dealing",
    },
    "mrope_axes": {
        "type": ["array", "null"],
        "items": {"type": "integer", "minimum": 0, "maximum": MAX_AXES - 1},
        "description": "the axis each of the d/2 frequencies takes its position from (ERNIE-4.5-VL, NeoMME, ...)",
    },
    "axes_dim": {
        "type": ["array", "null"],
        "items": {"type": "integer", "minimum": 2, "multipleOf": 2},
        "description": "a frequency set per axis (Flux axes_dims_rope), sum = d",
    },
    "position_ids": {
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_AXES,
        "items": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "integer", "minimum": 0, "maximum": POSITION_LIMIT - 1},
        },
        "default": None,
        "description": "with mrope_section, mrope_axes or axes_dim, instead of positions: one list per axis",
    },
}
