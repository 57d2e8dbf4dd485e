"""diffusers rotary transformers read by _class_name:
Allegro, Ideogram4, OmniGen, Wan-Animate 2 and AnyFlow-FAR: rotary layouts of their own.

Records as in diffusers_rope.py (the readings of diffusers_axes.py, and three of this module's own);
diffusers_rope.CLASSES merges this module's CLASSES, and tests/engine/test_diffusers_zoo_more.py holds
each to the class's own module.

- ``ColumnMrope`` (Ideogram4MRoPE): Qwen3-VL's interleaved dealing of the head's frequencies to
  (t, h, w), with ``mrope_section`` covering only part of them (the rest stay on t): ``mrope_axes``.
- ``SuScaledRope`` (OmniGenSuScaledRotaryEmbedding): Phi-3's longrope (``rope_scaling``'s short and
  long factors, the attention factor from max / original max positions).
- ``ReferenceGridRope`` (WanAnimate2's rope_params / rope_apply): Wan's axes over the generation
  grid, and the reference latent's tokens after it at the config's ``refer_offset_*`` and every
  ``refer_stride``-th frame.
- ``ThirdsRope`` (Allegro's get_3d_rotary_pos_embed_allegro): a third of the head per axis,
  half-split within it, at fractional coordinates.
- ``FarChunkRope`` (AnyFlowCausalRotaryPosEmbed): Wan's axes over FAR's compressed frames (the
  centres of their pooling windows, fractional) and then its full-resolution ones.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from ..core.errors import SpecError
from ..core.fields import is_int, is_number, json_repr
from ..tables import rope_axes
from ..tables.rope_spec import HALF_SPLIT, INTERLEAVED
from . import grid as model_grid
from .config import LOC, Config, Derived
from .diffusers_axes import GRID, IDS, SEQUENCE, _theta, read_config, wan_axes

HERE = (*LOC, "_class_name")


@dataclasses.dataclass(frozen=True)
class ColumnMrope:
    """Ideogram4MRoPE(attention_head_dim, rope_theta, mrope_section): d/2 frequencies θ^(−2j/d) all at
    the frame position, then the frequencies 1, 4, ... below 3·section[1] at the row's and 2, 5, ...
    below 3·section[2] at the column's (Qwen3-VL's interleaving, the section need not cover d/2),
    half-split; position_ids [3][n] from its pipeline (text (i, i, i), the image at 65536 + (0, row,
    column))."""

    source: str
    defaults: Mapping
    positions = IDS
    grid_keys = None
    reads = (
        "Qwen3-VL's interleaved mrope over `attention_head_dim`, rows and columns by `mrope_section`, "
        "θ `rope_theta`"
    )

    def derive(self, raw, layer_type):
        cfg = read_config(raw, layer_type, self.defaults)
        d = cfg.int("attention_head_dim")
        if d % 2:
            raise SpecError(cfg.loc("attention_head_dim"), f"must be even (pairs of columns), got {d}")
        section, where = cfg.get("mrope_section"), cfg.loc("mrope_section")
        if not isinstance(section, (list, tuple)) or len(section) != 3 or not all(map(is_int, section)):
            raise SpecError(where, f"must be 3 frequency counts (t, h, w), got {json_repr(section)}")
        for a in (1, 2):  # its index arange(a, 3·section[a], 3) must stay within the d/2 frequencies
            if not 1 <= section[a] or a + 3 * (section[a] - 1) >= d // 2:
                raise SpecError(
                    (*where, a),
                    f"must be 1 to {(d // 2 - 1 - a) // 3 + 1}: axis {a} takes the frequencies {a}, {a + 3}, "
                    f"... below 3·{section[a]} of d/2 = {d // 2}",
                )
        theta, theta_loc = _theta(cfg, "rope_theta")
        axes = rope_axes._interleaved([section[0], section[1], section[2]], d // 2)
        return Derived(
            {"head_dim": d, "rope_theta": theta, "mrope_axes": axes.tolist(), "layout": HALF_SPLIT},
            {
                "head_dim": cfg.loc("attention_head_dim"),
                "rope_theta": theta_loc,
                "mrope_axes": where,
                "layout": HERE,
            },
        )


@dataclasses.dataclass(frozen=True)
class SuScaledRope:
    """OmniGenSuScaledRotaryEmbedding(hidden_size // num_attention_heads, max_position_embeddings,
    original_max_position_embeddings, rope_base, rope_scaling): Phi-3's longrope, half-split, at the
    1-D positions its processor hands in; ``rope_scaling`` has no default (its checkpoints give
    ``short_factor`` and ``long_factor``; the class reads nothing else of it)."""

    source: str
    defaults: Mapping
    positions = SEQUENCE
    grid_keys = None
    reads = (
        "Phi-3's longrope: `rope_scaling`'s short and long factors, `max_position_embeddings` over "
        "`original_max_position_embeddings`, θ `rope_base`, head `hidden_size` / `num_attention_heads`"
    )

    def derive(self, raw, layer_type):
        cfg = read_config(raw, layer_type, self.defaults)
        scaling = cfg.block("rope_scaling")
        if scaling is None:
            raise SpecError(
                cfg.loc("rope_scaling"),
                "field required (this class has no default for it): its short_factor and long_factor",
                "missing",
            )
        theta, theta_loc = _theta(cfg, "rope_base")
        head = cfg.int("hidden_size") // cfg.int("num_attention_heads")
        fields = {
            "head_dim": head,
            "rope_theta": theta,
            "rope_scaling": {
                "rope_type": "longrope",
                "short_factor": scaling.get("short_factor"),
                "long_factor": scaling.get("long_factor"),
            },
            "max_position_embeddings": cfg.int("max_position_embeddings"),
            "original_max_position_embeddings": cfg.int("original_max_position_embeddings"),
            "layout": HALF_SPLIT,
        }
        origin = {k: cfg.loc(k) for k in ("rope_scaling", "max_position_embeddings")}
        origin.update(
            head_dim=cfg.loc("hidden_size"),
            rope_theta=theta_loc,
            original_max_position_embeddings=cfg.loc("original_max_position_embeddings"),
            layout=HERE,
        )
        return Derived(fields, origin)


# WanAnimate2Transformer3DModel._rope_freqs: rope_params(512, ...) per axis, positions 0..511 + offset
WAN_ANIMATE2_TABLE = 512
REFERENCE = ("reference_frames", "reference_height", "reference_width")


@dataclasses.dataclass(frozen=True)
class ReferenceGridRope:
    """WanAnimate2's rope_apply: Wan's axes of head = dim // num_heads (θ 10000, complex: interleaved)
    over the generation latent (frame, row, column), then, where the grid names a reference latent
    (``reference_*``), its tokens at frame refer_offset_t + i·refer_stride, row refer_offset_h + r,
    column refer_offset_w + c (a negative offset: the reference grid's size on that axis), as its
    cached pass rotates its keys; the tables stop at 512 positions per axis."""

    source: str
    defaults: Mapping
    positions = GRID
    grid_keys = ("frames", "height", "width", *REFERENCE)
    reads = (
        "Wan's axes over `dim` / `num_heads`, θ 10000, interleaved; the reference latent at "
        "`refer_offset_t`, `refer_offset_h`, `refer_offset_w`, frames every `refer_stride`"
    )

    def derive(self, raw, layer_type, grid=None):
        cfg = read_config(raw, layer_type, self.defaults)
        d = cfg.int("dim") // cfg.int("num_heads")
        if d % 2 or d < 6:
            raise SpecError(
                cfg.loc("dim"), f"dim // num_heads = {d} must be even and >= 6 (rope_params' pairs per axis)"
            )
        head = Config({"attention_head_dim": d})
        fields = {"head_dim": d, "rope_theta": 10000.0, "axes_dim": wan_axes(head), "layout": INTERLEAVED}
        origin = {"head_dim": cfg.loc("dim"), "axes_dim": cfg.loc("dim"), "rope_theta": HERE, "layout": HERE}
        if grid is not None:
            fields["position_ids"] = self.tokens(cfg, grid)
            origin["position_ids"] = model_grid.LOC
        return Derived(fields, origin)

    def tokens(self, cfg: Config, grid) -> np.ndarray:
        sizes = model_grid.parse(grid, self.grid_keys, ("height", "width"))  # its true count: below
        gen = [sizes.get("frames", 1), sizes["height"], sizes["width"]]
        _within(gen, 1, ("frames", "height", "width"))
        ids = model_grid.indices(gen)
        given = [k for k in REFERENCE if k in sizes]
        if not given:
            return ids
        for k in REFERENCE[1:]:
            if k not in sizes:
                raise SpecError((*model_grid.LOC, k), "field required beside " + ", ".join(given), "missing")
        ref = [sizes.get("reference_frames", 1), sizes["reference_height"], sizes["reference_width"]]
        stride = cfg.int("refer_stride")
        _within(ref, stride, REFERENCE)
        model_grid.at_most(ids.shape[1] + math.prod(ref))
        rids = model_grid.indices(ref)
        rids[0] *= stride
        for a, key in enumerate(("refer_offset_t", "refer_offset_h", "refer_offset_w")):
            offset = cfg.int(key, lo=-(1 << 31))
            rids[a] += offset if offset >= 0 else ref[a]
        return np.concatenate([ids, rids], axis=1)


def _within(sizes, stride: int, keys) -> None:
    """rope_apply takes each axis's first rows of a 512-row table (frames every ``stride``-th)."""
    for n, step, key in zip(sizes, (stride, 1, 1), keys):
        if (n - 1) * step >= WAN_ANIMATE2_TABLE:
            raise SpecError(
                (*model_grid.LOC, key),
                f"its rope tables hold {WAN_ANIMATE2_TABLE} positions per axis; {n} (every {step}) go past them",
            )


ALLEGRO_SCALES = ("interpolation_scale_t", "interpolation_scale_h", "interpolation_scale_w")


@dataclasses.dataclass(frozen=True)
class ThirdsRope:
    """Allegro: its pipeline's get_3d_rotary_pos_embed_allegro(attention_head_dim, ...) and
    apply_rotary_emb_allegro: frames, rows and columns each rotate a third of the head, half-split
    within it (posenc's ``axes_dim`` [d/3]·3 with the half-split layout pairs k with k + d/6 in each
    block), θ 10000; index i of an axis stands for i / interpolation_scale_* (``axes_coords``,
    fractional), the latent's (frame, row, column) grid row-major."""

    source: str
    defaults: Mapping
    positions = GRID
    grid_keys = ("frames", "height", "width")
    reads = (
        "thirds of `attention_head_dim` for frames, rows, columns, each half-split, θ 10000, at "
        "index / `interpolation_scale_t`, `_h`, `_w` (fractional)"
    )

    def derive(self, raw, layer_type, grid=None):
        cfg = read_config(raw, layer_type, self.defaults)
        d, loc = cfg.int("attention_head_dim"), cfg.loc("attention_head_dim")
        if d % 6:
            raise SpecError(loc, f"must be a multiple of 6 (three thirds of pairs, its x.chunk(3)), got {d}")
        coords = []
        for key in ALLEGRO_SCALES:
            v = cfg.get(key)
            if not is_number(v) or not 0 < v < float("inf"):
                raise SpecError(cfg.loc(key), f"must be a positive number, got {json_repr(v)}")
            coords.append([1.0 / float(v), 0.0])
        fields = {
            "head_dim": d,
            "rope_theta": 10000.0,
            "axes_dim": [d // 3] * 3,
            "layout": HALF_SPLIT,
            "axes_coords": coords,
        }
        origin = {"head_dim": loc, "axes_dim": loc, "rope_theta": HERE, "layout": HERE, "axes_coords": HERE}
        if grid is not None:
            sizes = model_grid.parse(grid, self.grid_keys, ("height", "width"))
            fields["position_ids"] = model_grid.indices(
                (sizes.get("frames", 1), sizes["height"], sizes["width"])
            )
            origin["position_ids"] = model_grid.LOC
        return Derived(fields, origin)


FAR_KEYS = ("frames", "height", "width", "compressed_frames", "compressed_height", "compressed_width")


@dataclasses.dataclass(frozen=True)
class FarChunkRope:
    """AnyFlowCausalRotaryPosEmbed(attention_head_dim, patch_size, compressed_patch_size,
    rope_max_seq_len): Wan's axes (θ 10000, complex: interleaved) over the FAR sequence its key
    rotates: the first ``compressed_frames`` frames on the compressed grid, then the rest of the
    ``frames`` on the full grid (``height`` x ``width`` patches). A compressed token's frequencies are
    the unit-normalised average of e^(i·f·p) over the s = compressed_patch_size // patch_size full
    positions p = s·k .. s·k + s − 1 it covers: e^(i·f·(s·k + (s − 1)/2)) while sin(s·f/2) stays
    positive, that is s ≤ 6 (every f ≤ 1), so coordinates are exact halves (``axes_coords`` [0.5, 0]
    over twice the coordinate). ``compressed_height``/``_width`` default to (height · patch_size) //
    compressed_patch_size, as its forward computes them from the latent."""

    source: str
    defaults: Mapping
    positions = GRID
    grid_keys = FAR_KEYS
    reads = (
        "Wan's axes over `attention_head_dim`, θ 10000, interleaved; compressed frames at the centres of "
        "their `compressed_patch_size` // `patch_size` windows, fractional; tables of `rope_max_seq_len`"
    )

    def derive(self, raw, layer_type, grid=None):
        cfg = read_config(raw, layer_type, self.defaults)
        d = cfg.int("attention_head_dim")
        if d % 2 or d < 6:
            raise SpecError(cfg.loc("attention_head_dim"), f"must be even and >= 6 (pairs per axis), got {d}")
        fields = {
            "head_dim": d,
            "rope_theta": 10000.0,
            "axes_dim": wan_axes(Config({"attention_head_dim": d})),
            "layout": INTERLEAVED,
        }
        loc = cfg.loc("attention_head_dim")
        origin = {"head_dim": loc, "axes_dim": loc, "rope_theta": HERE, "layout": HERE}
        if grid is not None:
            fields["position_ids"] = self.tokens(cfg, grid)
            fields["axes_coords"] = [[0.5, 0.0]] * 3
            origin["position_ids"] = origin["axes_coords"] = model_grid.LOC
        return Derived(fields, origin)

    def tokens(self, cfg: Config, grid) -> np.ndarray:
        """Twice each token's (frame, row, column) coordinate, compressed tokens first."""
        ps, cps = _sizes(cfg, "patch_size"), _sizes(cfg, "compressed_patch_size")
        down = []
        for a in range(3):
            s = cps[a] // ps[a]
            if not 1 <= s <= 6:
                raise SpecError(
                    cfg.loc("compressed_patch_size"),
                    f"compressed_patch_size // patch_size must be 1 to 6 on each axis (beyond, its averaged "
                    f"frequencies turn by π), got {s} on axis {a}",
                )
            down.append(s)
        sizes = model_grid.parse(grid, self.grid_keys, ("height", "width"))  # its true count: below
        f, h, w = sizes.get("frames", 1), sizes["height"], sizes["width"]
        nc = sizes.get("compressed_frames", 0)
        if nc > f:
            raise SpecError((*model_grid.LOC, "compressed_frames"), f"must be at most frames ({f}), got {nc}")
        hc = sizes.get("compressed_height", h * ps[1] // cps[1])
        wc = sizes.get("compressed_width", w * ps[2] // cps[2])
        top = cfg.int("rope_max_seq_len")
        for key, n, s in (("frames", f, down[0]), ("height", h, 1), ("width", w, 1)):
            if n > top // s:
                raise SpecError(
                    (*model_grid.LOC, key), f"its rope table holds {top // s} positions here, got {n}"
                )
        for key, n, s in (("compressed_height", hc, down[1]), ("compressed_width", wc, down[2])):
            if n > top // s:
                raise SpecError(
                    (*model_grid.LOC, key), f"its pooled table holds {top // s} positions, got {n}"
                )
        model_grid.at_most((f - nc) * h * w + nc * hc * wc)
        full = model_grid.indices((f - nc, h, w)) * 2
        full[0] += 2 * nc
        small = model_grid.indices((nc, hc, wc)) if hc and wc else np.zeros((3, 0), np.int64)
        small = small * np.array(down)[:, None] * 2 + (np.array(down) - 1)[:, None]
        return np.concatenate([small, full], axis=1)


def _sizes(cfg: Config, key: str) -> list:
    v = cfg.get(key)
    if not isinstance(v, (list, tuple)) or len(v) != 3 or not all(is_int(x) and x >= 1 for x in v):
        raise SpecError(cfg.loc(key), f"must be 3 sizes (t, h, w) >= 1, got {json_repr(v)}")
    return list(v)


CLASSES: dict[str, dict] = {
    "Ideogram4Transformer2DModel": {
        "rope": ColumnMrope(
            "transformer_ideogram4.py (Ideogram4MRoPE)",
            {"attention_head_dim": 256, "rope_theta": 5000000, "mrope_section": [24, 20, 20]},
        )
    },
    "OmniGenTransformer2DModel": {
        "rope": SuScaledRope(
            "transformer_omnigen.py (OmniGenSuScaledRotaryEmbedding)",
            {
                "hidden_size": 3072,
                "num_attention_heads": 32,
                "max_position_embeddings": 131072,
                "original_max_position_embeddings": 4096,
                "rope_base": 10000,
            },
        )
    },
    "WanAnimate2Transformer3DModel": {
        "rope": ReferenceGridRope(
            "transformer_wan_animate_2.py (rope_params, rope_apply)",
            {
                "dim": 5120,
                "num_heads": 40,
                "refer_offset_t": 1,
                "refer_offset_h": 0,
                "refer_offset_w": -1,
                "refer_stride": 1,
            },
        )
    },
    "AnyFlowFARTransformer3DModel": {
        "rope": FarChunkRope(
            "transformer_anyflow_far.py (AnyFlowCausalRotaryPosEmbed)",
            {
                "attention_head_dim": 128,
                "patch_size": [1, 2, 2],
                "compressed_patch_size": [1, 4, 4],
                "rope_max_seq_len": 1024,
            },
        )
    },
    "AllegroTransformer3DModel": {
        "rope": ThirdsRope(
            "transformer_allegro.py (its pipeline's get_3d_rotary_pos_embed_allegro)",
            {
                "attention_head_dim": 96,
                "interpolation_scale_t": 2.2,
                "interpolation_scale_h": 2.0,
                "interpolation_scale_w": 2.0,
            },
        )
    },
}
