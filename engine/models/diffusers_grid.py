"""diffusers transformer configs whose positions are an absolute sin-cos table (read by
``_class_name``): each record reads the config as the class's own patch embedding does (diffusers
0.42.1, models/embeddings.py). registry.CLASSES holds them beside vision.CLASSES (SD3's and
CogVideoX's tables) and diffusers_rope.CLASSES.

- 2-D tables (``sinusoidal-grid``): ``PatchEmbed`` (DiT, PixArt-α/Σ, Transformer2DModel over
  patches, Sana with an ``interpolation_scale``, Latte's spatial table): the
  (sample_size // patch_size)² grid with base_size = sample_size // patch_size; OmniGen's
  ``OmniGenPatchEmbed`` and CogView3-Plus's ``CogView3PlusPatchEmbed``: a ``pos_embed_max_size``²
  table of which they read a centred (OmniGen) or top-left (CogView3-Plus) crop.
- 3-D: ConsisID's ``CogVideoXPatchEmbed``, read as CogVideoX's.
- 1-D (``sinusoidal``): Latte's frame table (``get_1d_sincos_pos_embed_from_grid`` over
  ``video_length`` frames: ``concat``), TransformerTemporalModel's ``SinusoidalPositionalEmbedding``
  over frames (``interleaved``), when its config turns it on.

A request may name the token grid the model sees (``grid``: height and width in patches, frames
for the 3-D tables, CogView3-Plus's text tokens): the table the class builds for that latent
(grid_rules.py); without one, the table of the config's own sample size.

A config whose class builds no such table (Sana without ``interpolation_scale``, a
Transformer2DModel over continuous or vector-quantised input, a ConsisID with rotary positions) is
a 422 at the key that says so.
"""

from __future__ import annotations

import dataclasses

from ..core.errors import SpecError
from ..core.fields import json_repr
from ..tables.sinusoidal import CONCAT, INTERLEAVED
from . import vision
from .config import LOC, Config
from .fixed import FixedModel
from .grid_rules import CENTRE_CROP, CORNER_CROP_AFTER_TEXT, RESIZED
from .vision import GridModel

CLASS = (*LOC, "_class_name")  # where a value fixed by the class's code comes from


def _inner_dim(cfg: Config) -> tuple[int, tuple]:
    return cfg.int("num_attention_heads") * cfg.int("attention_head_dim"), cfg.loc("attention_head_dim")


def _patches(cfg: Config) -> int:
    s, p = cfg.int("sample_size"), cfg.int("patch_size")
    if s < p:
        raise SpecError(
            cfg.loc("sample_size"),
            f"must be >= patch_size ({p}): the grid has sample_size // patch_size patches",
        )
    return s // p


def _pixart_scale(cfg: Config) -> tuple[float, tuple]:
    """PixArt / Transformer2DModel: interpolation_scale, else max(sample_size // 64, 1)."""
    v = cfg.get("interpolation_scale")
    if v is not None:
        return v, cfg.loc("interpolation_scale")
    return max(cfg.int("sample_size") // 64, 1), cfg.loc("sample_size")


def _latte_scale(cfg: Config) -> tuple[float, tuple]:
    """Latte: always max(sample_size // 64, 1) (it has no interpolation_scale key)."""
    return max(cfg.int("sample_size") // 64, 1), cfg.loc("sample_size")


def _unit_scale(cfg: Config) -> tuple[float, tuple]:
    """DiT: PatchEmbed's default interpolation_scale, 1."""
    return 1, CLASS


def _sana_scale(cfg: Config) -> tuple[float, tuple]:
    return cfg.get("interpolation_scale"), cfg.loc("interpolation_scale")


def _patch_embed(scale):
    """PatchEmbed(height=width=sample_size, patch_size, embed_dim=heads·head_dim, interpolation_scale):
    the n² table, n = sample_size // patch_size, with base_size n (embeddings.py)."""

    def read(cfg: Config):
        d, d_loc = _inner_dim(cfg)
        n = _patches(cfg)
        s, s_loc = scale(cfg)
        fields = {"embed_dim": d, "grid_size": n, "base_size": n, "interpolation_scale": s}
        origin = {
            "embed_dim": d_loc,
            "grid_size": cfg.loc("sample_size"),
            "base_size": cfg.loc("sample_size"),
            "interpolation_scale": s_loc,
        }
        return fields, origin

    return read


def _max_table(cfg: Config, d: int, d_loc: tuple, base: int | None = None):
    """The pos_embed_max_size² table (its whole buffer), with base_size ``base`` (a constant of the
    class), or the max size itself; a request's grid reads a crop of it."""
    m, m_loc = cfg.int("pos_embed_max_size"), cfg.loc("pos_embed_max_size")
    fields = {"embed_dim": d, "grid_size": m, "base_size": m if base is None else base}
    origin = {"embed_dim": d_loc, "grid_size": m_loc, "base_size": m_loc if base is None else CLASS}
    return fields, origin


def _omnigen(cfg: Config):
    # OmniGenPatchEmbed(embed_dim=hidden_size, pos_embed_max_size): base_size 64 (its default,
    # which the transformer never passes), interpolation_scale 1; a centred crop per image
    return _max_table(cfg, cfg.int("hidden_size"), cfg.loc("hidden_size"), 64)


def _cogview3plus(cfg: Config):
    # CogView3PlusPatchEmbed(hidden_size=heads·head_dim, pos_embed_max_size): base_size is the max
    # size (coordinates are the indices); pos_embed[:height, :width] after the text's zero rows
    return _max_table(cfg, *_inner_dim(cfg))


def _refuse_flag(key: str, why: str):
    def refuse(cfg: Config):
        if cfg.get(key):
            raise SpecError(cfg.loc(key), why)

    return refuse


def _sana_refuse(cfg: Config):
    if cfg.get("interpolation_scale") is None:
        raise SpecError(
            cfg.loc("interpolation_scale"),
            "null: this Sana config has no positional table (PatchEmbed's pos_embed_type is None)",
        )


def _transformer_2d_refuse(cfg: Config):
    """Transformer2DModel has a sin-cos table over patched input only (in_channels and patch_size)."""
    if cfg.get("num_vector_embeds") is not None:
        raise SpecError(
            cfg.loc("num_vector_embeds"),
            "this Transformer2DModel takes vector-quantised input: its positions are learned "
            "(ImagePositionalEmbeddings, loaded from its weights)",
        )
    if cfg.get("patch_size") is None:
        raise SpecError(
            cfg.loc("patch_size"),
            "null: this Transformer2DModel takes continuous input, which has no positional table "
            "(only patched input, with patch_size, has one)",
            "missing",
        )
    if cfg.get("in_channels") is None:
        raise SpecError(cfg.loc("in_channels"), "field required with patch_size", "missing")


def _even(d: int, loc: tuple, what: str):
    if d % 2:
        raise SpecError(loc, f"must give an even width: {what} fails for odd widths, got {d}")


def _latte_frames(cfg: Config, _layer):
    # get_1d_sincos_pos_embed_from_grid(inner_dim, arange(video_length)): [sin | cos], exponent
    # j/(D/2) — sinusoidal's concat layout, rows 0 … video_length − 1
    d, d_loc = _inner_dim(cfg)
    _even(d, d_loc, "get_1d_sincos_pos_embed_from_grid")
    return {"d_model": d, "layout": CONCAT}, {"d_model": d_loc, "layout": CLASS}


def _temporal_refuse(cfg: Config):
    kind = cfg.get("positional_embeddings")
    if kind != "sinusoidal":
        raise SpecError(
            cfg.loc("positional_embeddings"),
            f"{json_repr(kind)}: this TransformerTemporalModel config adds no positional table "
            '(BasicTransformerBlock builds one only for "sinusoidal")',
        )
    cfg.int("num_positional_embeddings")  # the model refuses the table without its length


def _temporal_frames(cfg: Config, _layer):
    # BasicTransformerBlock: SinusoidalPositionalEmbedding(inner_dim, num_positional_embeddings),
    # sin at even and cos at odd columns, exp(2k · −ln(10000)/d): interleaved, rows are frames
    d, d_loc = _inner_dim(cfg)
    _even(d, d_loc, "SinusoidalPositionalEmbedding")
    return {"d_model": d, "layout": INTERLEAVED}, {"d_model": d_loc, "layout": CLASS}


def _src(file: str, what: str) -> str:
    return f"transformers/{file}, embeddings.py ({what})"


_HEADS = {"num_attention_heads": 16, "attention_head_dim": 72}
_PIXART = {**_HEADS, "sample_size": 128, "patch_size": 2}

CLASSES: dict[str, dict] = {
    "DiTTransformer2DModel": {
        "sinusoidal-grid": GridModel(
            _src("dit_transformer_2d.py", "PatchEmbed, get_2d_sincos_pos_embed"),
            _patch_embed(_unit_scale),
            {**_HEADS, "sample_size": 32, "patch_size": 2},
            grid=RESIZED,
        )
    },
    "PixArtTransformer2DModel": {
        "sinusoidal-grid": GridModel(
            _src("pixart_transformer_2d.py", "PatchEmbed, get_2d_sincos_pos_embed"),
            _patch_embed(_pixart_scale),
            _PIXART,
            grid=RESIZED,
        )
    },
    "Transformer2DModel": {
        "sinusoidal-grid": GridModel(
            _src("transformer_2d.py", "PatchEmbed over patched input, get_2d_sincos_pos_embed"),
            _patch_embed(_pixart_scale),
            {"num_attention_heads": 16, "attention_head_dim": 88},
            _transformer_2d_refuse,
            RESIZED,
        )
    },
    "SanaTransformer2DModel": {
        "sinusoidal-grid": GridModel(
            _src("sana_transformer.py", "PatchEmbed when interpolation_scale is set"),
            _patch_embed(_sana_scale),
            {"num_attention_heads": 70, "attention_head_dim": 32, "sample_size": 32, "patch_size": 1},
            _sana_refuse,
            RESIZED,
        )
    },
    "LatteTransformer3DModel": {
        "sinusoidal-grid": GridModel(
            _src("latte_transformer_3d.py", "PatchEmbed, get_2d_sincos_pos_embed"),
            _patch_embed(_latte_scale),
            {"num_attention_heads": 16, "attention_head_dim": 88, "sample_size": 64},
            grid=RESIZED,
        ),
        "sinusoidal": FixedModel(
            _src("latte_transformer_3d.py", "temp_pos_embed, get_1d_sincos_pos_embed_from_grid"),
            _latte_frames,
            {"num_attention_heads": 16, "attention_head_dim": 88},
        ),
    },
    "OmniGenTransformer2DModel": {
        "sinusoidal-grid": GridModel(
            _src("transformer_omnigen.py", "OmniGenPatchEmbed, get_2d_sincos_pos_embed"),
            _omnigen,
            {"hidden_size": 3072, "pos_embed_max_size": 192},
            grid=CENTRE_CROP,
        )
    },
    "CogView3PlusTransformer2DModel": {
        "sinusoidal-grid": GridModel(
            _src("transformer_cogview3plus.py", "CogView3PlusPatchEmbed, get_2d_sincos_pos_embed"),
            _cogview3plus,
            {"num_attention_heads": 64, "attention_head_dim": 40, "pos_embed_max_size": 128},
            grid=CORNER_CROP_AFTER_TEXT,
        )
    },
    # ConsisID builds CogVideoX's CogVideoXPatchEmbed from the same keys and defaults
    "ConsisIDTransformer3DModel": {
        "sinusoidal-grid": dataclasses.replace(
            vision.CLASSES["CogVideoXTransformer3DModel"]["sinusoidal-grid"],
            source=_src("consisid_transformer_3d.py", "CogVideoXPatchEmbed, get_3d_sincos_pos_embed"),
            refuse=_refuse_flag(
                "use_rotary_positional_embeddings",
                "this ConsisID config rotates positions (3-D RoPE): it has no sin-cos table",
            ),
        )
    },
    "TransformerTemporalModel": {
        "sinusoidal": FixedModel(
            _src("transformer_temporal.py", "BasicTransformerBlock's SinusoidalPositionalEmbedding"),
            _temporal_frames,
            {"num_attention_heads": 16, "attention_head_dim": 88},
            refuse=_temporal_refuse,
        )
    },
}

# diffusers classes whose positional table is learned: a parameter of the weights, which no config
# gives (registry.derive refuses them with the reason; GET /v1/models lists them)
UNREAD: dict[str, str] = {
    "AuraFlowTransformer2DModel": "a learned table: AuraFlowPatchEmbed's pos_embed parameter, of which it "
    "reads a centred crop, lives in the weights",
    "PriorTransformer": "a learned table: its positional_embedding parameter lives in the weights",
    "T5FilmDecoder": "a table from the weights: position_encoding is an nn.Embedding (frozen, not computed)",
    "MiniMaxMusic3RVQDepthDecoder": "a learned table: its pos_embedding nn.Embedding lives in the weights",
}
