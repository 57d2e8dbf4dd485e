"""diffusers rotary transformers read by _class_name:
JoyImage Edit / Edit Plus, Lumina-Next and PRX: rotary embeddings their transformers build from a
head width of ``hidden_size // heads`` (JoyImage, PRX), or their pipeline builds (Lumina-Next, with
a scaling that follows the image size and the denoising step).

Records as in diffusers_rope.py (the readings of diffusers_axes.py, and two of this module's own:
``HeadAxesRope``, ``LuminaNextRope``); diffusers_rope.CLASSES merges this module's CLASSES, and
tests/engine/test_diffusers_zoo_pipeline.py holds each to the class's own code.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping

import numpy as np

from ..core.errors import SpecError
from ..core.fields import json_repr
from ..tables import rope_axes
from ..tables.rope_spec import INTERLEAVED, MAX_HEAD_DIM
from . import grid as model_grid
from .config import LOC, Derived
from .diffusers_axes import GRID, AxesRope, _axes, _inv, _theta, read_config

SCALED = "scaled"  # Lumina-Next: a grid only (the image's size sets its pipeline's frequencies)


@dataclasses.dataclass(frozen=True)
class HeadAxesRope(AxesRope):
    """A frequency set per axis (``AxesRope``) over a head of ``hidden // heads`` columns, which the
    axes must fill (the class's ValueError otherwise). A null ``axes`` key is the class's own
    ``fallback(head)`` (JoyImage: [head // 3] * 3; PRX: [32, 32]), whatever its default.
    ``text_key``: JoyImage, whose rope_type "mrope" also rotates the caption, at
    max(frames, height, width) + j on every axis, after the image (a ``text`` grid key)."""

    hidden: str = "hidden_size"
    heads: str = "num_attention_heads"
    fallback: Callable[[int], list] | None = None
    n_axes: int = 3  # the axes its positions have (the class fails or misreads other counts)
    text_key: str | None = None
    reads: str = ""  # what it reads, for docs/reference.md (tests/tools/diffusers_zoo._reads)

    @property
    def grid_keys(self):
        keys = super().grid_keys[3 - self.n_axes :]  # PRX: rows and columns
        return (*keys, "text") if self.text_key is not None else keys

    def derive(self, raw, layer_type, grid=None):
        cfg = read_config(raw, layer_type, self.defaults)
        hidden, heads = cfg.int(self.hidden), cfg.int(self.heads)
        if hidden % heads:
            raise SpecError(
                cfg.loc(self.hidden), f"must be divisible by {self.heads} = {heads}, got {hidden}"
            )
        head = hidden // heads
        if cfg.get(self.axes) is None or (self.axes in raw and raw[self.axes] is None):
            axes = self.fallback(head)
        else:
            axes = _axes(cfg, self.axes)
        if len(axes) != self.n_axes:
            raise SpecError(
                cfg.loc(self.axes), f"must be {self.n_axes} widths, one per axis, got {list(axes)}"
            )
        if sum(x for x in axes if isinstance(x, int)) != head:
            raise SpecError(
                cfg.loc(self.axes),
                f"must sum to the head width {self.hidden} // {self.heads} = {head}, got {list(axes)}",
            )
        theta, theta_loc = _theta(cfg, self.theta)
        here = (*LOC, "_class_name")
        d = Derived(
            {"head_dim": head, "rope_theta": theta, "axes_dim": axes, "layout": self.layout},
            {
                "head_dim": cfg.loc(self.hidden),
                "axes_dim": cfg.loc(self.axes),
                "rope_theta": theta_loc,
                "layout": here,
            },
        )
        if grid is not None:  # else the request's position_ids are the positions
            d.fields["position_ids"] = self._tokens(cfg, grid, len(axes))
            d.origin["position_ids"] = model_grid.LOC
        return d

    def _tokens(self, cfg, grid, k: int) -> np.ndarray:
        if self.text_key is None:
            return self.tokens(cfg, grid, k)
        sizes = model_grid.parse(grid, self.grid_keys, ("height", "width"))
        text = sizes.pop("text", None)
        image = self.tokens(cfg, sizes, k)
        if text is None:
            return image
        kind = cfg.get(self.text_key)
        if kind != "mrope":
            raise SpecError(
                (*model_grid.LOC, "text"),
                f'{self.text_key} {json_repr(kind)} rotates no caption tokens (only "mrope" does): '
                "leave text out",
            )
        # get_rotary_pos_embed: the caption after the largest index of the image's grid
        start = max(sizes.get("frames", 1), sizes["height"], sizes["width"])
        caption = np.repeat((start + np.arange(text, dtype=np.int64))[None], k, axis=0)
        return np.concatenate([image, caption], axis=1)


# Lumina-Next's pipeline: get_2d_rotary_pos_embed_lumina(head_dim, 384, 384, linear_factor, ntk_factor)
LUMINA_TABLE = 384  # the rows and columns of the table it slices the latent's grid from
PHASES = ("linear", "ntk")  # grid "phase": which of its pipeline's two scalings the step takes


@dataclasses.dataclass(frozen=True)
class LuminaNextRope:
    """Lumina-Next: its pipeline builds get_2d_rotary_pos_embed_lumina(d, 384, 384, linear_factor,
    ntk_factor) at every step, d = hidden_size // num_attention_heads; rows and columns each take d/4
    frequencies 1 / θ^(4k/d) (θ 10000), complex, dealt alternately (row k, column k, row k + 1...:
    ``mrope_axes``), pairs (2j, 2j + 1); the latent's grid is the table's top-left corner. Its
    scaling s = sqrt(width · height) / (sample_size · 8), the image in pixels: height · patch_size · 8
    (the size that gives the grid when patch_size · 8 divides it), so s = patch_size ·
    sqrt(height · width) / sample_size in patches. Before scaling_watershed (every
    step at its default 1.0) frequencies are divided by s (phase "linear"); from it on θ is 10000 · s
    (phase "ntk"). The frequencies are ``inv_freq`` (float64); a ``grid`` gives them and the
    positions."""

    source: str
    defaults: Mapping
    grid_keys = ("height", "width", "phase")
    positions = SCALED
    reads = (
        "rows and columns alternating, d/4 frequencies each over d = `hidden_size` // `num_attention_heads`, "
        "θ 10000; its pipeline's scaling s = `patch_size`·sqrt(height·width) / `sample_size`: frequencies ÷ s "
        '(`phase` "linear") or θ·s ("ntk"), interleaved'
    )

    def derive(self, raw, layer_type, grid=None):
        cfg = read_config(raw, layer_type, self.defaults)
        hidden = cfg.int("hidden_size")
        d = hidden // cfg.int("num_attention_heads")
        if d > MAX_HEAD_DIM:  # before any array is sized by it
            raise SpecError(
                cfg.loc("hidden_size"),
                f"hidden_size // num_attention_heads must be at most {MAX_HEAD_DIM}, got {d}",
            )
        if d % 4:
            raise SpecError(
                cfg.loc("hidden_size"),
                f"hidden_size // num_attention_heads must be a multiple of 4 (rows and columns each "
                f"rotate d/2), got {d}",
            )
        phase = grid.get("phase", "linear") if isinstance(grid, Mapping) else "linear"
        if phase not in PHASES:
            raise SpecError(
                (*model_grid.LOC, "phase"),
                'must be "linear" (the steps before its pipeline\'s scaling_watershed: every step at its '
                f'default 1.0) or "ntk" (the steps from it on), got {json_repr(phase)}',
            )
        # the phase is no size: parse the sizes with it counted as one
        sized = {k: 1 if k == "phase" else v for k, v in grid.items()} if isinstance(grid, Mapping) else grid
        sizes = model_grid.parse(sized, self.grid_keys, ("height", "width"))
        h, w = sizes["height"], sizes["width"]
        for key, n in (("height", h), ("width", w)):
            if n > LUMINA_TABLE:
                raise SpecError(
                    (*model_grid.LOC, key), f"its pipeline's table stops at {LUMINA_TABLE} patches, got {n}"
                )
        p, base = cfg.int("patch_size"), cfg.int("sample_size")
        for key, v in (("patch_size", p), ("sample_size", base)):
            if v > model_grid.MAX_SIDE:  # s then stays a finite, positive float
                raise SpecError(cfg.loc(key), f"must be at most {model_grid.MAX_SIDE}, got {v}")
        side = 8 * p  # pixels per patch (its VAE's factor of 8)
        s = math.sqrt(w * side * h * side / (base * 8) ** 2)
        if phase == "linear":
            f = np.asarray(_inv(10000.0, d // 2, d // 4)) / s
        else:
            f = np.asarray(_inv(10000.0 * s, d // 2, d // 4))
        here = (*LOC, "_class_name")
        fields = {
            "head_dim": d,
            "inv_freq": np.repeat(f, 2).tolist(),
            "mrope_axes": rope_axes.dealt("alternating", None, d // 2),
            "layout": INTERLEAVED,
            "position_ids": model_grid.indices((h, w)),
        }
        origin = {
            "head_dim": cfg.loc("hidden_size"),
            "inv_freq": cfg.loc("sample_size"),
            "mrope_axes": here,
            "layout": here,
            "position_ids": model_grid.LOC,
        }
        return Derived(fields, origin)


_JOY_READS = (
    "axes `rope_dim_list` (null: [d/3]·3) over d = `hidden_size` // `num_attention_heads`, θ `theta`, "
    "interleaved"
)


def _joyimage(file: str, cls: str) -> HeadAxesRope:
    # get_rotary_pos_embed / _get_rotary_pos_embed_for_range: θ^(−2j/dim) per axis (float32), cos
    # and sin repeat_interleave(2), rotate pairs (2j, 2j + 1), at the (frame, row, column) grid
    return HeadAxesRope(
        f"{file} ({cls})",
        {"hidden_size": 3072, "num_attention_heads": 24, "rope_dim_list": [16, 56, 56], "theta": 256},
        "rope_dim_list",
        "theta",
        GRID,
        fallback=lambda head: [head // 3] * 3,
        text_key="rope_type" if "Plus" not in cls else None,
        reads=_JOY_READS
        + (
            "; its pipeline's items (target, then references) at successive frames"
            if "Plus" in cls
            else '; `rope_type` "mrope": the caption after the image, at max(frames, height, width) + j'
        ),
    )


CLASSES: dict[str, dict] = {
    # its forward builds the grid from the latent; rope_type "mrope" rotates the caption too
    "JoyImageEditTransformer3DModel": {
        "rope": _joyimage("transformer_joyimage.py", "JoyImageEditTransformer3DModel.get_rotary_pos_embed")
    },
    # its forward: each of its pipeline's shape_list items (target, then references) at the frames
    # after the last one's; position_ids, or a grid where the references are the target's size
    "JoyImageEditPlusTransformer3DModel": {
        "rope": _joyimage(
            "transformer_joyimage_edit_plus.py",
            "JoyImageEditPlusTransformer3DModel._get_rotary_pos_embed_for_range",
        )
    },
    # PRXEmbedND(theta, axes_dim) at get_image_ids' (row, column): float64 frequencies, 2x2 rotation
    # matrices per pair; axes_dim null (its default) is [32, 32]
    "PRXTransformer2DModel": {
        "rope": HeadAxesRope(
            "transformer_prx.py (PRXEmbedND)",
            {"hidden_size": 1792, "num_heads": 28, "theta": 10000},
            "axes_dim",
            "theta",
            GRID,
            heads="num_heads",
            fallback=lambda head: [32, 32],
            n_axes=2,
            reads="axes `axes_dim` (null: [32, 32]) over d = `hidden_size` // `num_heads`, θ `theta`, interleaved",
        )
    },
    "LuminaNextDiT2DModel": {
        "rope": LuminaNextRope(
            "lumina_nextdit2d.py (its pipeline's get_2d_rotary_pos_embed_lumina)",
            {"hidden_size": 2304, "num_attention_heads": 32, "patch_size": 2, "sample_size": 128},
        )
    },
}
