"""Model configs of vision, video and multimodal models (docs/reference.md, "Named tables and model
configs"): transformers' Qwen-VL text models (multimodal RoPE) and ViT-MAE (a 2-D sin-cos grid),
and diffusers transformer configs, recognised by ``_class_name`` (Flux's per-axis RoPE, SD3's and
CogVideoX's sin-cos grids). Each record says which file it follows and reads the config as that
file's code does; registry.MODELS and registry.CLASSES hold them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ..core.errors import SpecError
from ..core.fields import is_int, json_repr, require_object
from ..tables.rope_spec import INTERLEAVED
from . import grid_rules
from .config import LOC, Config, Derived, RopeModel


@dataclasses.dataclass(frozen=True)
class MropeModel(RopeModel):
    """Qwen2-VL / Qwen2.5-VL / Qwen3-VL text models: Llama's reading of the text config (the
    composite config's ``text_config``, or the text config itself), plus ``mrope_section`` from the
    rope parameters (the rotary class's default when absent); published configs say
    ``"type": "mrope"``, which transformers reads as the default type. Qwen3-VL's rotary class
    always deals the frequencies interleaved."""

    section_default: tuple = (16, 24, 24)
    interleaved: bool = False

    def derive(self, raw, layer_type):
        text = raw.get("text_config")
        if text is None:
            return self._derive_text(raw, layer_type, LOC)
        return self._derive_text(
            require_object(text, (*LOC, "text_config")), layer_type, (*LOC, "text_config")
        )

    def _derive_text(self, raw, layer_type, where):
        d = super().derive(raw, layer_type)
        block = raw.get("rope_scaling") or raw.get("rope_parameters") or {}  # rope_block's order
        section = block.get("mrope_section")
        block_loc = d.origin["rope_scaling"]
        d.fields["mrope_section"] = list(self.section_default) if section is None else section
        d.origin["mrope_section"] = (*block_loc, "mrope_section")
        if self.interleaved:
            d.fields["mrope_interleaved"] = True
            d.origin["mrope_interleaved"] = (*LOC, "model_type")
        if where != LOC:  # the text config's keys sit under text_config
            d.origin = {
                k: (*where, *v[len(LOC) :]) if v[: len(LOC)] == LOC else v for k, v in d.origin.items()
            }
        return d


def _size(cfg: Config, name: str) -> int | list:
    v = cfg.get(name)
    if is_int(v) and v >= 1:
        return v
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(is_int(x) and x >= 1 for x in v):
        return list(v)
    raise SpecError(cfg.loc(name), f"must be a positive integer or [H, W], got {json_repr(v)}")


@dataclasses.dataclass(frozen=True)
class GridModel:
    """A model whose positions are a fixed sin-cos grid: ``read(cfg)`` gives the spec fields and
    where each came from; ``refuse(cfg)`` refuses a config of the type whose positions are not
    that grid (the key that says so); ``grid`` (grid_rules.py) is how the table follows the token
    grid a request names, where the model builds it for its latent."""

    source: str
    read: object
    defaults: Mapping = dataclasses.field(default_factory=dict)
    refuse: object = None
    grid: grid_rules.GridRule | None = None

    @property
    def grid_keys(self) -> tuple | None:
        return None if self.grid is None else self.grid.keys

    def derive(self, raw, layer_type, grid=None):
        if layer_type is not None:
            raise SpecError(("layer_type",), "sin-cos grid configs have no layer types")
        cfg = Config(raw, {}, self.defaults)
        if self.refuse is not None:
            self.refuse(cfg)
        fields, origin = self.read(cfg)
        if grid is not None:  # without one: the table of the config's own sample size
            fields, origin = grid_rules.apply(self.grid, cfg, fields, origin, grid)
        return Derived(fields, origin)


def _vit_mae(cfg):
    # ViTMAEEmbeddings: hidden_size wide, image_size // patch_size per side, one CLS row of zeros
    image, patch = _size(cfg, "image_size"), cfg.int("patch_size")
    grid = image // patch if is_int(image) else [s // patch for s in image]
    return (
        {"embed_dim": cfg.int("hidden_size"), "grid_size": grid, "extra_tokens": 1},
        {
            "embed_dim": cfg.loc("hidden_size"),
            "grid_size": cfg.loc("image_size"),
            "extra_tokens": (*LOC, "model_type"),
        },
    )


def _inner_dim(cfg):
    return cfg.int("num_attention_heads") * cfg.int("attention_head_dim")


def _sd3(cfg):
    # SD3Transformer2DModel -> PatchEmbed(height=sample_size, patch_size, pos_embed_max_size):
    # the pos_embed_max_size² table with base_size = sample_size // patch_size (no max size: the
    # sample's own grid)
    sample, patch = cfg.int("sample_size"), cfg.int("patch_size")
    size = cfg.raw.get("pos_embed_max_size", cfg.defaults["pos_embed_max_size"])  # null: no max size
    grid = sample // patch if size is None else size
    return (
        {"embed_dim": _inner_dim(cfg), "grid_size": grid, "base_size": sample // patch},
        {
            "embed_dim": cfg.loc("attention_head_dim"),
            "grid_size": cfg.loc("pos_embed_max_size" if size is not None else "sample_size"),
            "base_size": cfg.loc("sample_size"),
        },
    )


def _cogvideox_refuse(cfg):
    if cfg.get("use_rotary_positional_embeddings"):
        raise SpecError(
            cfg.loc("use_rotary_positional_embeddings"),
            "this CogVideoX config rotates positions (3-D RoPE): it has no sin-cos table",
        )
    if cfg.get("use_learned_positional_embeddings"):
        raise SpecError(
            cfg.loc("use_learned_positional_embeddings"),
            "this CogVideoX config learns its positional table (loaded from its weights)",
        )


def _cogvideox(cfg):
    # CogVideoXPatchEmbed._get_positional_embeddings: get_3d_sincos_pos_embed of the patch grid and
    # the compressed frames, after max_text_seq_length zero rows
    p = cfg.int("patch_size")
    frames = (cfg.int("sample_frames") - 1) // cfg.int("temporal_compression_ratio") + 1
    fields = {
        "embed_dim": _inner_dim(cfg),
        "grid_size": [cfg.int("sample_height") // p, cfg.int("sample_width") // p],
        "temporal_size": frames,
        "interpolation_scale": cfg.get("spatial_interpolation_scale"),
        "temporal_interpolation_scale": cfg.get("temporal_interpolation_scale"),
        "extra_tokens": cfg.get("max_text_seq_length"),
    }
    return fields, {
        "embed_dim": cfg.loc("attention_head_dim"),
        "grid_size": cfg.loc("sample_height"),
        "temporal_size": cfg.loc("sample_frames"),
        "interpolation_scale": cfg.loc("spatial_interpolation_scale"),
        "temporal_interpolation_scale": cfg.loc("temporal_interpolation_scale"),
        "extra_tokens": cfg.loc("max_text_seq_length"),
    }


@dataclasses.dataclass(frozen=True)
class FluxRope:
    """FluxTransformer2DModel: FluxPosEmbed(theta=10000, axes_dim=axes_dims_rope) per head of
    attention_head_dim, cos/sin repeated pairwise (interleaved)."""

    source: str
    defaults: Mapping

    def derive(self, raw, layer_type):
        if layer_type is not None:
            raise SpecError(("layer_type",), "this config has no layer types")
        cfg = Config(raw, {}, self.defaults)
        axes = cfg.get("axes_dims_rope")
        return Derived(
            {
                "head_dim": cfg.int("attention_head_dim"),
                "rope_theta": 10000.0,
                "axes_dim": list(axes) if isinstance(axes, (list, tuple)) else axes,
                "layout": INTERLEAVED,
            },
            {
                "head_dim": cfg.loc("attention_head_dim"),
                "axes_dim": cfg.loc("axes_dims_rope"),
                "rope_theta": (*LOC, "_class_name"),
                "layout": (*LOC, "_class_name"),
            },
        )


def _qwen(model: str, cls: str, **kw) -> MropeModel:
    return MropeModel(source=f"models/{model}/modeling_{model}.py ({cls})", **kw)


_QWEN_SIZES = {"hidden_size": 8192, "num_attention_heads": 64, "max_position_embeddings": 32768}
MODELS = {
    "qwen2_vl": {
        "rope": _qwen(
            "qwen2_vl",
            "Qwen2VLRotaryEmbedding",
            defaults=_QWEN_SIZES,
            default_theta=1e6,
            type_aliases={"mrope": "default"},
        )
    },
    "qwen2_5_vl": {
        "rope": _qwen(
            "qwen2_5_vl",
            "Qwen2_5_VLRotaryEmbedding",
            defaults=_QWEN_SIZES,
            default_theta=1e6,
            type_aliases={"mrope": "default"},
        )
    },
    "qwen3_vl": {
        "rope": _qwen(
            "qwen3_vl",
            "Qwen3VLTextRotaryEmbedding",
            defaults={
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "head_dim": 128,
                "max_position_embeddings": 128000,
            },
            default_theta=500000.0,
            type_aliases={"mrope": "default"},
            section_default=(24, 20, 20),
            interleaved=True,
        )
    },
    "vit_mae": {
        "sinusoidal-grid": GridModel(
            "models/vit_mae/modeling_vit_mae.py (ViTMAEEmbeddings)",
            _vit_mae,
            {"hidden_size": 768, "image_size": 224, "patch_size": 16},
        )
    },
}
# The text configs of the Qwen-VL models read the same way.
MODELS.update({f"{k}_text": v for k, v in list(MODELS.items()) if k.startswith("qwen")})

# diffusers transformer configs, by _class_name (diffusers 0.42, models/transformers/*.py and
# models/embeddings.py); the defaults are the classes' __init__ defaults.
CLASSES = {
    "FluxTransformer2DModel": {
        "rope": FluxRope(
            "transformer_flux.py (FluxPosEmbed)", {"attention_head_dim": 128, "axes_dims_rope": [16, 56, 56]}
        )
    },
    "SD3Transformer2DModel": {
        "sinusoidal-grid": GridModel(
            "transformer_sd3.py, embeddings.py (PatchEmbed, get_2d_sincos_pos_embed)",
            _sd3,
            {
                "sample_size": 128,
                "patch_size": 2,
                "num_attention_heads": 18,
                "attention_head_dim": 64,
                "pos_embed_max_size": 96,
            },
            grid=grid_rules.PATCH_EMBED,
        )
    },
    "CogVideoXTransformer3DModel": {
        "sinusoidal-grid": GridModel(
            "cogvideox_transformer_3d.py, embeddings.py (CogVideoXPatchEmbed, get_3d_sincos_pos_embed)",
            _cogvideox,
            {
                "num_attention_heads": 30,
                "attention_head_dim": 64,
                "sample_width": 90,
                "sample_height": 60,
                "sample_frames": 49,
                "patch_size": 2,
                "temporal_compression_ratio": 4,
                "max_text_seq_length": 226,
                "spatial_interpolation_scale": 1.875,
                "temporal_interpolation_scale": 1.0,
            },
            _cogvideox_refuse,
            grid_rules.VIDEO,
        )
    },
}

EXAMPLES = {
    "sinusoidal-grid": {
        "_class_name": "SD3Transformer2DModel",
        "sample_size": 128,
        "patch_size": 2,
        "num_attention_heads": 24,
        "attention_head_dim": 64,
        "pos_embed_max_size": 192,
    }
}
