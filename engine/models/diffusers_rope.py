"""diffusers transformer configs whose positions are rotary (read by ``_class_name``): each record
reads the config as the class's own code does (diffusers 0.42.1, models/transformers/*.py and
models/embeddings.py). registry.CLASSES holds them beside vision.CLASSES and diffusers_grid.CLASSES.

Each record is one of the readings below (a frequency set per axis, posenc's ``axes_dim``, for most:
``get_1d_rotary_pos_embed`` and its copies) with where the config keeps the axes' widths and θ and
how the class pairs the columns. The positions are the ones the class builds, given as
``position_ids`` (one list per axis) or, for a 1-D sequence, ``positions`` (docs/reference.md,
diffusers). engine/models/diffusers_zoo.json (tests/tools/diffusers_zoo.py) catalogues every class of the pinned
diffusers and its positional kind; tests/engine/test_diffusers_zoo.py holds each record to the
class's own positional module.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Callable, Mapping

import numpy as np

from ..core.errors import SpecError
from ..core.fields import is_number, json_repr
from ..tables.rope_spec import HALF_SPLIT, INTERLEAVED
from . import grid as model_grid
from .config import LOC, Config, Derived

IDS = "ids"  # handed in by its pipeline (Flux's img_ids / txt_ids): [n, k] -> position_ids [k][n]
GRID = "grid"  # its latent's (frame, row, column) grid, integer, row-major
TEXT_THEN_GRID = "text-then-grid"  # caption tokens (i, 0, 0), then the image at (text, row, column)
IMAGE_THEN_TEXT = "image-then-text"  # the image at (text, row, column), then the caption's (i, 0, 0)
SEQUENCE = "sequence"  # a 1-D sequence, 0..n-1: plain ``positions``
# the ``grid`` keys of each way of building positions from a token grid (models/grid.py), and the
# ones required; IDS and SEQUENCE take no grid
GRID_KEYS = {
    GRID: (("frames", "height", "width"), ("height", "width")),
    TEXT_THEN_GRID: (("text", "height", "width"), ("height", "width")),
    IMAGE_THEN_TEXT: (("text", "height", "width"), ("height", "width")),
}


@dataclasses.dataclass(frozen=True)
class AxesRope:
    """A frequency set per axis over the head (``axes_dim`` rope). ``axes`` is the config key of the
    axes' widths or a rule computing them from the config (Wan: from attention_head_dim);
    ``theta`` the config key of θ or the constant the class passes; ``positions`` how the class
    builds its positions (IDS, GRID, TEXT_THEN_GRID)."""

    source: str
    defaults: Mapping
    axes: str | Callable[[Config], list]
    theta: str | float
    positions: str
    layout: str = INTERLEAVED
    head_dim: str = "attention_head_dim"
    # ChronoEdit: a two-frame latent takes the frames 0 and cfg[two_frames_key] - 1
    two_frames_key: str | None = None

    @property
    def grid_keys(self):
        """The grid keys this class's positions are built from (None: position_ids only)."""
        keys = GRID_KEYS.get(self.positions)
        return None if keys is None else keys[0]

    def derive(self, raw, layer_type, grid=None):
        if layer_type is not None:
            raise SpecError(("layer_type",), "diffusers transformer configs have no layer types")
        cfg = Config(raw, {}, self.defaults)
        if callable(self.axes):
            axes, axes_loc = self.axes(cfg), cfg.loc(self.head_dim)
        else:
            axes, axes_loc = _axes(cfg, self.axes), cfg.loc(self.axes)
        # the rotary width: attention_head_dim, or the axes' sum where the class rotates exactly the
        # axes it is given (its head is dim // n_heads, which it asserts equal to the sum)
        head_dim = sum(axes) if self.head_dim == self.axes else cfg.int(self.head_dim)
        theta, theta_loc = _theta(cfg, self.theta)
        d = Derived(
            {"head_dim": head_dim, "rope_theta": theta, "axes_dim": axes, "layout": self.layout},
            {
                "head_dim": cfg.loc(self.head_dim),
                "axes_dim": axes_loc,
                "rope_theta": theta_loc,
                "layout": (*LOC, "_class_name"),
            },
        )
        if grid is not None:  # else the request's position_ids are the positions
            d.fields["position_ids"] = self.tokens(cfg, grid, len(axes))
            d.origin["position_ids"] = model_grid.LOC
        return d

    def tokens(self, cfg: Config, grid, k: int) -> np.ndarray:
        """The positions the class builds for ``grid``: each axis's index of every token, [k, n]."""
        keys, required = GRID_KEYS[self.positions]
        sizes = model_grid.parse(grid, keys, required)
        h, w = sizes["height"], sizes["width"]
        if self.positions == GRID:
            f = sizes.get("frames", 1)
            if k == 2:
                if f != 1:
                    raise SpecError(
                        (*model_grid.LOC, "frames"), "this config's rotary axes are 2-D (rows, columns)"
                    )
                return model_grid.indices((h, w))
            ids = model_grid.indices((f, h, w))
            if f == 2 and self.two_frames_key is not None:
                ids[0] *= cfg.int(self.two_frames_key) - 1
            return ids
        text = sizes.get("text", 0)
        image = model_grid.indices((1, h, w))
        image[0] = text
        caption = np.zeros((3, text), dtype=np.int64)
        caption[0] = np.arange(text)
        parts = (caption, image) if self.positions == TEXT_THEN_GRID else (image, caption)
        return np.concatenate(parts, axis=1)


@dataclasses.dataclass(frozen=True)
class SequenceRope:
    """A 1-D sequence (an audio DiT's frames): a plain rope over ``width(cfg)`` rotary columns (the
    first of each head where the class rotates part of it), θ from a config key or the class's
    constant, half-split (rotate_half); positions are the sequence's own, 0..n-1."""

    source: str
    defaults: Mapping
    width: Callable[[Config], tuple]  # -> (rotary width, the key it follows from)
    theta: str | float
    layout: str = HALF_SPLIT
    positions: str = SEQUENCE
    grid_keys = None  # a sequence, not a token grid: plain positions

    def derive(self, raw, layer_type):
        if layer_type is not None:
            raise SpecError(("layer_type",), "diffusers transformer configs have no layer types")
        cfg = Config(raw, {}, self.defaults)
        width, key = self.width(cfg)
        theta, theta_loc = _theta(cfg, self.theta)
        return Derived(
            {"head_dim": width, "rope_theta": theta, "layout": self.layout},
            {"head_dim": cfg.loc(key), "rope_theta": theta_loc, "layout": (*LOC, "_class_name")},
        )


@dataclasses.dataclass(frozen=True)
class InterleavedMrope:
    """Cosmos 3's Cosmos3VLTextRotaryEmbedding: Qwen3-VL's multimodal rope (one frequency set over
    head_dim, dealt to (t, h, w) interleaved by ``rope_axes_dim``, else ``rope_scaling``'s
    ``mrope_section``, else [24, 20, 20]), half-split; position_ids [3][n] from its forward."""

    source: str
    defaults: Mapping
    positions = IDS
    grid_keys = None

    def derive(self, raw, layer_type, grid=None):
        if layer_type is not None:
            raise SpecError(("layer_type",), "diffusers transformer configs have no layer types")
        cfg = Config(raw, {}, self.defaults)
        section, where = cfg.get("rope_axes_dim"), cfg.loc("rope_axes_dim")
        if section is None:
            scaling = cfg.block("rope_scaling") or {}
            section, where = (
                scaling.get("mrope_section", [24, 20, 20]),
                (*cfg.loc("rope_scaling"), "mrope_section"),
            )
        theta, theta_loc = _theta(cfg, "rope_theta")
        here = (*LOC, "_class_name")
        return Derived(
            {
                "head_dim": cfg.int("head_dim"),
                "rope_theta": theta,
                "mrope_section": section,
                "mrope_interleaved": True,
                "layout": HALF_SPLIT,
            },
            {
                "head_dim": cfg.loc("head_dim"),
                "rope_theta": theta_loc,
                "mrope_section": where,
                "mrope_interleaved": here,
                "layout": here,
            },
        )


def _theta(cfg: Config, theta) -> tuple[float, tuple]:
    """θ from the config key ``theta``, or the constant the class passes whatever the config says."""
    if not isinstance(theta, str):
        return float(theta), (*LOC, "_class_name")
    v = cfg.get(theta)
    if not is_number(v):
        raise SpecError(cfg.loc(theta), f"must be a number, got {json_repr(v)}")
    return float(v), cfg.loc(theta)


def _axes(cfg: Config, key: str) -> list:
    v = cfg.get(key)
    if v is None:
        raise SpecError(cfg.loc(key), "field required (this class has no default for it)", "missing")
    if not isinstance(v, (list, tuple)):
        raise SpecError(cfg.loc(key), f"must be a list of the axes' rotary widths, got {json_repr(v)}")
    return list(v)


def wan_axes(cfg: Config) -> list:
    """WanRotaryPosEmbed: h = w = 2 * (attention_head_dim // 6), t the rest of the head."""
    hd = cfg.int("attention_head_dim")
    hw = 2 * (hd // 6)
    return [hd - 2 * hw, hw, hw]


def chronoedit_axes(cfg: Config) -> list:
    """ChronoEditRotaryPosEmbed builds Wan's table (2 * (attention_head_dim // 6) columns per spatial
    axis) but splits it at attention_head_dim // 3: where the two differ its columns mix the axes."""
    hd = cfg.int("attention_head_dim")
    if hd // 3 != 2 * (hd // 6):
        raise SpecError(
            cfg.loc("attention_head_dim"),
            f"ChronoEdit builds 2 * ({hd} // 6) = {2 * (hd // 6)} columns per spatial axis and splits them at "
            f"{hd} // 3 = {hd // 3}, which mixes its axes; posenc reads head widths where the two agree",
        )
    return wan_axes(cfg)


def _wan(file: str, cls: str, head: int = 128, axes=wan_axes, **more) -> AxesRope:
    # WanRotaryPosEmbed(attention_head_dim, patch_size, rope_max_seq_len): get_1d_rotary_pos_embed
    # (use_real, repeat_interleave_real) per axis, θ 10000; its table stops at rope_max_seq_len
    return AxesRope(
        f"{file} ({cls})",
        {"attention_head_dim": head, **more},
        axes,
        10000.0,
        GRID,
        two_frames_key="rope_temporal_skip_len" if more else None,
    )


def _split(key: str, heads: str, div: int = 1) -> Callable[[Config], tuple]:
    """The rotary width ``(cfg[key] // cfg[heads]) // div`` and the key it follows from."""
    return lambda cfg: ((cfg.int(key) // cfg.int(heads)) // div, key)


def _key(key: str) -> Callable[[Config], tuple]:
    return lambda cfg: (cfg.int(key), key)


def _flux_like(file: str, cls: str, axes, theta, head: int = 128, theta_key: str | None = None) -> AxesRope:
    # FluxPosEmbed and its copies: get_1d_rotary_pos_embed(axes_dim[i], ids[:, i], theta,
    # repeat_interleave_real=True, use_real=True, freqs_dtype=float64) per axis of the ids
    defaults = {"attention_head_dim": head, "axes_dims_rope": list(axes)}
    if theta_key is not None:
        defaults[theta_key] = theta
    return AxesRope(f"{file} ({cls})", defaults, "axes_dims_rope", theta_key or float(theta), IDS)


def _hunyuan(file: str, cls: str, axes=(16, 56, 56)) -> AxesRope:
    # HunyuanVideoRotaryPosEmbed and its copies: meshgrid of the latent's patch grid, then
    # get_1d_rotary_pos_embed(rope_dim[i], grid[i], rope_theta, use_real=True) per axis
    # (repeat_interleave_real defaults to True: interleaved)
    return AxesRope(
        f"{file} ({cls})",
        {"attention_head_dim": 128, "rope_axes_dim": list(axes), "rope_theta": 256.0},
        "rope_axes_dim",
        "rope_theta",
        GRID,
    )


CLASSES: dict[str, dict] = {
    "ChromaTransformer2DModel": {
        "rope": _flux_like("transformer_chroma.py", "FluxPosEmbed(theta=10000)", (16, 56, 56), 10000)
    },
    "Flux2Transformer2DModel": {
        "rope": _flux_like(
            "transformer_flux2.py", "Flux2PosEmbed", (32, 32, 32, 32), 2000, theta_key="rope_theta"
        )
    },
    "Flux3Transformer2DModel": {
        "rope": _flux_like(
            "transformer_flux3.py", "Flux3PosEmbed", (32, 32, 32, 32), 10000, theta_key="rope_theta"
        )
    },
    "BriaTransformer2DModel": {
        "rope": _flux_like("transformer_bria.py", "BriaEmbedND", (16, 56, 56), 10000, theta_key="rope_theta")
    },
    "BriaFiboTransformer2DModel": {
        "rope": _flux_like(
            "transformer_bria_fibo.py", "BriaFiboEmbedND", (16, 56, 56), 10000, theta_key="rope_theta"
        )
    },
    "LongCatImageTransformer2DModel": {
        "rope": _flux_like(
            "transformer_longcat_image.py", "LongCatImagePosEmbed(theta=10000)", (16, 56, 56), 10000
        )
    },
    "OvisImageTransformer2DModel": {
        "rope": _flux_like("transformer_ovis_image.py", "OvisImagePosEmbed(theta=10000)", (16, 56, 56), 10000)
    },
    "Krea2Transformer2DModel": {
        "rope": _flux_like(
            "transformer_krea2.py", "Krea2RotaryPosEmbed", (32, 48, 48), 1000.0, theta_key="rope_theta"
        )
    },
    "WanTransformer3DModel": {"rope": _wan("transformer_wan.py", "WanRotaryPosEmbed")},
    "WanVACETransformer3DModel": {"rope": _wan("transformer_wan_vace.py", "WanRotaryPosEmbed")},
    "WanAnimateTransformer3DModel": {"rope": _wan("transformer_wan_animate.py", "WanRotaryPosEmbed")},
    "SkyReelsV2Transformer3DModel": {"rope": _wan("transformer_skyreels_v2.py", "SkyReelsV2RotaryPosEmbed")},
    "SanaVideoTransformer3DModel": {"rope": _wan("transformer_sana_video.py", "WanRotaryPosEmbed", 112)},
    "HunyuanVideoTransformer3DModel": {
        "rope": _hunyuan("transformer_hunyuan_video.py", "HunyuanVideoRotaryPosEmbed")
    },
    "HunyuanVideo15Transformer3DModel": {
        "rope": _hunyuan("transformer_hunyuan_video15.py", "HunyuanVideo15RotaryPosEmbed")
    },
    "HunyuanVideoFramepackTransformer3DModel": {
        "rope": _hunyuan("transformer_hunyuan_video_framepack.py", "HunyuanVideoFramepackRotaryPosEmbed")
    },
    "HunyuanImageTransformer2DModel": {
        "rope": _hunyuan("transformer_hunyuanimage.py", "HunyuanImageRotaryPosEmbed", (64, 64))
    },
    "MotifVideoTransformer3DModel": {
        "rope": _hunyuan("transformer_motif_video.py", "MotifVideoRotaryPosEmbed")
    },
    # AnyFlowRotaryPosEmbed: Wan's axes and θ, complex freqs (polar): pairs (2k, 2k+1)
    "AnyFlowTransformer3DModel": {"rope": _wan("transformer_anyflow.py", "AnyFlowRotaryPosEmbed")},
    # ChronoEditRotaryPosEmbed: Wan's, except that a two-frame latent takes the frames 0 and
    # rope_temporal_skip_len - 1 of the table
    "ChronoEditTransformer3DModel": {
        "rope": _wan(
            "transformer_chronoedit.py",
            "ChronoEditRotaryPosEmbed",
            axes=chronoedit_axes,
            rope_temporal_skip_len=8,
        )
    },
    # HeliosRotaryPosEmbed(rope_dim, rope_theta): float32 frequencies per axis, repeat_interleave(2),
    # at the caller's frame indices and the latent's rows and columns
    "HeliosTransformer3DModel": {
        "rope": AxesRope(
            "transformer_helios.py (HeliosRotaryPosEmbed)",
            {"attention_head_dim": 128, "rope_dim": [44, 42, 42], "rope_theta": 10000.0},
            "rope_dim",
            "rope_theta",
            GRID,
        )
    },
    # HiDreamImageEmbedND(theta=10000, axes_dim=axes_dims_rope): 2x2 rotation matrices per pair of
    # columns; it rotates the first sum(axes_dims_rope) columns of each head (all, or the first half)
    "HiDreamImageTransformer2DModel": {
        "rope": AxesRope(
            "transformer_hidream_image.py (HiDreamImageEmbedND)",
            {"axes_dims_rope": [32, 32]},
            "axes_dims_rope",
            10000.0,
            IDS,
            head_dim="axes_dims_rope",
        )
    },
    "Cosmos3OmniTransformer": {
        "rope": InterleavedMrope(
            "transformer_cosmos3.py (Cosmos3VLTextRotaryEmbedding)",
            {"head_dim": 128, "rope_theta": 5000000.0},
        )
    },
    # 1-D audio DiTs: a plain half-split rope over the sequence
    "AceStepTransformer1DModel": {
        "rope": SequenceRope(
            "ace_step_transformer.py (_ace_step_rotary_freqs, get_1d_rotary_pos_embed)",
            {"head_dim": 128, "rope_theta": 1000000.0},
            _key("head_dim"),
            "rope_theta",
        )
    },
    "StableAudio3DiTModel": {  # StableAudio3RotaryEmbedding(dim_heads // 2): half of each head rotates
        "rope": SequenceRope(
            "transformer_stable_audio3.py (StableAudio3RotaryEmbedding)",
            {"embed_dim": 1536, "num_heads": 24},
            _split("embed_dim", "num_heads", 2),
            10000.0,
        )
    },
    "MiniMaxMusic3Transformer1DModel": {  # the first rotary_dim columns of each head rotate
        "rope": SequenceRope(
            "transformer_minimax_music3.py (MiniMaxMusic3RotaryEmbedding)",
            {"rotary_dim": 32},
            _key("rotary_dim"),
            10000.0,
        )
    },
    "LongCatAudioDiTTransformer": {  # AudioDiTRotaryEmbedding(dit_dim // dit_heads, 2048, base=100000.0)
        "rope": SequenceRope(
            "transformer_longcat_audio_dit.py (AudioDiTRotaryEmbedding)",
            {"dit_dim": 1536, "dit_heads": 24},
            _split("dit_dim", "dit_heads"),
            100000.0,
        )
    },
    # Lumina2RotaryPosEmbed(theta=10000, axes_dim=axes_dim_rope): complex freqs_cis per axis, gathered
    # at the caption's (i, 0, 0) and the image's (c, row, column); its table stops at axes_lens
    "Lumina2Transformer2DModel": {
        "rope": AxesRope(
            "transformer_lumina2.py (Lumina2RotaryPosEmbed)",
            {"axes_dim_rope": [32, 32, 32]},
            "axes_dim_rope",
            10000.0,
            TEXT_THEN_GRID,
            head_dim="axes_dim_rope",
        )
    },
    # RopeEmbedder(rope_theta, axes_dims, axes_lens): complex freqs_cis (angles rounded to float32
    # first), caption at (1 + i, 0, 0), the image at (c + 1 + frame, row, column)
    "ZImageTransformer2DModel": {
        "rope": AxesRope(
            "transformer_z_image.py (RopeEmbedder)",
            {"axes_dims": [32, 48, 48], "rope_theta": 256.0},
            "axes_dims",
            "rope_theta",
            IDS,
            head_dim="axes_dims",
        )
    },
    # Bria-Fibo 2: Z-Image's RopeEmbedder, copied (position_ids: the ids its forward builds)
    "BriaFibo2Transformer2DModel": {
        "rope": AxesRope(
            "transformer_bria_fibo2.py (RopeEmbedder)",
            {"axes_dims": [32, 48, 48], "rope_theta": 256.0},
            "axes_dims",
            "rope_theta",
            IDS,
            head_dim="axes_dims",
        )
    },
    # ErnieImageEmbedND3: raw angles [a0, a0, a1, a1, ...] per axis (its attention takes their cos
    # and sin and pairs k with k + d/2 over them); image (text length, row, column), then text (i, 0, 0)
    "ErnieImageTransformer2DModel": {
        "rope": AxesRope(
            "transformer_ernie_image.py (ErnieImageEmbedND3)",
            {"rope_axes_dim": [32, 48, 48], "rope_theta": 256},
            "rope_axes_dim",
            "rope_theta",
            IMAGE_THEN_TEXT,
            head_dim="rope_axes_dim",
        )
    },
}

# The rotary classes of diffusers 0.42.1 not read, and why (engine/models/diffusers_zoo.json, written by
# tests/tools/diffusers_zoo.py): GET /v1/models lists them, and a config of one is a 422 that says why.
_CATALOGUE = json.loads(pathlib.Path(__file__).with_name("diffusers_zoo.json").read_text())
UNREAD: dict[str, str] = _CATALOGUE.get("unread", {})
