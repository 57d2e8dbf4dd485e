"""diffusers rotary transformers read by _class_name:
Cosmos and Kandinsky 5 / 6 / 6-SR: fps-scaled and scale-factor coordinates.

Records as in diffusers_rope.py; the two readings of this module:

- ``CosmosRope``: CosmosRotaryPosEmbed (Cosmos 1 / 2 / 2.5): frames, rows and columns over
  d − 2·(d//6·2), d//6·2, d//6·2 columns, each axis its own θ (10000 · rope_scale[a]^(w/(w − 2)),
  the NTK extrapolation), concatenated over the half width and half-split over the head
  (``inv_freq`` with ``mrope_section``); frames at i · base_fps / fps where the forward is given
  ``fps`` (a video), at i without one (an image): ``axes_coords``.
- ``KandinskyRope``: Kandinsky5RoPE3D / Kandinsky6RoPE3D / Kandinsky6SRRoPE3D: ``axes_dims`` per
  axis (θ 10000, 2x2 rotation matrices per pair: interleaved), each axis's angles divided by its
  ``scale_factor`` (``axes_coords`` [1/s, 0]): the forward's argument (Kandinsky 5, its pipeline's
  choice) or the config's (6, 6-SR); tokens row-major, or in 8x8 blocks where NABLA attention
  groups them (6-SR always, 5 with ``attention_type`` "nabla").

The positions are the latent's grid (``grid``: frames, height, width in patches; Cosmos' ``fps``,
Kandinsky 5's ``scale_factor``); Kandinsky 6 also takes ``position_ids`` (its forward's
``visual_rope_pos``: the image-to-video pipeline appends a reference frame at frame 0). Their
zoo test, tests/engine/test_diffusers_zoo_cosmos.py, holds each to the class's own module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from ..core.errors import SpecError
from ..core.fields import is_int, is_number, json_repr
from ..tables.rope_spec import HALF_SPLIT, INTERLEAVED
from . import grid as model_grid
from .config import LOC, Config, Derived
from .diffusers_axes import GRID, _axes, read_config

SCALED = "scaled"  # the latent's grid at scaled coordinates, built by the transformer: grid only
CLASS = (*LOC, "_class_name")  # where a value fixed by the class's code comes from
AXES = ("frames", "height", "width")
SCALE_RANGE = (2.0**-16, 2.0**16)  # a scale factor's bounds (its coordinates stay finite and exact)
BLOCK = 8  # NABLA attention's token block side (FRACTAL_BLOCK_SIZE, local_patching's pixel_size)


def _numbers(v, loc, n: int, what: str) -> list:
    """``v`` as ``n`` positive numbers within SCALE_RANGE (SpecError at ``loc``)."""
    lo, hi = SCALE_RANGE
    if not isinstance(v, (list, tuple)) or len(v) != n:
        raise SpecError(loc, f"must be {n} numbers ({what}), got {json_repr(v)}")
    for i, x in enumerate(v):
        if not is_number(x) or not lo <= x <= hi:
            raise SpecError((*loc, i), f"must be a number in [2**-16, 2**16], got {json_repr(x)}")
    return [float(x) for x in v]


def _grid(grid, keys: tuple, extra: str | None):
    """The grid's sizes and its non-size key ``extra`` (Kandinsky 5's scale_factor), or None."""
    value = None
    if extra is not None and isinstance(grid, Mapping) and extra in grid:
        value = grid[extra]
        grid = {k: v for k, v in grid.items() if k != extra}
    return model_grid.parse(grid, keys, ("height", "width")), value


def _blocks(ids: np.ndarray, f: int, h: int, w: int) -> np.ndarray:
    """The tokens of a row-major (f, h, w) grid in NABLA's order: per frame, its 8x8 blocks row-major,
    each block's tokens row-major (local_patching / _local_patch with group (1, 8, 8))."""
    for key, n in (("height", h), ("width", w)):
        if n % BLOCK:
            raise SpecError(
                (*model_grid.LOC, key),
                f"must be a multiple of {BLOCK}: NABLA attention groups the tokens in {BLOCK}x{BLOCK} blocks, "
                f"got {n}",
            )
    order = np.arange(f * h * w).reshape(f, h // BLOCK, BLOCK, w // BLOCK, BLOCK)
    return ids[:, order.transpose(0, 1, 3, 2, 4).reshape(-1)]


@dataclasses.dataclass(frozen=True)
class KandinskyRope:
    """Kandinsky*RoPE3D(axes_dims): angles pos · 10000^(−2k/axes_dims[a]) / scale_factor[a] per axis,
    2x2 rotation matrices per pair (interleaved). ``scale_key``: the config key of scale_factor
    (Kandinsky 6, 6-SR), else the forward's argument, a ``grid`` key (Kandinsky 5, default
    (1, 1, 1)). ``fractal``: the tokens in NABLA's 8x8 blocks ("always", or the config key whose
    value "nabla" turns them on). ``positions``: GRID where the forward takes visual_rope_pos
    (position_ids too), SCALED where it builds them (grid only)."""

    source: str
    defaults: Mapping
    positions: str
    scale_key: str | None = None
    fractal: str | None = None
    max_pos: int = 128  # the class's tables: positions 0..127 per axis

    @property
    def grid_keys(self):
        return AXES if self.scale_key is not None else (*AXES, "scale_factor")

    @property
    def reads(self) -> str:
        scale = f"`{self.scale_key}`" if self.scale_key else "the forward's `scale_factor` (a grid key)"
        order = {"always": "; tokens in 8x8 blocks", None: ""}.get(
            self.fractal, f"; 8x8 blocks when `{self.fractal}` is nabla"
        )
        return f"axes `axes_dims`, θ 10000, each axis's angles divided by {scale}, interleaved{order}"

    def derive(self, raw, layer_type, grid=None):
        cfg = read_config(raw, layer_type, self.defaults)
        axes = _axes(cfg, "axes_dims")
        if len(axes) != 3 or not all(is_int(a) and a >= 2 and a % 2 == 0 for a in axes):
            raise SpecError(
                cfg.loc("axes_dims"),
                f"must be 3 even rotary widths (t, h, w) of pairs, got {json_repr(axes)}",
            )
        if self.scale_key is not None:
            scale_loc = cfg.loc(self.scale_key)
            scale = _numbers(cfg.get(self.scale_key), scale_loc, 3, "t, h, w")
        fields = {"head_dim": sum(axes), "rope_theta": 10000.0, "axes_dim": axes, "layout": INTERLEAVED}
        origin = {k: CLASS for k in fields}
        origin.update(head_dim=cfg.loc("axes_dims"), axes_dim=cfg.loc("axes_dims"))
        if grid is not None or self.positions == SCALED:
            sizes, given = _grid(grid, self.grid_keys, None if self.scale_key else "scale_factor")
            if self.scale_key is None:
                scale, scale_loc = [1.0, 1.0, 1.0], CLASS
                if given is not None:
                    scale = _numbers(given, (*model_grid.LOC, "scale_factor"), 3, "t, h, w")
                    scale_loc = (*model_grid.LOC, "scale_factor")
            f, h, w = sizes.get("frames", 1), sizes["height"], sizes["width"]
            for key, n in zip(AXES, (f, h, w)):
                if n > self.max_pos:
                    raise SpecError(
                        (*model_grid.LOC, key), f"its rope tables stop at {self.max_pos} per axis, got {n}"
                    )
            ids = model_grid.indices((f, h, w))
            if self.fractal == "always" or (self.fractal and cfg.get(self.fractal) == "nabla"):
                ids = _blocks(ids, f, h, w)
            fields["position_ids"] = ids
            origin["position_ids"] = model_grid.LOC
        fields["axes_coords"] = [[1.0 / s, 0.0] for s in scale]
        origin["axes_coords"] = scale_loc
        return Derived(fields, origin)


@dataclasses.dataclass(frozen=True)
class CosmosRope:
    """CosmosRotaryPosEmbed(attention_head_dim, max_size, patch_size, base_fps=24, rope_scale): see
    the module's docstring. A grid axis past max(max_size // patch_size) is refused, as its
    ``seq`` stops there."""

    source: str
    defaults: Mapping
    base_fps: int = 24  # the class's default; the transformer does not pass one
    positions = SCALED
    grid_keys = (*AXES, "fps")
    reads = (
        "frames, rows, columns over d − 2·(d//6·2), d//6·2, d//6·2, θ 10000 · `rope_scale`[a]^(w/(w − 2)) "
        "per axis, half-split over the head; frames at i · 24 / fps"
    )

    def derive(self, raw, layer_type, grid=None):
        cfg = read_config(raw, layer_type, self.defaults)
        d = cfg.int("attention_head_dim")
        if d % 2 or d < 12:
            raise SpecError(
                cfg.loc("attention_head_dim"),
                f"must be even and at least 12 (its axes' widths w = d // 6 · 2 divide by w − 2), got {d}",
            )
        dh = d // 6 * 2
        widths = [d - 2 * dh, dh, dh]
        scale = _numbers(cfg.get("rope_scale"), cfg.loc("rope_scale"), 3, "t, h, w")
        inv = []
        for w, s in zip(widths, scale):
            theta = 10000.0 * s ** (w / (w - 2))
            inv.extend((1.0 / np.power(theta, np.arange(0, w, 2, dtype=np.float64) / w)).tolist())
        sizes = model_grid.parse(grid, self.grid_keys, ("height", "width"))
        f, h, w = sizes.get("frames", 1), sizes["height"], sizes["width"]
        seq = int(max(_ints(cfg, "max_size", 0) // _ints(cfg, "patch_size", 1)))
        for key, n in zip(AXES, (f, h, w)):
            if n > seq:
                raise SpecError(
                    (*model_grid.LOC, key),
                    f"its positions stop at max(max_size // patch_size) = {seq} per axis, got {n}",
                )
        fields = {
            "head_dim": d,
            "inv_freq": inv,
            "mrope_section": [x // 2 for x in widths],
            "layout": HALF_SPLIT,
            "position_ids": model_grid.indices((f, h, w)),
        }
        origin = {
            "head_dim": cfg.loc("attention_head_dim"),
            "inv_freq": cfg.loc("rope_scale"),
            "mrope_section": cfg.loc("attention_head_dim"),
            "layout": CLASS,
            "position_ids": model_grid.LOC,
        }
        fps = sizes.get("fps")
        if fps is not None:  # a video: seq / fps * base_fps
            fields["axes_coords"] = [[self.base_fps / fps, 0.0], [1.0, 0.0], [1.0, 0.0]]
            origin["axes_coords"] = (*model_grid.LOC, "fps")
        return Derived(fields, origin)


def _ints(cfg: Config, key: str, lo: int) -> np.ndarray:
    """The config's 3 integers >= ``lo`` at ``key`` (t, h, w)."""
    v = _axes(cfg, key)
    if len(v) != 3 or not all(is_int(x) and x >= lo for x in v):
        raise SpecError(cfg.loc(key), f"must be 3 integers >= {lo} (t, h, w), got {json_repr(v)}")
    return np.array(v, dtype=np.int64)


CLASSES: dict[str, dict] = {
    "CosmosTransformer3DModel": {
        "rope": CosmosRope(
            "transformer_cosmos.py (CosmosRotaryPosEmbed)",
            {
                "attention_head_dim": 128,
                "max_size": [128, 240, 240],
                "patch_size": [1, 2, 2],
                "rope_scale": [2.0, 1.0, 1.0],
            },
        )
    },
    "Kandinsky5Transformer3DModel": {
        "rope": KandinskyRope(
            "transformer_kandinsky.py (Kandinsky5RoPE3D)",
            {"axes_dims": [16, 24, 24], "attention_type": "regular"},
            SCALED,
            fractal="attention_type",
        )
    },
    "Kandinsky6Transformer3DModel": {
        "rope": KandinskyRope(
            "transformer_kandinsky6.py (Kandinsky6RoPE3D)",
            {"axes_dims": [32, 48, 48], "scale_factor": [1.0, 2.0, 2.0]},
            GRID,
            scale_key="scale_factor",
        )
    },
    "Kandinsky6SRTransformer3DModel": {
        "rope": KandinskyRope(
            "transformer_kandinsky6_sr.py (Kandinsky6SRRoPE3D)",
            {"axes_dims": [16, 24, 24], "scale_factor": [1.0, 2.0, 2.0]},
            SCALED,
            scale_key="scale_factor",
            fractal="always",
        )
    },
}
