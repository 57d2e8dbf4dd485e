"""diffusers transformer configs whose positions are rotary (read by ``_class_name``): each record
reads the config as the class's own code does (diffusers 0.42.1, models/transformers/*.py and
models/embeddings.py). registry.CLASSES holds them beside vision.CLASSES and diffusers_grid.CLASSES.

Each record is one of the readings of engine/models/diffusers_axes.py (a frequency set per axis,
posenc's ``axes_dim``, for most: ``get_1d_rotary_pos_embed`` and its copies) with where the config
keeps the axes' widths and θ and how the class pairs the columns. The positions are the ones the
class builds: a token ``grid`` where its transformer builds them from the latent, ``position_ids``
where its pipeline hands them in, ``positions`` for a 1-D sequence (docs/reference.md, diffusers).
engine/models/diffusers_zoo.json (tests/tools/diffusers_zoo.py) catalogues every class of the pinned
diffusers and its positional kind; tests/engine/test_diffusers_zoo.py holds each record to the
class's own positional module.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable

from . import diffusers_cosmos, diffusers_ltx, diffusers_more, diffusers_pipeline
from .config import Config
from .diffusers_axes import (  # noqa: F401  (the readings, and the position kinds the tests name)
    CENTRED,
    CROP,
    GRID,
    IDS,
    IMAGE_THEN_TEXT,
    SEQUENCE,
    TEXT_THEN_GRID,
    AxesRope,
    CenteredRope,
    CropRope,
    InterleavedMrope,
    SectionRope,
    SequenceRope,
    VideoCropRope,
    chronoedit_axes,
    wan_axes,
)


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


def _key(key: str, div: int = 1) -> Callable[[Config], tuple]:
    """The rotary width ``cfg[key] // div`` and the key it follows from."""
    return lambda cfg: (cfg.int(key) // div, key)


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
    "GlmImageTransformer2DModel": {
        "rope": SectionRope(
            "transformer_glm_image.py (GlmImageRotaryPosEmbed)", {"attention_head_dim": 40}, False, GRID
        )
    },
    "CogView4Transformer2DModel": {
        "rope": SectionRope(
            "transformer_cogview4.py (CogView4RotaryPosEmbed)",
            {"attention_head_dim": 40, "rope_axes_dim": [256, 256]},
            False,
            GRID,
            scaled_key="rope_axes_dim",
        )
    },
    "MiniMaxH3Transformer3DModel": {  # position_ids: the packed sequence's (t, h, w), from its forward
        "rope": SectionRope(
            "transformer_minimax_h3.py (MiniMaxH3RotaryPosEmbed)",
            {"rope_freq_dim": 16, "rope_theta": 10000.0},
            True,
            IDS,
        )
    },
    "QwenImageTransformer2DModel": {
        "rope": CenteredRope(
            "transformer_qwenimage.py (QwenEmbedRope)",
            {"attention_head_dim": 128, "axes_dims_rope": [16, 56, 56], "use_layer3d_rope": False},
        )
    },
    # QwenImage21Rope(theta=10000, axes_dim=axes_dims_rope): text-to-image, the caption then the target image
    "QwenImage21Transformer2DModel": {
        "rope": CenteredRope(
            "transformer_qwenimage21.py (QwenImage21Rope)",
            {"attention_head_dim": 128, "axes_dims_rope": [16, 56, 56]},
            ("text", "height", "width"),
            text_first=True,
        )
    },
    "NucleusMoEImageTransformer2DModel": {
        "rope": CenteredRope(
            "transformer_nucleusmoe_image.py (NucleusMoEEmbedRope)",
            {"attention_head_dim": 128, "axes_dims_rope": [16, 56, 56]},
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
    "HunyuanDiT2DModel": {
        "rope": CropRope(
            "hunyuan_transformer_2d.py (its pipeline's get_2d_rotary_pos_embed)",
            {"attention_head_dim": 88},
        )
    },
    "EasyAnimateTransformer3DModel": {
        "rope": VideoCropRope(
            "transformer_easyanimate.py (EasyAnimateRotaryPosEmbed)",
            {"attention_head_dim": 64},
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
    # its pipeline: get_1d_rotary_pos_embed(attention_head_dim // 2, latent + duration tokens,
    # use_real=True, repeat_interleave_real=False); the first half of each head rotates (rotate_half)
    "StableAudioDiTModel": {
        "rope": SequenceRope(
            "stable_audio_transformer.py (its pipeline's get_1d_rotary_pos_embed)",
            {"attention_head_dim": 64},
            _key("attention_head_dim", 2),
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

# the groups read in modules of their own (each with its zoo test, tests/engine/test_diffusers_zoo_<group>.py)
GROUPS = {
    "ltx": diffusers_ltx.CLASSES,
    "cosmos": diffusers_cosmos.CLASSES,
    "pipeline": diffusers_pipeline.CLASSES,
    "more": diffusers_more.CLASSES,
}
for _group in GROUPS.values():
    CLASSES.update(_group)

# The rotary classes of diffusers 0.42.1 not read, and why (engine/models/diffusers_zoo.json, written by
# tests/tools/diffusers_zoo.py): GET /v1/models lists them, and a config of one is a 422 that says why.
_CATALOGUE = json.loads(pathlib.Path(__file__).with_name("diffusers_zoo.json").read_text())
UNREAD: dict[str, str] = _CATALOGUE.get("unread", {})
