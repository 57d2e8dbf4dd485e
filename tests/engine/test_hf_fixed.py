"""``hf_config`` for ``t5-buckets`` and ``sinusoidal``: every record of posenc.engine.models.buckets
and hf_sinusoidal against transformers 5.24's own code for its model type.

T5 family: the model's own attention class is built from the config (as the model builds each
stack: the encoder with is_decoder=False, the decoder with is_decoder=True), its bias table set
to the bucket numbers, and its own ``compute_bias`` (ProphetNet: ``compute_all_stream_relative_buckets``;
CPM-Ant: its segment position embedding) must give posenc's buckets. Sinusoidal: the model's own
position embedding module (or function), built from the config with the arguments its stack
passes, called through its own ``forward`` so its position -> row mapping is checked too, within
transformers' float32 error. Both spellings: the config as published (sparse), and the config
class's ``to_dict()``. The model types are enumerated from the pinned transformers' modeling
files: a type posenc does not read is listed in NOT_READ with its reason.
"""

from __future__ import annotations

import copy
import importlib
import pathlib
import re

import numpy as np
import pytest
import torch
import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from posenc.engine.answer import pipeline
from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError, TooLarge
from posenc.engine.models.buckets import BUCKETS
from posenc.engine.models.registry import MODELS
from posenc.engine.models.sinusoidal import SINUSOIDAL
from tests.numeric import assert_close

HF_MODELS = pathlib.Path(transformers.__file__).parent / "models"

# name -> config.json's positional keys, as published (sizes that carry no positions left out)
T5 = {
    "t5-small": {"model_type": "t5", "d_model": 512, "num_heads": 8, "relative_attention_num_buckets": 32},
    "flan-t5-base": {
        "model_type": "t5",
        "d_model": 768,
        "num_heads": 12,
        "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128,
        "is_encoder_decoder": True,
    },
    "mt5-small": {"model_type": "mt5", "d_model": 512, "num_heads": 6, "relative_attention_num_buckets": 32},
    "umt5-small": {
        "model_type": "umt5",
        "d_model": 512,
        "num_heads": 6,
        "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128,
    },
    "long-t5-tglobal-base": {
        "model_type": "longt5",
        "d_model": 768,
        "num_heads": 12,
        "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128,
        "encoder_attention_type": "transient-global",
        "local_radius": 127,
    },
    "switch-base-8": {
        "model_type": "switch_transformers",
        "d_model": 768,
        "num_heads": 12,
        "num_experts": 8,
        "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128,
    },
    "pop2piano": {
        "model_type": "pop2piano",
        "d_model": 512,
        "num_heads": 8,
        "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128,
    },
    "udop-large": {
        "model_type": "udop",
        "d_model": 1024,
        "num_heads": 16,
        "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128,
    },
    "pix2struct-textcaps-base": {
        "model_type": "pix2struct",
        "text_config": {
            "hidden_size": 768,
            "num_heads": 12,
            "relative_attention_num_buckets": 32,
            "relative_attention_max_distance": 128,
        },
    },
    "prophetnet-large": {
        "model_type": "prophetnet",
        "hidden_size": 1024,
        "num_buckets": 32,
        "relative_max_distance": 128,
        "num_decoder_attention_heads": 16,
    },
    "mpnet-base": {
        "model_type": "mpnet",
        "hidden_size": 768,
        "num_attention_heads": 12,
        "relative_attention_num_buckets": 32,
    },
    "cpm-ant-10b": {
        "model_type": "cpmant",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "position_bias_num_buckets": 512,
        "position_bias_max_distance": 2048,
    },
    # branches beyond the published configs
    "t5-64-buckets": {
        "model_type": "t5",
        "relative_attention_num_buckets": 64,
        "relative_attention_max_distance": 300,
    },
    "t5-defaults": {"model_type": "t5"},
    "longt5-local": {
        "model_type": "longt5",
        "encoder_attention_type": "local",
        "local_radius": 7,
        "relative_attention_num_buckets": 16,
        "relative_attention_max_distance": 40,
    },
    "pix2struct-default-text": {"model_type": "pix2struct"},
    "pix2struct-text-model": {
        "model_type": "pix2struct_text_model",
        "relative_attention_num_buckets": 48,
        "relative_attention_max_distance": 200,
    },
    "prophetnet-defaults": {"model_type": "prophetnet"},
}


def _hf_config(published):
    kw = copy.deepcopy(published)
    return CONFIG_MAPPING[kw.pop("model_type")](**kw)


def _cited(record):
    """(modeling module, the name the record's source cites): 'models/t5/modeling_t5.py (T5Attention...)'."""
    m = re.fullmatch(r"models/(\w+)/(modeling_\w+)\.py \((\w+)[.,)].*", record.source)
    assert m, record.source
    return importlib.import_module(f"transformers.models.{m[1]}.{m[2]}"), m[3]


def _as_buckets(module):
    """Its relative_attention_bias set to the bucket numbers: compute_bias then returns buckets."""
    with torch.no_grad():
        w = module.relative_attention_bias
        w = getattr(w, "weight", w)  # an nn.Embedding (T5) or a bare Parameter (CPM-Ant)
        w.copy_(torch.arange(w.shape[0], dtype=w.dtype)[:, None].expand_as(w))
    return module


def hf_buckets(model_type, cfg, layer, past, q_len, k_len):
    """The model's own buckets for queries past..past+q_len and keys 0..k_len ([q_len, k_len])."""
    record = MODELS[model_type]["t5-buckets"]
    mod, name = _cited(record)
    if model_type == "prophetnet":  # the decoder's main stream: key − query, never bidirectional
        pos = torch.cat([torch.arange(k_len), torch.arange(past, past + q_len)])[None]  # keys, then queries
        main, _ = mod.compute_all_stream_relative_buckets(cfg.num_buckets, cfg.relative_max_distance, pos)
        return main[0, k_len:, :k_len].numpy()
    if model_type == "mpnet":  # its encoder's own compute_position_bias, as the encoder calls it
        n = max(past + q_len, k_len)  # (over positions 0..n−1: the block is a part of it)
        if n > 4096:
            return None
        enc = _as_buckets(mod.MPNetEncoder(type(cfg)(**{**cfg.to_dict(), "num_hidden_layers": 1})))
        with torch.no_grad():
            b = enc.compute_position_bias(torch.zeros(1, n, 8))
        return b[0, 0, past : past + q_len, :k_len].round().long().numpy()
    if model_type == "cpmant":
        emb = _as_buckets(mod.CpmAntSegmentPositionEmbedding(cfg))
        # its buckets are of key index − query index over the whole sequence; the model keeps the
        # rows of the new queries (position_bias[:, :, past_length:, :])
        k = torch.arange(k_len, dtype=torch.int32)[None]
        q = torch.arange(past + q_len, dtype=torch.int32)[None]
        with torch.no_grad():
            out = emb(k, q, torch.zeros_like(k), torch.zeros_like(q))  # one segment
        return out[0, 0, past:].round().long().numpy()
    text = getattr(cfg, "text_config", cfg)
    text = copy.deepcopy(text)
    text.is_decoder = layer == "decoder"  # as the model builds each stack
    cls = getattr(mod, name.split(".")[0])
    if model_type == "longt5" and layer == "encoder":
        cls = (
            mod.LongT5TransientGlobalAttention
            if cfg.encoder_attention_type == "transient-global"
            else mod.LongT5LocalAttention
        )
        att = _as_buckets(cls(text, has_relative_attention_bias=True))
        bl = att.block_len  # its bias: queries bl..2bl−1 against keys 0..3bl−1
        with torch.no_grad():
            b = att.compute_bias(bl)
        return b[0, 0, 0].round().long().numpy(), bl
    att = _as_buckets(cls(text, has_relative_attention_bias=True))
    with torch.no_grad():
        b = att.compute_bias(q_len, k_len, past_seen_tokens=past)
    return b[0, 0].round().long().numpy()


def _t5_cases():
    for name, published in T5.items():
        record = MODELS[published["model_type"]]["t5-buckets"]
        for layer in record.layers:
            yield pytest.param(name, layer, id=f"{name}-{layer}")


def test_encoder_decoder_models_build_their_stacks_with_is_decoder():
    """The premise of layer_type: each model sets is_decoder per stack, whatever its config says."""
    for model_type, record in BUCKETS.items():
        if set(record.layers) == {"encoder", "decoder"}:
            src = pathlib.Path(_cited(record)[0].__file__).read_text()
            assert "encoder_config.is_decoder = False" in src and "decoder_config.is_decoder = True" in src, (
                model_type
            )


@pytest.mark.parametrize("name,layer", list(_t5_cases()))
def test_t5_model_vs_its_own_buckets(name, layer):
    published = T5[name]
    mt = published["model_type"]
    cfg = _hf_config(published)
    shown = {}
    for spelling, hf in {"published": published, "to_dict": cfg.to_dict()}.items():
        body = {"hf_config": hf}
        if len(MODELS[mt]["t5-buckets"].layers) > 1 or spelling == "to_dict":
            body["layer_type"] = layer
        for past, q_len, k_len in ((0, 12, 700), (500, 5, 40), (100000, 2, 16)):
            want = hf_buckets(mt, cfg, layer, past, q_len, k_len)
            if want is None:  # more than the model's own code can be asked
                continue
            if isinstance(want, tuple):  # LongT5's local block
                want, bl = want
                got = compute(
                    "t5-buckets",
                    {**body, "query": {"start": bl, "stop": 2 * bl}, "key": {"start": 0, "stop": 3 * bl}},
                )
            else:
                got = compute(
                    "t5-buckets",
                    {
                        **body,
                        "query": {"start": past, "stop": past + q_len},
                        "key": {"start": 0, "stop": k_len},
                    },
                )
            np.testing.assert_array_equal(
                got["buckets"], want, err_msg=f"{name} {layer} ({spelling}) past={past}"
            )
        shown[spelling] = got["spec"]
    assert shown["published"] == shown["to_dict"]
    assert shown["published"]["bidirectional"] is (layer == "encoder" or mt == "cpmant")


def test_mpnet_buckets_into_32_whatever_its_table_holds():
    with pytest.raises(SpecError) as e:
        pipeline.parse(
            "t5-buckets",
            {
                "hf_config": {"model_type": "mpnet", "relative_attention_num_buckets": 16},
                "query": [0],
                "key": [0],
            },
        )
    assert e.value.loc == ("hf_config", "relative_attention_num_buckets")
    got = compute(
        "t5-buckets",
        {
            "hf_config": {**T5["mpnet-base"], "relative_attention_num_buckets": 64},
            "query": [0],
            "key": [0, 200],
        },
    )
    assert got["spec"]["num_buckets"] == 32


@pytest.mark.parametrize("model_type", [t for t, r in BUCKETS.items() if len(r.layers) > 1])
def test_encoder_decoder_configs_need_layer_type(model_type):
    with pytest.raises(SpecError) as e:
        pipeline.parse("t5-buckets", {"hf_config": {"model_type": model_type}, "query": [0], "key": [0]})
    assert e.value.loc == ("layer_type",) and "encoder" in e.value.msg and "decoder" in e.value.msg


@pytest.mark.parametrize(
    "model_type,layer", [(t, lt) for t, r in {**BUCKETS, **SINUSOIDAL}.items() for lt in r.refused_layers]
)
def test_stacks_without_the_table_are_refused_at_layer_type(model_type, layer):
    family = "t5-buckets" if model_type in BUCKETS else "sinusoidal"
    sel = {"query": [0], "key": [0]} if family == "t5-buckets" else {"positions": [0]}
    with pytest.raises(SpecError) as e:
        pipeline.parse(family, {"hf_config": {"model_type": model_type}, "layer_type": layer, **sel})
    assert e.value.loc == ("layer_type",)


# -- sinusoidal -------------------------------------------------------------------------------

SINUS = {
    "opus-mt-en-de": {
        "model_type": "marian",
        "d_model": 512,
        "max_position_embeddings": 512,
        "pad_token_id": 58100,
        "scale_embedding": True,
    },
    "pegasus-large": {
        "model_type": "pegasus",
        "d_model": 1024,
        "max_position_embeddings": 1024,
        "pad_token_id": 0,
        "scale_embedding": True,
    },
    "pegasus-x-base": {
        "model_type": "pegasus_x",
        "d_model": 768,
        "max_position_embeddings": 16384,
        "pad_token_id": 0,
    },
    "m2m100-418m": {
        "model_type": "m2m_100",
        "d_model": 1024,
        "max_position_embeddings": 1024,
        "pad_token_id": 1,
        "scale_embedding": True,
    },
    "nllb-moe-54b": {
        "model_type": "nllb-moe",
        "d_model": 2048,
        "max_position_embeddings": 1024,
        "pad_token_id": 1,
    },
    "wmt19-en-de": {
        "model_type": "fsmt",
        "d_model": 1024,
        "max_position_embeddings": 1024,
        "pad_token_id": 1,
        "scale_embedding": True,
        "src_vocab_size": 42024,
        "tgt_vocab_size": 42024,
    },
    "s2t-small": {
        "model_type": "speech_to_text",
        "d_model": 256,
        "max_source_positions": 6000,
        "max_target_positions": 1024,
        "pad_token_id": 1,
        "scale_embedding": True,
    },
    "trocr-small": {
        "model_type": "trocr",
        "d_model": 256,
        "max_position_embeddings": 512,
        "pad_token_id": 1,
        "use_learned_position_embeddings": False,
        "scale_embedding": True,
    },
    "hf-seamless-m4t-medium": {
        "model_type": "seamless_m4t",
        "hidden_size": 1024,
        "pad_token_id": 0,
        "max_position_embeddings": 4096,
        "scale_embedding": True,
    },
    "seamless-m4t-v2-large": {
        "model_type": "seamless_m4t_v2",
        "hidden_size": 1024,
        "pad_token_id": 0,
        "max_position_embeddings": 4096,
        "scale_embedding": True,
    },
    "kosmos-2": {
        "model_type": "kosmos-2",
        "text_config": {
            "embed_dim": 2048,
            "pad_token_id": 1,
            "max_position_embeddings": 2048,
            "scale_embedding": True,
        },
    },
    "kosmos-2.5": {
        "model_type": "kosmos-2.5",
        "text_config": {"embed_dim": 1536, "pad_token_id": 1, "max_position_embeddings": 4096},
    },
    "xglm-564m": {
        "model_type": "xglm",
        "d_model": 1024,
        "max_position_embeddings": 2048,
        "pad_token_id": 1,
        "scale_embedding": True,
    },
    "whisper-tiny": {
        "model_type": "whisper",
        "d_model": 384,
        "max_source_positions": 1500,
        "max_target_positions": 448,
    },
    "musicgen-small": {
        "model_type": "musicgen",
        "decoder": {"hidden_size": 1024, "max_position_embeddings": 2048, "model_type": "musicgen_decoder"},
    },
    "musicgen-melody": {
        "model_type": "musicgen_melody",
        "decoder": {
            "hidden_size": 1536,
            "max_position_embeddings": 2048,
            "model_type": "musicgen_melody_decoder",
        },
    },
    "roformer-chinese-base": {
        "model_type": "roformer",
        "hidden_size": 768,
        "num_attention_heads": 12,
        "max_position_embeddings": 1536,
    },
    "informer-tourism": {
        "model_type": "informer",
        "d_model": 32,
        "context_length": 24,
        "prediction_length": 24,
    },
    "autoformer-tourism": {
        "model_type": "autoformer",
        "d_model": 64,
        "context_length": 24,
        "prediction_length": 24,
    },
    "tst-tourism": {
        "model_type": "time_series_transformer",
        "d_model": 32,
        "context_length": 24,
        "prediction_length": 24,
    },
    "xlm-sinusoidal": {
        "model_type": "xlm",
        "emb_dim": 1024,
        "max_position_embeddings": 512,
        "sinusoidal_embeddings": True,
    },
    "flaubert-sinusoidal": {
        "model_type": "flaubert",
        "emb_dim": 512,
        "max_position_embeddings": 512,
        "sinusoidal_embeddings": True,
    },
    "distilbert-sinusoidal": {
        "model_type": "distilbert",
        "dim": 768,
        "max_position_embeddings": 512,
        "sinusoidal_pos_embds": True,
    },
    "tipsv2": {"model_type": "tipsv2", "text_config": {"hidden_size": 768, "max_position_embeddings": 64}},
    "speecht5-asr": {
        "model_type": "speecht5",
        "hidden_size": 768,
        "pad_token_id": 1,
        "max_speech_positions": 4000,
        "max_text_positions": 450,
    },
    # branches beyond the published configs
    "m2m100-odd-width": {"model_type": "m2m_100", "d_model": 33, "pad_token_id": 3},
    "marian-odd-width": {"model_type": "marian", "d_model": 33, "max_position_embeddings": 256},
    "musicgen-odd-decoder": {"model_type": "musicgen_decoder", "hidden_size": 35},
    "kosmos-2-text-model": {"model_type": "kosmos_2_text_model", "embed_dim": 64, "pad_token_id": 4},
    "xglm-pad-0": {"model_type": "xglm", "d_model": 64, "pad_token_id": 0},
    "m2m100-defaults": {"model_type": "m2m_100"},
    "whisper-defaults": {"model_type": "whisper"},
}


def _width(cfg, name):
    return getattr(cfg, name)


def _emb(cls, *args, **kw):
    """A table module of the nn.Embedding kind, initialised as the model's _init_weights does."""
    m = cls(*args, **kw)
    with torch.no_grad():
        if hasattr(m, "create_weight"):  # Marian and its copies
            m.weight.copy_(m.create_weight())
        else:  # FSMT's _init_weights
            m.weight.copy_(m.get_embedding(*m.weight.shape, m.padding_idx))
    return m


def _ids(n, pad):
    return torch.full((1, n), 5 if pad != 5 else 6, dtype=torch.long)  # n tokens, none of them padding


def hf_sinusoidal(model_type, cfg, start, n, layer=None):
    """The model's own position embedding for positions start..start+n−1, [n, d], float64."""
    record = MODELS[model_type]["sinusoidal"]
    mod, name = _cited(record)
    c = getattr(cfg, "text_config", None) or getattr(cfg, "decoder", None) or cfg
    if c is cfg and model_type in ("musicgen", "musicgen_melody"):
        c = cfg.decoder
    with torch.no_grad():
        if name == "sinusoids":  # WhisperEncoder's table
            out = mod.sinusoids(c.max_source_positions, c.d_model)[start : start + n]
        elif name == "create_sinusoidal_embeddings":  # XLM / Flaubert / DistilBERT
            d = c.hidden_size
            out = mod.create_sinusoidal_embeddings(
                c.max_position_embeddings, d, torch.empty(c.max_position_embeddings, d)
            )[start : start + n]
        elif model_type in (
            "m2m_100",
            "nllb-moe",
            "seamless_m4t",
            "seamless_m4t_v2",
            "kosmos-2",
            "kosmos-2.5",
            "kosmos_2_text_model",
            "kosmos_2_5_text_model",
        ):
            e = getattr(mod, name)(c.max_position_embeddings, c.hidden_size, c.pad_token_id)
            out = e(input_ids=_ids(n, c.pad_token_id), cache_length=start)[0]
        elif model_type in ("speech_to_text",):
            e = getattr(mod, name)(c.max_target_positions, c.d_model, c.pad_token_id)
            out = e(_ids(n, c.pad_token_id), cache_length=start)[0]
        elif model_type == "trocr":
            e = getattr(mod, name)(c.max_position_embeddings + c.pad_token_id + 1, c.d_model, c.pad_token_id)
            out = e(_ids(n, c.pad_token_id), cache_length=start)[0]
        elif model_type == "fsmt":
            e = _emb(
                getattr(mod, name), c.max_position_embeddings + c.pad_token_id + 1, c.d_model, c.pad_token_id
            )
            out = e(_ids(n, c.pad_token_id), cache_length=start)[0]
        elif model_type == "xglm":
            e = getattr(mod, name)(c.max_position_embeddings, c.d_model, c.pad_token_id)
            out = e(torch.arange(start, start + n)[None], cache_length=start)[0]
        elif model_type == "pegasus_x":
            e = getattr(mod, name)(c.d_model)
            out = e(torch.zeros(1, n, c.d_model), cache_length=start)[0]
        elif model_type in ("musicgen", "musicgen_decoder"):
            e = getattr(mod, name)(c.max_position_embeddings, c.hidden_size)
            out = e(torch.zeros(1, c.num_codebooks, n, dtype=torch.long), cache_length=start)
        elif model_type in ("musicgen_melody", "musicgen_melody_decoder"):
            e = getattr(mod, name)(c.max_position_embeddings, c.hidden_size)
            out = e(torch.zeros(1, n, c.hidden_size), cache_length=start)
        elif model_type == "roformer":
            e = _emb(getattr(mod, name), c.max_position_embeddings, c.hidden_size // c.num_attention_heads)
            out = e((1, n), cache_length=start)
        elif model_type in ("informer", "autoformer", "time_series_transformer"):
            e = _emb(getattr(mod, name), c.context_length + c.prediction_length, c.d_model)
            out = e((1, n), cache_length=start)
        elif model_type in ("marian", "pegasus"):
            e = _emb(getattr(mod, name), c.max_position_embeddings, c.d_model, c.pad_token_id)
            out = e((1, n), cache_length=start)
        elif model_type == "speecht5" and layer in ("speech_encoder", "text_decoder"):
            size = c.max_speech_positions if layer == "speech_encoder" else c.max_text_positions
            e = getattr(mod, name)(size + c.pad_token_id + 1, c.hidden_size, c.pad_token_id)
            out = e(_ids(n, c.pad_token_id), cache_length=start)[0]
        elif model_type == "speecht5":  # the prenets' ScaledPositionalEncoding, alpha = 1
            size = c.max_text_positions if layer == "text_encoder" else c.max_speech_positions
            e = mod.SpeechT5ScaledPositionalEncoding(0.0, c.hidden_size, size).eval()
            out = e(torch.zeros(1, start + n, c.hidden_size))[0, start:]
        elif model_type in ("tipsv2", "tipsv2_text_model"):
            e = getattr(mod, name)(c)
            out = e(torch.arange(start, start + n)[None])[0]
        else:
            raise AssertionError(f"no reference for {model_type}")
    return out.double().numpy()


def _span(model_type, cfg):
    """(start, n) pairs of positions the model's own module can give."""
    c = getattr(cfg, "text_config", None) or getattr(cfg, "decoder", None) or cfg
    if model_type == "speecht5":
        return [(0, 64), (400, 50)]
    if model_type in ("informer", "autoformer", "time_series_transformer"):
        return [(0, c.context_length + c.prediction_length)]
    # tables that do not grow past their length (or, Speech2Text's and TrOCR's, not with cache_length)
    limit = {"whisper": "max_source_positions", "speech_to_text": "max_target_positions"}.get(
        model_type, "max_position_embeddings"
    )
    if model_type in (
        "marian",
        "pegasus",
        "roformer",
        "whisper",
        "xlm",
        "flaubert",
        "distilbert",
        "tipsv2",
        "tipsv2_text_model",
        "speech_to_text",
        "trocr",
    ):
        top = getattr(c, limit)
        return [(0, min(64, top)), (top - 16, 16)]
    return [(0, 64), (1000, 16), (20000, 4)]


def _sin_cases():
    for name, published in SINUS.items():
        layers = MODELS[published["model_type"]]["sinusoidal"].layers
        for layer in layers if len(layers) > 1 else [None]:
            yield pytest.param(name, layer, id=f"{name}-{layer}" if layer else name)


@pytest.mark.parametrize("name,layer", list(_sin_cases()))
def test_sinusoidal_model_vs_its_own_table(name, layer):
    published = SINUS[name]
    mt = published["model_type"]
    cfg = _hf_config(published)
    shown = {}
    for spelling, hf in {"published": published, "to_dict": cfg.to_dict()}.items():
        for start, n in _span(mt, cfg):
            want = hf_sinusoidal(mt, cfg, start, n, layer)
            got = compute(
                "sinusoidal",
                {"hf_config": hf, "layer_type": layer, "positions": {"start": start, "stop": start + n}},
            )
            p = np.arange(start, start + n, dtype=np.float64)[:, None]
            assert got["encoding"].shape == want.shape, (name, spelling, got["encoding"].shape, want.shape)
            assert_close(
                got["encoding"], want, atol=1e-6 + 2.5e-7 * p, what=f"{name} ({spelling}) from {start}"
            )
        shown[spelling] = got["spec"]
    assert shown["published"] == shown["to_dict"], name


@pytest.mark.parametrize(
    "body,loc",
    [
        ({"model_type": "xlm", "emb_dim": 64}, ("hf_config", "sinusoidal_embeddings")),
        (
            {"model_type": "xlm", "emb_dim": 64, "sinusoidal_embeddings": False},
            ("hf_config", "sinusoidal_embeddings"),
        ),
        ({"model_type": "flaubert"}, ("hf_config", "sinusoidal_embeddings")),
        ({"model_type": "distilbert", "sinusoidal_pos_embds": False}, ("hf_config", "sinusoidal_pos_embds")),
        ({"model_type": "trocr"}, ("hf_config", "use_learned_position_embeddings")),
        ({"model_type": "whisper", "d_model": 385}, ("hf_config", "d_model")),
        ({"model_type": "pegasus_x", "d_model": 33}, ("hf_config", "d_model")),
        ({"model_type": "speecht5"}, ("layer_type",)),
        ({"model_type": "m2m_100", "d_model": 3}, ("hf_config", "d_model")),
        ({"model_type": "m2m_100", "pad_token_id": -1}, ("hf_config", "pad_token_id")),
        ({"model_type": "xglm", "pad_token_id": 7}, ("hf_config", "pad_token_id")),
        (
            {"model_type": "kosmos-2", "text_config": {"embed_dim": "2048"}},
            ("hf_config", "text_config", "embed_dim"),
        ),
        ({"model_type": "kosmos-2", "text_config": [1]}, ("hf_config", "text_config")),
        ({"model_type": "musicgen", "decoder": {"hidden_size": 0}}, ("hf_config", "decoder", "hidden_size")),
        ({"model_type": "t5"}, ("hf_config", "model_type")),
        ({"model_type": "llama"}, ("hf_config", "model_type")),
    ],
)
def test_sinusoidal_refusals_name_the_key(body, loc):
    with pytest.raises(SpecError) as e:
        pipeline.parse("sinusoidal", {"hf_config": body, "positions": [0]})
    assert e.value.loc == loc, e.value.msg


@pytest.mark.parametrize(
    "body,layer_type,loc",
    [
        (
            {"model_type": "t5", "relative_attention_num_buckets": 3},
            "encoder",
            ("hf_config", "relative_attention_num_buckets"),
        ),
        (
            {"model_type": "t5", "relative_attention_max_distance": 4},
            "decoder",
            ("hf_config", "relative_attention_max_distance"),
        ),
        (
            {"model_type": "t5", "relative_attention_num_buckets": 32.0},
            "decoder",
            ("hf_config", "relative_attention_num_buckets"),
        ),
        ({"model_type": "t5"}, "cross_attention", ("layer_type",)),
        (
            {"model_type": "pix2struct", "text_config": {"relative_attention_num_buckets": "32"}},
            None,
            ("hf_config", "text_config", "relative_attention_num_buckets"),
        ),
        (
            {"model_type": "prophetnet", "relative_max_distance": 0},
            None,
            ("hf_config", "relative_max_distance"),
        ),
        ({"model_type": "m2m_100"}, None, ("hf_config", "model_type")),
        ({"model_type": "whisper"}, "encoder", ("hf_config", "model_type")),
    ],
)
def test_t5_refusals_name_the_key(body, layer_type, loc):
    with pytest.raises(SpecError) as e:
        pipeline.parse("t5-buckets", {"hf_config": body, "layer_type": layer_type, "query": [0], "key": [0]})
    assert e.value.loc == loc, e.value.msg


# -- every model type of the pinned transformers ------------------------------------------------


def _dirs(pattern: str) -> set[str]:
    rx = re.compile(pattern)
    return {
        f.parent.name for f in HF_MODELS.glob("*/modeling_*.py") if rx.search(f.read_text(errors="replace"))
    }


def _record_dirs(family):
    return {_cited(by[family])[0].__name__.split(".")[-2] for by in MODELS.values() if family in by}


# model directories found by the patterns below whose positions posenc does not read, and why
NOT_READ: dict[str, dict[str, str]] = {"sinusoidal": {}, "t5-buckets": {}}
PATTERNS = {
    "sinusoidal": r"class \w*SinusoidalPositionalEmbedding\b|def sinusoids\(|create_sinusoidal_embeddings"
    r"|sinusoidal_pos_embds|sinusoidal_embeddings",
    "t5-buckets": r"_relative_position_bucket|def relative_position_bucket\(relative_position, num_buckets",
    "alibi": r"(?i)alibi",
}


@pytest.mark.parametrize("family", list(PATTERNS))
def test_every_model_of_the_family_is_read_or_listed(family):
    found = _dirs(PATTERNS[family])
    read = _record_dirs(family)
    listed = set(NOT_READ.get(family, {}))
    assert not (read & listed), read & listed
    assert found == read | listed, {
        "not read nor listed": found - read - listed,
        "listed or read, not found": (read | listed) - found,
    }


def test_every_record_is_tested():
    assert {c["model_type"] for c in T5.values()} == set(BUCKETS)
    assert {c["model_type"] for c in SINUS.values()} >= set(SINUSOIDAL) - {
        "kosmos_2_5_text_model",
        "musicgen_melody_decoder",
        "tipsv2_text_model",
    }


def _class_default(cls, name):
    import dataclasses

    f = {f.name: f for f in dataclasses.fields(cls)}.get(name)
    assert f is not None, (cls.__name__, name)
    return f.default


@pytest.mark.parametrize("model_type", sorted({**BUCKETS, **SINUSOIDAL}))
def test_defaults_are_the_config_classes(model_type):
    """What posenc assumes for an absent key is the (sub-)config class's own default."""
    cls = CONFIG_MAPPING[model_type]
    for record in MODELS[model_type].values():
        sub = cls
        if record.sub is not None:
            sub = type(getattr(cls(), record.sub))
        for name, value in record.defaults.items():
            assert _class_default(sub, name) == value, (model_type, name)
        for name, stored in record.aliases.items():
            assert getattr(sub, "attribute_map", {}).get(name) == stored, (model_type, name)


@pytest.mark.parametrize("family", sorted({f for by in MODELS.values() for f in by}))
def test_the_docs_config_example_of_each_family_answers(family):
    """The /docs example body of a model config (pipeline.body_schema) is answered, not refused."""
    example = pipeline.body_schema(pipeline.family_of(family))[1]["a model's config.json"]["value"]
    assert "spec" in pipeline.compute(family, example)


MANGLED = [None, "32", -1, 0, 1, 3, 1.5, True, [], {}, [1, 2], 2**40, float("nan"), float("inf")]


@pytest.mark.parametrize("model_type", sorted({**BUCKETS, **SINUSOIDAL}))
def test_mangled_configs_get_a_spec_error_or_an_answer(model_type):
    """Every key a record reads, and its sub-config, replaced by values of every JSON kind: a
    SpecError naming a field, a 413 (a width of 2**40), or an answer; never another exception."""
    family = "t5-buckets" if model_type in BUCKETS else "sinusoidal"
    record = MODELS[model_type][family]
    sel = {"query": [0, 5], "key": [0, 300]} if family == "t5-buckets" else {"positions": [0, 7]}
    keys = [
        *record.defaults,
        "pad_token_id",
        "use_learned_position_embeddings",
        "sinusoidal_embeddings",
        "sinusoidal_pos_embds",
    ]
    layers = [*record.layers, *record.refused_layers, None, "nope"]
    for key in keys:
        for value in MANGLED:
            cfg = {"model_type": model_type, key: value}
            if record.sub is not None:
                cfg = {"model_type": model_type, record.sub: {key: value}}
            for layer in layers:
                try:
                    pipeline.compute(family, {"hf_config": cfg, "layer_type": layer, **sel})
                except TooLarge:
                    assert value == 2**40, (key, value)
                except SpecError as e:
                    assert e.loc and e.loc[0] in ("hf_config", "layer_type"), (key, value, layer, e.loc)
    if record.sub is not None:
        for value in MANGLED:
            try:
                pipeline.compute(family, {"hf_config": {"model_type": model_type, record.sub: value}, **sel})
            except SpecError as e:
                assert e.loc[:2] == ("hf_config", record.sub) or e.loc == ("layer_type",), (value, e.loc)
