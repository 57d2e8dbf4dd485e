"""The ``sinusoidal`` records (fixed.FixedModel): the models of transformers 5.24 with a fixed
sinusoidal position table, one record per model type (its layout, width, row offset and the
config flags that turn the table off), each read as the model's own code reads its config
(tests/engine/test_hf_fixed.py checks every record against that code).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..core.errors import SpecError
from ..core.fields import json_repr
from ..tables.sinusoidal import CONCAT, FAIRSEQ, FAIRSEQ_COS_FIRST, INTERLEAVED
from .config import Config
from .fixed import MODEL_TYPE, FixedModel


def _table(layout: str, width: str, offset: Callable[[Config], tuple] | None = None):
    """The table of ``width`` columns in ``layout``; ``offset(cfg)`` gives (offset, its location)
    where positions index rows past the first (fairseq: padding_idx + 1)."""

    def read(cfg: Config, _layer):
        fields = {"d_model": cfg.int(width), "layout": layout}
        origin = {"d_model": cfg.loc(width), "layout": MODEL_TYPE}
        if offset is not None:
            fields["offset"], origin["offset"] = offset(cfg)
        return fields, origin

    return read


def _after_padding(cfg: Config) -> tuple:
    # fairseq's make_positions (create_position_ids_from_input_ids): the first token's row is
    # padding_idx + 1, padding_idx = config.pad_token_id; the zeroed padding row is never reached
    return cfg.int("pad_token_id", lo=0) + 1, cfg.loc("pad_token_id")


def _xglm_offset(cfg: Config) -> tuple:
    # XGLMSinusoidalPositionalEmbedding.forward: rows are position_ids + 2 whatever padding_idx is,
    # and the row padding_idx is zeroed: a pad_token_id >= 2 zeroes the row of position pad - 2
    pad = cfg.get("pad_token_id")
    if pad is not None and pad != 1 and pad != 0:
        raise SpecError(
            cfg.loc("pad_token_id"),
            f"XGLM zeroes its table's row {json_repr(pad)}, the row of "
            f"position {json_repr(pad)} - 2, which a sinusoidal table never is",
        )
    return 2, MODEL_TYPE


def _even(read, width: str):
    """A model whose table code fails for odd widths (Whisper's sinusoids, Pegasus-X's forward)."""

    def checked(cfg, layer):
        fields, origin = read(cfg, layer)
        if fields["d_model"] % 2:
            raise SpecError(
                cfg.loc(width),
                f"must be even: this model's sinusoidal table fails for odd widths, got {fields['d_model']}",
            )
        return fields, origin

    return checked


def _head_width(cfg: Config, _layer):
    # RoFormerEncoder: RoFormerSinusoidalPositionalEmbedding(max_position_embeddings,
    # hidden_size // num_attention_heads), the table its attention rotates q and k with
    return (
        {"d_model": cfg.int("hidden_size") // cfg.int("num_attention_heads"), "layout": CONCAT},
        {"d_model": cfg.loc("hidden_size"), "layout": MODEL_TYPE},
    )


def _flag_on(key: str, model: str):
    """XLM/Flaubert (sinusoidal_embeddings), DistilBERT (sinusoidal_pos_embds): the table is
    sinusoidal only when the flag is true (class default false: learned positions)."""

    def refuse(cfg: Config):
        if cfg.get(key, False) is not True:
            raise SpecError(
                cfg.loc(key),
                f"this {model} config learns its positions ({key} is "
                f"{json_repr(cfg.get(key, False))}): it has no sinusoidal table",
            )

    return refuse


def _trocr_refuse(cfg: Config):
    if cfg.get("use_learned_position_embeddings", True) is not False:
        raise SpecError(
            cfg.loc("use_learned_position_embeddings"),
            "this TrOCR config learns its positions (use_learned_position_embeddings, default true)",
        )


def _by_layer(cfg: Config, read):
    """A model whose stacks have different tables: ``layers`` maps each to its own reader."""
    return read(cfg, None)


def _sin(model: str, cls: str, read, defaults: Mapping, **kw) -> FixedModel:
    return FixedModel(
        source=f"models/{model}/modeling_{model}.py ({cls})", read=read, defaults=defaults, **kw
    )


_D = {"hidden_size": "d_model"}  # BART-style configs: hidden_size is d_model
_FAIRSEQ_PAD = _table(FAIRSEQ, "d_model", _after_padding)
_TIME_SERIES = {"d_model": 64}

SINUSOIDAL: dict[str, FixedModel] = {
    "m2m_100": _sin(
        "m2m_100",
        "M2M100SinusoidalPositionalEmbedding",
        _FAIRSEQ_PAD,
        {"d_model": 1024, "pad_token_id": 1},
        aliases=_D,
    ),
    "nllb-moe": _sin(
        "nllb_moe",
        "NllbMoeSinusoidalPositionalEmbedding",
        _FAIRSEQ_PAD,
        {"d_model": 1024, "pad_token_id": 1},
        aliases=_D,
    ),
    "fsmt": _sin(
        "fsmt",
        "SinusoidalPositionalEmbedding",
        _FAIRSEQ_PAD,
        {"d_model": 1024, "pad_token_id": 1},
        aliases=_D,
    ),
    "speech_to_text": _sin(
        "speech_to_text",
        "Speech2TextSinusoidalPositionalEmbedding",
        _FAIRSEQ_PAD,
        {"d_model": 256, "pad_token_id": 1},
        aliases=_D,
    ),
    "trocr": _sin(
        "trocr",
        "TrOCRSinusoidalPositionalEmbedding",
        _FAIRSEQ_PAD,
        {"d_model": 1024, "pad_token_id": 1},
        aliases=_D,
        refuse=_trocr_refuse,
    ),
    # the text encoder's and text decoder's tables (the unit decoder's t2u_* keys are not read)
    "seamless_m4t": _sin(
        "seamless_m4t",
        "SeamlessM4TSinusoidalPositionalEmbedding",
        _table(FAIRSEQ, "hidden_size", _after_padding),
        {"hidden_size": 1024, "pad_token_id": 0},
    ),
    "seamless_m4t_v2": _sin(
        "seamless_m4t_v2",
        "SeamlessM4Tv2SinusoidalPositionalEmbedding",
        _table(FAIRSEQ, "hidden_size", _after_padding),
        {"hidden_size": 1024, "pad_token_id": 0},
    ),
    "kosmos-2": _sin(
        "kosmos2",
        "Kosmos2TextSinusoidalPositionalEmbedding",
        _table(FAIRSEQ, "embed_dim", _after_padding),
        {"embed_dim": 2048, "pad_token_id": 1},
        aliases={"hidden_size": "embed_dim"},
        sub="text_config",
    ),
    "kosmos-2.5": _sin(
        "kosmos2_5",
        "Kosmos2_5TextSinusoidalPositionalEmbedding",
        _table(FAIRSEQ, "embed_dim", _after_padding),
        {"embed_dim": 1536, "pad_token_id": 1},
        aliases={"hidden_size": "embed_dim"},
        sub="text_config",
    ),
    "xglm": _sin(
        "xglm",
        "XGLMSinusoidalPositionalEmbedding",
        _table(FAIRSEQ, "d_model", _xglm_offset),
        {"d_model": 1024, "pad_token_id": 1},
        aliases=_D,
    ),
    # PegasusXSinusoidalPositionalEmbedding.forward: fairseq's exponent with max_scale 10000, rows from 0
    "pegasus_x": _sin(
        "pegasus_x",
        "PegasusXSinusoidalPositionalEmbedding",
        _even(_table(FAIRSEQ, "d_model"), "d_model"),
        {"d_model": 1024},
        aliases=_D,
    ),
    # WhisperEncoder: embed_positions initialised with sinusoids(max_source_positions, d_model);
    # the decoder's positions are learned
    "whisper": _sin(
        "whisper",
        "sinusoids",
        _even(_table(FAIRSEQ, "d_model"), "d_model"),
        {"d_model": 384},
        aliases=_D,
        layers={"encoder": None},
        refused_layers={"decoder": "Whisper's decoder positions are learned (WhisperPositionalEmbedding)"},
    ),
    # Tipsv2TextEmbeddings: fairseq's table (no padding row), position_ids from 0
    "tipsv2": _sin(
        "tipsv2",
        "Tipsv2SinusoidalPositionalEmbedding",
        _table(FAIRSEQ, "hidden_size"),
        {"hidden_size": 768},
        sub="text_config",
    ),
    # SpeechT5: its speech-encoder and text-decoder prenets' SpeechT5SinusoidalPositionalEmbedding
    # (fairseq, rows from padding_idx + 1; the speech encoder adds learned conv positions), its
    # text-encoder and speech-decoder prenets' SpeechT5ScaledPositionalEncoding (interleaved from 0,
    # float32, even widths only; the model multiplies it by a learned alpha)
    "speecht5": _sin(
        "speecht5",
        "SpeechT5SinusoidalPositionalEmbedding, SpeechT5ScaledPositionalEncoding",
        _by_layer,
        {"hidden_size": 768, "pad_token_id": 1},
        layers={
            "speech_encoder": _table(FAIRSEQ, "hidden_size", _after_padding),
            "text_decoder": _table(FAIRSEQ, "hidden_size", _after_padding),
            "text_encoder": _even(_table(INTERLEAVED, "hidden_size"), "hidden_size"),
            "speech_decoder": _even(_table(INTERLEAVED, "hidden_size"), "hidden_size"),
        },
    ),
    # AudioCraft's MusicGen: cos first (MusicgenSinusoidalPositionalEmbedding.get_embedding)
    "musicgen": _sin(
        "musicgen",
        "MusicgenSinusoidalPositionalEmbedding",
        _table(FAIRSEQ_COS_FIRST, "hidden_size"),
        {"hidden_size": 1024},
        sub="decoder",
    ),
    "musicgen_melody": _sin(
        "musicgen_melody",
        "MusicgenMelodySinusoidalPositionalEmbedding",
        _table(FAIRSEQ_COS_FIRST, "hidden_size"),
        {"hidden_size": 1024},
        sub="decoder",
    ),
    # Marian's create_weight and its copies: AIAYN frequencies, ceil(d/2) sin then cos, rows from 0
    "marian": _sin(
        "marian",
        "MarianSinusoidalPositionalEmbedding",
        _table(CONCAT, "d_model"),
        {"d_model": 1024},
        aliases=_D,
    ),
    "pegasus": _sin(
        "pegasus",
        "PegasusSinusoidalPositionalEmbedding",
        _table(CONCAT, "d_model"),
        {"d_model": 1024},
        aliases=_D,
    ),
    "roformer": _sin(
        "roformer",
        "RoFormerSinusoidalPositionalEmbedding",
        _head_width,
        {"hidden_size": 768, "num_attention_heads": 12},
    ),
    "informer": _sin(
        "informer",
        "InformerSinusoidalPositionalEmbedding",
        _table(CONCAT, "d_model"),
        _TIME_SERIES,
        aliases=_D,
    ),
    "autoformer": _sin(
        "autoformer",
        "AutoformerSinusoidalPositionalEmbedding",
        _table(CONCAT, "d_model"),
        _TIME_SERIES,
        aliases=_D,
    ),
    "time_series_transformer": _sin(
        "time_series_transformer",
        "TimeSeriesSinusoidalPositionalEmbedding",
        _table(CONCAT, "d_model"),
        _TIME_SERIES,
        aliases=_D,
    ),
    # create_sinusoidal_embeddings: AIAYN interleaved, rows from 0, when the config's flag is on
    "xlm": _sin(
        "xlm",
        "create_sinusoidal_embeddings",
        _table(INTERLEAVED, "emb_dim"),
        {"emb_dim": 2048},
        aliases={"hidden_size": "emb_dim"},
        refuse=_flag_on("sinusoidal_embeddings", "XLM"),
    ),
    "flaubert": _sin(
        "flaubert",
        "create_sinusoidal_embeddings",
        _table(INTERLEAVED, "emb_dim"),
        {"emb_dim": 2048},
        aliases={"hidden_size": "emb_dim"},
        refuse=_flag_on("sinusoidal_embeddings", "Flaubert"),
    ),
    "distilbert": _sin(
        "distilbert",
        "create_sinusoidal_embeddings",
        _table(INTERLEAVED, "dim"),
        {"dim": 768},
        aliases={"hidden_size": "dim"},
        refuse=_flag_on("sinusoidal_pos_embds", "DistilBERT"),
    ),
}
for _composite, _text in (
    ("kosmos-2", "kosmos_2_text_model"),
    ("kosmos-2.5", "kosmos_2_5_text_model"),
    ("musicgen", "musicgen_decoder"),
    ("tipsv2", "tipsv2_text_model"),
    ("musicgen_melody", "musicgen_melody_decoder"),
):
    SINUSOIDAL[_text] = SINUSOIDAL[_composite].text_model()


# the docs' example config (opus-mt-en-de's positional keys, as published)
EXAMPLE = {
    "model_type": "marian",
    "d_model": 512,
    "max_position_embeddings": 512,
    "pad_token_id": 58100,
    "scale_embedding": True,
}
