"""diffusers rotary transformers read by _class_name:
LTX-Video, LTX-2 and Sana-WM (+ its LTX-2 refiner): coordinates normalised to a base in pixels and seconds.

Records as in diffusers_rope.py (the readings of diffusers_axes.py); diffusers_rope.CLASSES merges
this module's CLASSES, and its zoo test (tests/engine/test_diffusers_zoo_ltx.py) holds each to the
class's own module.

- ``NormalisedRope``: LTX-Video's LTXVideoRotaryPosEmbed and LTX-2's LTX2AudioVideoRotaryPosEmbed
  (video self-attention, ``rope``), copied by Sana-WM's refiner. One table over the whole inner
  width (num_attention_heads · attention_head_dim, applied before the heads split): dim // 6
  frequencies θ^(k/(n−1))·π/2, dealt to (frame, row, column) in turn, k-major, interleaved pairs;
  the inner_dim % 6 columns left over come first and do not rotate (cos 1, sin 0). A token's
  coordinate on an axis is 2·x/base − 1 with x its position in pixels (rows, columns) or seconds
  (frames) and base the class's (20 frames, 2048 px): LTX-Video scales the latent index by its
  pipeline's rope_interpolation_scale (8 / frame_rate, 32, 32); LTX-2 takes the middle of each
  patch's [start, end) in pixels, the first frame causal (clamped at 0), frames divided by fps.
  posenc gives each axis an integer index and [scale, offset] (``axes_coords``, float64), and the
  unrotated columns a fourth axis of their own (``mrope_axes``) at coordinate 0. LTX-2's
  rope_type "split" deals the same half-width list (unrotated ones first) to the heads, hd/2 each,
  half-split within the head: a grid names the ``head`` and the answer is that head's.
- Sana-WM's SanaWMRotaryPosEmbed: Wan's axes over ``linear_head_dim`` (``AxesRope``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from ..core.errors import SpecError
from ..core.fields import is_int, json_repr
from ..core.selection import POSITION_LIMIT
from ..tables.rope_grid import COORD_LIMIT
from ..tables.rope_spec import HALF_SPLIT, INTERLEAVED, MAX_HEAD_DIM
from . import grid as model_grid
from .config import LOC, Config, Derived
from .diffusers_axes import GRID, AxesRope, _theta, read_config

NORMALISED = "normalised"  # LTX: coordinates normalised to a base in pixels and seconds (grid only)
LTX_VAE = (8, 32, 32)  # LTX-Video's pipeline: its VAE's (temporal, spatial, spatial) compression
SANA_WM_TABLE = 1024  # SanaWMRotaryPosEmbed(max_seq_len=1024): positions per axis its table holds


@dataclasses.dataclass(frozen=True)
class NormalisedRope:
    """LTX-Video (``version`` 1) and LTX-2 (2): see the module's docstring. A ``grid`` (frames,
    height, width in patches; ``fps`` the frame rate its pipeline passes, default ``fps``; the
    refiner's ``first_frame``, the window's first latent frame; ``head`` with LTX-2's rope_type
    "split") gives the positions."""

    source: str
    defaults: Mapping
    version: int
    fps: float
    grid_keys: tuple = ("frames", "height", "width", "fps")
    positions = NORMALISED

    @property
    def reads(self) -> str:
        """What docs/reference.md's table says it reads (tests/tools/diffusers_zoo.py)."""
        where = (
            "(frame, row, column) at 2·i·s·patch/base − 1, s its pipeline's (8 / `fps`, 32, 32), "
            "base (20, 2048, 2048)"
            if self.version == 1
            else "(frame, row, column) at the middle of each patch in pixels (`vae_scale_factors`), frames "
            "causal and in seconds (/ `fps`), 2·x/base − 1 (`pos_embed_max_pos`, `base_height`, "
            "`base_width`); θ `rope_theta`; `rope_type` split: the grid's `head` takes its hd/2 of the "
            "frequencies, half-split"
        )
        return (
            "one table over `num_attention_heads`·`attention_head_dim`: dim // 6 frequencies "
            f"θ^(k/(n−1))·π/2 per axis, interleaved across axes, dim % 6 unrotated columns first; {where}"
        )

    def derive(self, raw, layer_type, grid=None):
        cfg = read_config(raw, layer_type, self.defaults)
        heads, hd = cfg.int("num_attention_heads"), cfg.int("attention_head_dim")
        dim = heads * hd
        if dim % 2 or not 6 <= dim <= MAX_HEAD_DIM:
            raise SpecError(
                cfg.loc("attention_head_dim"),
                f"its table spans num_attention_heads x attention_head_dim = {dim} columns, which must be "
                f"even, at least 6 (pairs over frames, rows and columns) and at most {MAX_HEAD_DIM}",
            )
        sizes, fps, first, head = self._grid(grid)
        split = False
        if self.version == 1:
            theta, theta_loc = 10000.0, (*LOC, "_class_name")
            coords, t = _ltx_coords(cfg, fps, sizes.get("frames", 1))
        else:
            theta, theta_loc = _theta(cfg, "rope_theta")
            coords, t = _ltx2_coords(cfg, fps, sizes.get("frames", 1), first)
            split = _split(cfg, head, heads, hd)
        if not theta > 0:
            raise SpecError(theta_loc, f"must be > 0, got {theta}")
        for a, pair in enumerate(coords):
            if max(abs(pair[0]), abs(pair[1])) > COORD_LIMIT:
                raise SpecError(
                    cfg.loc("patch_size_t" if a == 0 else "patch_size"),
                    f"gives coordinates [scale, offset] = {pair}, past ±{COORD_LIMIT:g}",
                )
        n, pad = dim // 6, dim % 6 // 2
        k = np.arange(n, dtype=np.float64)
        f = np.power(theta, k / (n - 1) if n > 1 else k) * (math.pi / 2)
        inv, axis = [1.0] * pad + np.repeat(f, 3).tolist(), [3] * pad + [0, 1, 2] * n
        width = dim
        if split:  # head ``head``'s slice of the frequencies, half-split over its head_dim
            width, r = hd, hd // 2
            inv, axis = inv[head * r : (head + 1) * r], axis[head * r : (head + 1) * r]
        h, w = sizes["height"], sizes["width"]
        ids = model_grid.indices((len(t), h, w))
        ids[0] = np.asarray(t, dtype=np.int64)[ids[0]]
        # the unrotated columns: an axis of their own, at coordinate 0
        ids = np.concatenate([ids, np.zeros((1, ids.shape[1]), np.int64)])[: max(axis) + 1]
        coords = [*coords, [0.0, 0.0]][: max(axis) + 1]
        here = (*LOC, "_class_name")
        fields = {
            "head_dim": width,
            "inv_freq": inv,
            "mrope_axes": axis,
            "layout": HALF_SPLIT if split else INTERLEAVED,
            "axes_coords": coords,
            "position_ids": ids,
        }
        origin = {
            "head_dim": cfg.loc("attention_head_dim"),
            "inv_freq": theta_loc,
            "mrope_axes": cfg.loc("attention_head_dim"),
            "layout": cfg.loc("rope_type") if split else here,
            "axes_coords": model_grid.LOC,
            "position_ids": model_grid.LOC,
        }
        return Derived(fields, origin)

    def _grid(self, grid):
        """The grid's sizes, its fps (the class's default where absent), first_frame (0) and head
        (None)."""
        sizes = model_grid.parse(grid, self.grid_keys, ("height", "width"))
        return sizes, sizes.pop("fps", float(self.fps)), sizes.pop("first_frame", 0), sizes.pop("head", None)


def _ltx_coords(cfg: Config, fps: float, frames: int) -> tuple[list, list]:
    """LTXVideoRotaryPosEmbed with its pipeline's rope_interpolation_scale (8 / frame_rate, 32, 32):
    axis index i at 2·i·scale·patch / base − 1, base (20, 2048, 2048)."""
    p, pt = cfg.int("patch_size"), cfg.int("patch_size_t")
    spatial = [2.0 * LTX_VAE[1] * p / 2048, -1.0]
    return [[2.0 * LTX_VAE[0] * pt / (fps * 20), -1.0], spatial, list(spatial)], list(range(frames))


def _ltx2_coords(cfg: Config, fps: float, frames: int, first: int) -> tuple[list, list]:
    """LTX2AudioVideoRotaryPosEmbed's video coordinates: the middle of each patch's [start, end) in
    pixels, 2·x/base − 1. Rows and columns: x = s·p·(j + 1/2), an affine map of j. Frames: the
    ends s0·start + causal_offset − s0 clamped at 0, in seconds (/ fps): the frame's index is the
    sum m of its two ends in pixels, at m / (fps·base) − 1."""
    p, pt = cfg.int("patch_size"), cfg.int("patch_size_t")
    sf = cfg.get("vae_scale_factors")
    if not isinstance(sf, (list, tuple)) or len(sf) != 3 or not all(is_int(v) and v >= 1 for v in sf):
        raise SpecError(
            cfg.loc("vae_scale_factors"),
            f"must be 3 integers >= 1 (frames, rows, columns), got {json_repr(sf)}",
        )
    co = cfg.int("causal_offset", lo=0)
    base_f = cfg.int("pos_embed_max_pos")
    coords = [[1.0 / (fps * base_f), -1.0]]
    for s, key in ((sf[1], "base_height"), (sf[2], "base_width")):
        base = cfg.int(key)
        coords.append([2.0 * s * p / base, s * p / base - 1.0])
    t = []
    for i in range(frames):
        start = first + i * pt
        t.append(max(0, start * sf[0] + co - sf[0]) + max(0, (start + pt) * sf[0] + co - sf[0]))
    if t[-1] > POSITION_LIMIT:
        raise SpecError(
            (*model_grid.LOC, "frames"),
            f"its last frame's index (the sum of its ends in pixels) is {t[-1]}, past {POSITION_LIMIT}",
        )
    return coords, t


def _split(cfg: Config, head, heads: int, hd: int) -> bool:
    """LTX-2's rope_type: "interleaved" (one table over the inner width; no ``head``) or "split"
    (head h rotates half-split by its slice [h·hd/2, (h+1)·hd/2) of the frequencies: ``head``)."""
    rope_type = cfg.get("rope_type")
    if rope_type not in ("interleaved", "split"):
        raise SpecError(cfg.loc("rope_type"), f"must be 'interleaved' or 'split', got {json_repr(rope_type)}")
    if rope_type == "interleaved":
        if head is not None:
            raise SpecError(
                (*model_grid.LOC, "head"), "rope_type 'interleaved': one table spans every head; send no head"
            )
        return False
    if hd % 2:
        raise SpecError(
            cfg.loc("attention_head_dim"), f"must be even (rope_type 'split' halves it), got {hd}"
        )
    if head is None or head >= heads:
        raise SpecError(
            (*model_grid.LOC, "head"),
            f"rope_type 'split' gives each head its own frequencies: send the head, 0 to {heads - 1}",
            "missing" if head is None else "value_error",
        )
    return True


def _sana_axes(cfg: Config) -> list:
    """SanaWMRotaryPosEmbed(fhw_dim=None): Wan's split of linear_head_dim (rows and columns
    2 · (d // 6) each, frames the rest)."""
    hd = cfg.int("linear_head_dim")
    hw = 2 * (hd // 6)
    return [hd - 2 * hw, hw, hw]


@dataclasses.dataclass(frozen=True)
class SanaWMRope(AxesRope):
    """Sana-WM: Wan's rope over ``linear_head_dim``, its table SANA_WM_TABLE positions per axis;
    a config without one (``use_pe`` false) is refused."""

    reads = (
        "axes from `linear_head_dim` (Wan's split), θ 10000, interleaved; its table: 1024 positions per axis"
    )

    def derive(self, raw, layer_type, grid=None):
        cfg = read_config(raw, layer_type, self.defaults)
        if cfg.get("use_pe", True) is not True:
            raise SpecError(cfg.loc("use_pe"), "this config has no rotary embedding (use_pe is not true)")
        if cfg.get("pos_embed_type", "wan_rope") != "wan_rope":
            raise SpecError(
                cfg.loc("pos_embed_type"), f"must be 'wan_rope', got {json_repr(cfg.get('pos_embed_type'))}"
            )
        if grid is not None:
            sizes = model_grid.parse(grid, self.grid_keys, ("height", "width"))
            for key, v in sizes.items():
                if v > SANA_WM_TABLE:
                    raise SpecError(
                        (*model_grid.LOC, key),
                        f"its rope table holds {SANA_WM_TABLE} positions per axis, got {v}",
                    )
        return super().derive(raw, layer_type, grid)


_LTX2 = {
    "num_attention_heads": 32,
    "attention_head_dim": 128,
    "patch_size": 1,
    "patch_size_t": 1,
    "vae_scale_factors": [8, 32, 32],
    "pos_embed_max_pos": 20,
    "base_height": 2048,
    "base_width": 2048,
    "rope_theta": 10000.0,
    "causal_offset": 1,
    "rope_type": "interleaved",
}

CLASSES: dict[str, dict] = {
    # its pipeline's frame_rate defaults to 25
    "LTXVideoTransformer3DModel": {
        "rope": NormalisedRope(
            "transformer_ltx.py (LTXVideoRotaryPosEmbed)",
            {"num_attention_heads": 32, "attention_head_dim": 64, "patch_size": 1, "patch_size_t": 1},
            1,
            25.0,
        )
    },
    # the video self-attention's rope (its forward's fps defaults to 24)
    "LTX2VideoTransformer3DModel": {
        "rope": NormalisedRope(
            "transformer_ltx2.py (LTX2AudioVideoRotaryPosEmbed)",
            _LTX2,
            2,
            24.0,
            ("frames", "height", "width", "fps", "head"),
        )
    },
    # build_rotary_emb_for_absolute_positions: a window of latent frames from first_frame on
    "SanaWMLTX2RefinerTransformer3DModel": {
        "rope": NormalisedRope(
            "transformer_sana_wm_refiner.py (SanaWMLTX2AudioVideoRotaryPosEmbed)",
            _LTX2,
            2,
            24.0,
            ("frames", "height", "width", "fps", "first_frame", "head"),
        )
    },
    "SanaWMTransformer3DModel": {
        "rope": SanaWMRope(
            "transformer_sana_wm.py (SanaWMRotaryPosEmbed)",
            {"linear_head_dim": 112},
            _sana_axes,
            10000.0,
            GRID,
            head_dim="linear_head_dim",
        )
    },
}
