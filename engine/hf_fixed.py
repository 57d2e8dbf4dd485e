"""Model configs whose positions are fixed functions, not rotations (docs/reference.md, "Named
tables and model configs"; docs/models.md lists them): transformers 5.24's T5 family
(``t5-buckets``: ``_relative_position_bucket`` and its copies) and the models with a fixed
sinusoidal position table (``sinusoidal``). hf_models.MODELS holds these records beside the
rope ones.

A record (``FixedModel``) reads a config as the model's own code does: which keys, under which
``attribute_map`` alias, the config class's default when a key is absent, and which sub-config
holds them (Pix2Struct's ``text_config``, MusicGen's ``decoder``). Where a model has several
stacks that differ (T5's bidirectional encoder, unidirectional decoder) the request's
``layer_type`` names one, and is required when the config has more than one; a stack without a
table of the family (Whisper's learned decoder positions) is refused there, with the reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from .errors import SpecError
from .fields import json_repr, require_object
from .hf_config import LOC, Config, Derived
from .tables.sinusoidal import CONCAT, FAIRSEQ, FAIRSEQ_COS_FIRST, INTERLEAVED

MODEL_TYPE = (*LOC, "model_type")


def _moved(loc: tuple, where: tuple) -> tuple:
    """A location read inside a sub-config (``where``), as the request spells it."""
    return (*where, *loc[len(LOC) :]) if loc[: len(LOC)] == LOC and where != LOC else loc


@dataclasses.dataclass(frozen=True)
class FixedModel:
    """How one model type's config gives a fixed table: ``read(cfg, layer)`` returns (spec
    fields, where each came from); ``layer`` is ``layers[layer_type]`` (T5: bidirectional)."""

    source: str  # the transformers file whose code this follows
    read: Callable[[Config, Any], tuple]
    defaults: Mapping = dataclasses.field(default_factory=dict)  # class defaults of the keys read
    aliases: Mapping = dataclasses.field(default_factory=dict)  # attribute_map
    layers: Mapping = dataclasses.field(default_factory=dict)  # layer_type -> read's argument; {}: none
    refused_layers: Mapping = dataclasses.field(default_factory=dict)  # layer_type -> why it has no table
    sub: str | None = None  # the sub-config the keys live in
    refuse: Callable[[Config], None] | None = None  # raises where the config turns the table off

    def layer(self, layer_type: str | None) -> Any:
        names = [*self.layers, *self.refused_layers]
        if layer_type is None:
            if len(self.layers) > 1:
                raise SpecError(
                    ("layer_type",),
                    f"required: this model's tables differ by stack "
                    f"({', '.join(self.layers)}); send layer_type {' or '.join(map(repr, self.layers))}",
                    "missing",
                )
            return next(iter(self.layers.values()), None)
        if layer_type in self.refused_layers:
            raise SpecError(("layer_type",), self.refused_layers[layer_type])
        if layer_type not in self.layers:
            if not names:
                raise SpecError(
                    ("layer_type",), "this config has no layer types (one table serves the model)"
                )
            raise SpecError(
                ("layer_type",), f"must be one of {', '.join(map(repr, names))}, got {json_repr(layer_type)}"
            )
        return self.layers[layer_type]

    def derive(self, raw: Mapping, layer_type: str | None) -> Derived:
        arg = self.layer(layer_type)
        where = LOC
        if self.sub is not None:  # the composite config: its sub-config, or the class's default one
            where = (*LOC, self.sub)
            raw = {} if raw.get(self.sub) is None else require_object(raw[self.sub], where)
        cfg = Config(raw, self.aliases, self.defaults)
        try:
            if self.refuse is not None:
                self.refuse(cfg)
            fields, origin = self.read(cfg, arg)
        except SpecError as e:
            raise SpecError(_moved(e.loc, where), e.msg, e.kind) from None
        return Derived(fields, {k: _moved(v, where) for k, v in origin.items()})

    def text_model(self) -> FixedModel:
        """The same record for the sub-config's own model type (its keys at the top level)."""
        return dataclasses.replace(self, sub=None)


# -- t5-buckets ---------------------------------------------------------------------------------


def _buckets(
    num_key: str = "relative_attention_num_buckets", max_key: str = "relative_attention_max_distance"
):
    """T5Attention.compute_bias: _relative_position_bucket(key − query, bidirectional,
    num_buckets=config.<num_key>, max_distance=config.<max_key>)."""

    def read(cfg: Config, bidirectional: bool):
        return (
            {
                "bidirectional": bidirectional,
                "num_buckets": cfg.int(num_key),
                "max_distance": cfg.int(max_key),
            },
            {
                "bidirectional": ("layer_type",),
                "num_buckets": cfg.loc(num_key),
                "max_distance": cfg.loc(max_key),
            },
        )

    return read


# T5Model and its copies build the encoder stack with is_decoder=False (bidirectional buckets) and
# the decoder with is_decoder=True (unidirectional), whatever the config's own is_decoder says.
_ENC_DEC = {"encoder": True, "decoder": False}
_T5_DEFAULTS = {"relative_attention_num_buckets": 32, "relative_attention_max_distance": 128}


def _t5(model: str, cls: str = "Attention", layers: Mapping = _ENC_DEC, **kw) -> FixedModel:
    return FixedModel(
        source=f"models/{model}/modeling_{model}.py ({cls}._relative_position_bucket)",
        read=_buckets(),
        defaults=_T5_DEFAULTS,
        layers=layers,
        **kw,
    )


def _mpnet(cfg: Config, bidirectional: bool):
    # MPNetEncoder.compute_position_bias(hidden_states): relative_position_bucket with its defaults,
    # num_buckets 32 and max_distance 128, whatever the config says; relative_attention_num_buckets
    # only sizes the bias table, which must then hold 32 rows
    rows = cfg.int("relative_attention_num_buckets")
    if rows < 32:
        raise SpecError(
            cfg.loc("relative_attention_num_buckets"),
            f"must be >= 32: MPNet buckets into 32 (its bias table has {rows} rows)",
        )
    return (
        {"bidirectional": bidirectional, "num_buckets": 32, "max_distance": 128},
        {"bidirectional": MODEL_TYPE, "num_buckets": MODEL_TYPE, "max_distance": MODEL_TYPE},
    )


BUCKETS: dict[str, FixedModel] = {
    "t5": _t5("t5", "T5Attention"),
    "mt5": _t5("mt5", "MT5Attention"),
    # UMT5Attention: bidirectional = not is_decoder, inside the method (one bias per layer)
    "umt5": _t5("umt5", "UMT5Attention"),
    # LongT5's local and transient-global encoder attention buckets each (query, key) pair the same way
    "longt5": _t5("longt5", "LongT5Attention"),
    "switch_transformers": _t5("switch_transformers", "SwitchTransformersAttention"),
    "pop2piano": _t5("pop2piano", "Pop2PianoAttention"),
    # Pix2StructTextAttention.compute_bias: bidirectional=False always; the vision encoder has none
    "pix2struct": _t5(
        "pix2struct",
        "Pix2StructTextAttention",
        layers={"decoder": False},
        sub="text_config",
        refused_layers={
            "encoder": "Pix2Struct's vision encoder has no relative buckets (its "
            "positions are learned row and column embeddings)"
        },
    ),
    # UdopStack: the decoder's first layer computes T5's buckets; the encoder's bias adds 1-D,
    # horizontal and vertical buckets of the tokens' bounding boxes (relative_bias_args), which
    # positions alone do not give
    "udop": _t5(
        "udop",
        "UdopAttention",
        layers={"decoder": False},
        refused_layers={
            "encoder": "UDOP's encoder biases sum buckets of the tokens' bounding-box "
            "distances (relative_bias_args), which positions do not give"
        },
    ),
    # compute_all_stream_relative_buckets: the decoder's main stream buckets key − query, never
    # bidirectional (the predicting stream is the same function at shifted key positions)
    "prophetnet": FixedModel(
        source="models/prophetnet/modeling_prophetnet.py (compute_relative_buckets)",
        read=_buckets("num_buckets", "relative_max_distance"),
        defaults={"num_buckets": 32, "relative_max_distance": 128},
        layers={"decoder": False},
        refused_layers={"encoder": "ProphetNet's encoder has learned absolute positions"},
    ),
    # CpmAntSegmentPositionEmbedding._position_bucket: always bidirectional, for tokens of one
    # segment (pairs across segments take segment buckets instead)
    "cpmant": FixedModel(
        source="models/cpmant/modeling_cpmant.py (CpmAntSegmentPositionEmbedding._position_bucket)",
        read=_buckets("position_bias_num_buckets", "position_bias_max_distance"),
        defaults={"position_bias_num_buckets": 512, "position_bias_max_distance": 2048},
        layers={"decoder": True},
    ),
    "mpnet": FixedModel(
        source="models/mpnet/modeling_mpnet.py (MPNetEncoder.relative_position_bucket)",
        read=_mpnet,
        defaults={"relative_attention_num_buckets": 32},
        layers={"encoder": True},
    ),
}
BUCKETS["pix2struct_text_model"] = BUCKETS["pix2struct"].text_model()


# -- sinusoidal ---------------------------------------------------------------------------------


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

MODELS: dict[str, dict[str, FixedModel]] = {}
for _family, _records in (("t5-buckets", BUCKETS), ("sinusoidal", SINUSOIDAL)):
    for _mt, _record in _records.items():
        MODELS.setdefault(_mt, {})[_family] = _record

# One config per family for the docs (t5-base's and opus-mt-en-de's positional keys, as published).
EXAMPLES = {
    "t5-buckets": {
        "model_type": "t5",
        "d_model": 768,
        "num_heads": 12,
        "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128,
        "is_encoder_decoder": True,
    },
    "sinusoidal": {
        "model_type": "marian",
        "d_model": 512,
        "max_position_embeddings": 512,
        "pad_token_id": 58100,
        "scale_embedding": True,
    },
}
EXAMPLE_LAYER_TYPES = {"t5-buckets": "encoder"}  # the stack an example's body names (T5 has two)
