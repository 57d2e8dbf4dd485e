"""The ``t5-buckets`` records (fixed.FixedModel): transformers 5.24's T5 family,
``_relative_position_bucket`` and its copies, one record per model type that buckets relative
positions, each read as the model's own code reads its config (tests/engine/test_hf_fixed.py
checks every record against that code).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..core.errors import SpecError
from .config import Config
from .fixed import MODEL_TYPE, FixedModel


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


# the docs' example config (t5-base's positional keys, as published); its body names the encoder
# stack (T5 has two)
EXAMPLE = {
    "model_type": "t5",
    "d_model": 768,
    "num_heads": 12,
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128,
    "is_encoder_decoder": True,
}
EXAMPLE_LAYER_TYPE = "encoder"
