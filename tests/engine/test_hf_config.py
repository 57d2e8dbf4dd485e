"""``hf_config``: every supported model type against transformers 5.24's own classes.

For each model: the config is built with transformers' config class from the values its published
config.json holds (tests/engine/hf_published.py); posenc gets the same config in both spellings
(as published, transformers 4's ``rope_scaling``/``type``/``rotary_pct``; and the config class's
``to_dict()``, transformers 5's ``rope_parameters``), and its cos/sin must equal the model's own
``*RotaryEmbedding`` output within docs/reference.md's tolerance (1e-6 + 2.5e-7·p, times the
attention scaling), in the pairing layout that module hands its attention. ALiBi: BLOOM's,
MPT's and Falcon's own bias builders.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import math
import re

import numpy as np
import pytest
import torch
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from posenc.engine.answer.pipeline import compute
from posenc.engine.models.registry import FIXED, HAND_WRITTEN, MODELS
from posenc.engine.models.vision import CLASSES
from posenc.engine.models.vision import MODELS as VISION
from tests.engine.hf_published import ALIBI, LAYER_TYPES, ROPE
from tests.numeric import assert_close

POSITIONS = [
    0,
    1,
    2,
    3,
    100,
    1000,
    2047,
    4095,
    4096,
    4097,
    8191,
    8192,
    32767,
    32768,
    65535,
    131071,
    131072,
    150000,
]

# Derivation branches beyond the published configs, each still checked against transformers.
VARIANTS = {
    # Llama's default frequencies ignore partial_rotary_factor; every other type honours it
    "llama-partial-default": {
        "model_type": "llama",
        "hidden_size": 1024,
        "num_attention_heads": 8,
        "partial_rotary_factor": 0.5,
    },
    "llama-partial-linear": {
        "model_type": "llama",
        "hidden_size": 1024,
        "num_attention_heads": 8,
        "partial_rotary_factor": 0.5,
        "rope_scaling": {"type": "linear", "factor": 4.0},
    },
    # a top-level original_max_position_embeddings overrides the one inside
    "llama3-top-original": {
        "model_type": "llama",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "original_max_position_embeddings": 2048,
        "rope_scaling": {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
    },
    "llama-dynamic": {
        "model_type": "llama",
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "max_position_embeddings": 4096,
        "rope_scaling": {"type": "dynamic", "factor": 2.0},
    },
    "mistral-yarn-partial-keys": {
        "model_type": "mistral",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "max_position_embeddings": 32768,
        "rope_theta": 1e6,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "mrope_section": [1, 2], "beta_fast": 16.0},
    },
    # class defaults: Mixtral's θ is 1e6, Qwen3's head_dim 128, Cohere's θ 5e5
    "mixtral-default-theta": {"model_type": "mixtral", "hidden_size": 4096, "num_attention_heads": 32},
    "qwen3-default-head-dim": {"model_type": "qwen3", "hidden_size": 2048, "num_attention_heads": 16},
    "cohere-default-theta": {"model_type": "cohere", "hidden_size": 4096, "num_attention_heads": 32},
    # GPT-NeoX reads rotary_emb_base and rotary_pct (default 0.25), not rope_theta
    "pythia-defaults": {
        "model_type": "gpt_neox",
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "rope_theta": 500000.0,
    },
    "phi-default-fraction": {"model_type": "phi", "hidden_size": 2048, "num_attention_heads": 32},
    "phi3-yarn-is-longrope": {
        "model_type": "phi3",
        "hidden_size": 3072,
        "num_attention_heads": 32,
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
        "rope_scaling": {
            "type": "yarn",
            "short_factor": [1.0 + k / 64 for k in range(48)],
            "long_factor": [1.0 + k for k in range(48)],
        },
    },
    # Phi3Config's top-level original_max_position_embeddings defaults to 4096 and overrides
    "phi3-class-default-original": {
        "model_type": "phi3",
        "hidden_size": 3072,
        "num_attention_heads": 32,
        "max_position_embeddings": 131072,
        "rope_scaling": {
            "type": "longrope",
            "original_max_position_embeddings": 8192,
            "short_factor": [1.0 + k / 64 for k in range(48)],
            "long_factor": [1.0 + k for k in range(48)],
        },
    },
    "phi3-default": {
        "model_type": "phi3",
        "hidden_size": 3072,
        "num_attention_heads": 32,
        "max_position_embeddings": 4096,
    },
    "falcon-legacy-n_embed": {
        "model_type": "falcon",
        "n_embed": 2048,
        "num_attention_heads": 32,
        "alibi": False,
    },
    "gemma3-v5-nested": {
        "model_type": "gemma3_text",
        "hidden_size": 1152,
        "num_attention_heads": 4,
        "head_dim": 256,
        "num_hidden_layers": 6,
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        },
    },
    "gptj-odd-fraction": {
        "model_type": "gptj",
        "n_embd": 4080,
        "n_head": 16,
        "rotary_dim": 64,
        "n_positions": 4096,
    },
}
LAYER_TYPES = {**LAYER_TYPES, "gemma3-v5-nested": ("full_attention", "sliding_attention")}
CASES = {**ROPE, **VARIANTS}


def _rotary_class(model_type):
    """The rotary embedding class that MODELS cites for this model type (so the docs' citation is
    checked too): 'models/llama/modeling_llama.py (LlamaRotaryEmbedding)'."""
    m = re.fullmatch(r"models/(\w+)/(modeling_\w+)\.py \((\w+)[,)].*", MODELS[model_type]["rope"].source)
    assert m, MODELS[model_type]["rope"].source
    mod = importlib.import_module(f"transformers.models.{m[1]}.{m[2]}")
    return getattr(mod, m[3])


def _hf_config(published):
    kw = copy.deepcopy(published)
    return CONFIG_MAPPING[kw.pop("model_type")](**kw)


def _positions(model_type, cfg):
    if model_type in ("gptj", "codegen"):  # GPT-J's table stops at n_positions
        return [p for p in POSITIONS if p < cfg.n_positions]
    return POSITIONS


def hf_cos_sin(model_type, cfg, positions, layer_type):
    """The model's own rotary embedding output as posenc's [n, d] cos/sin, in the layout it hands
    its attention, and its attention scaling."""
    module = _rotary_class(model_type)(cfg)
    x = torch.zeros(1, dtype=torch.float32)
    pos = torch.tensor([positions], dtype=torch.int64)
    with torch.no_grad():
        out = module(x, pos, layer_type) if layer_type else module(x, pos)
    if model_type in ("gptj", "codegen"):  # (sin, cos), half width, applied by repeat_interleave
        sin, cos = (t[0].repeat_interleave(2, dim=-1) for t in out)
    elif model_type == "deepseek_v2":  # polar(1, freqs)·scaling, half width, paired (2k, 2k+1)
        z = out[0]
        cos, sin = z.real.repeat_interleave(2, dim=-1), z.imag.repeat_interleave(2, dim=-1)
    else:
        cos, sin = out[0][0], out[1][0]
    scaling = getattr(module, f"{layer_type}_attention_scaling" if layer_type else "attention_scaling", 1.0)
    return cos.double().numpy(), sin.double().numpy(), scaling


def hf_tol(positions, scaling):
    """transformers' own float32 error (docs/reference.md)."""
    return (1e-6 + 2.5e-7 * np.asarray(positions, dtype=np.float64)[:, None]) * max(1.0, scaling)


def _cases():
    for name in CASES:
        for lt in LAYER_TYPES.get(name, (None,)):
            yield pytest.param(name, lt, id=f"{name}-{lt}" if lt else name)


@pytest.mark.parametrize("name,layer_type", list(_cases()))
def test_rope_model_vs_its_rotary_embedding(name, layer_type):
    published = CASES[name]
    cfg = _hf_config(published)
    mt = published["model_type"]
    positions = _positions(mt, cfg)
    want_cos, want_sin, scaling = hf_cos_sin(mt, cfg, positions, layer_type)
    spellings = {"published": published, "to_dict": cfg.to_dict()}
    shown = {}
    for spelling, hf in spellings.items():
        body = {"hf_config": hf, "positions": positions}
        if layer_type:
            body["layer_type"] = layer_type
        got = compute("rope", body)
        what = f"{name} ({spelling})"
        assert got["cos"].shape == want_cos.shape, (what, got["cos"].shape, want_cos.shape)
        if mt != "phimoe":  # Phi-MoE scales by its mscale, not attention_scaling
            assert got["attention_scaling"] == pytest.approx(scaling, rel=1e-7), what
        tol = hf_tol(positions, got["attention_scaling"])
        assert_close(got["cos"], want_cos, atol=tol, what=f"{what} cos")
        assert_close(got["sin"], want_sin, atol=tol, what=f"{what} sin")
        shown[spelling] = got["spec"]
    assert shown["published"] == shown["to_dict"]


@pytest.mark.parametrize("name", ["phi-3-mini-128k", "phi-3.5-moe"])
def test_longrope_short_positions(name):
    """Below original_max_position_embeddings Phi-3 takes its short factors (Phi-MoE always)."""
    published = ROPE[name]
    cfg = _hf_config(published)
    positions = [0, 1, 17, 1000, 4095]
    want_cos, want_sin, _ = hf_cos_sin(published["model_type"], cfg, positions, None)
    got = compute("rope", {"hf_config": published, "positions": positions})
    tol = hf_tol(positions, got["attention_scaling"])
    assert_close(got["cos"], want_cos, atol=tol, what="cos")
    assert_close(got["sin"], want_sin, atol=tol, what="sin")


def _shifted(got, n):
    """Our row of query n-1, −m·(n−1−j), shifted by m·(n−1) to BLOOM's m·j, and the absolute
    error that shift exposes (the float32 rounding of values up to m·(n−1))."""
    m = got["slopes"].astype(np.float64)[:, None, None]
    return got["bias"].astype(np.float64) + m * (n - 1), 1e-7 + m * (n - 1) * 2.0**-23


def _bloom_like(name, hf_bias, slopes_tol):
    published = ALIBI[name]
    cfg = _hf_config(published)
    n = 300
    got = compute("alibi", {"hf_config": published, "query": [n - 1], "key": {"start": 0, "stop": n}})
    want = hf_bias(cfg, n)  # [H, 1, n]: the row of query n-1, up to a constant
    assert got["bias"].shape == (want.shape[0], 1, n)
    return cfg, got, want


@pytest.mark.parametrize("name", ["bloom-560m", "bloom-7b1"])
def test_bloom_alibi(name):
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes, build_alibi_tensor

    cfg, got, want = _bloom_like(
        name,
        lambda cfg, n: build_alibi_tensor(torch.ones(1, n), cfg.n_head, torch.float32).double().numpy(),
        0,
    )
    slopes = _get_alibi_slopes(cfg.n_head, "cpu").double().numpy()
    assert_close(got["slopes"], slopes, atol=0, rtol=1e-6, what="slopes")
    # BLOOM builds m·j; the canonical causal block is −m·(i − j): they differ by m·i per row
    ours, atol = _shifted(got, want.shape[-1])
    assert_close(ours, want, atol=atol, rtol=2e-6, what="bias")
    assert got["spec"] == {"num_heads": cfg.n_head, "max_bias": 8.0, "mode": "causal", "mask_future": False}


def test_mpt_alibi():
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    published = ALIBI["mpt-7b"]
    cfg = _hf_config(published)
    n = 300
    want = (
        build_mpt_alibi_tensor(cfg.n_heads, n, cfg.attn_config.alibi_bias_max).double().numpy()
    )  # m·(j − (n−1))
    for hf in (published, cfg.to_dict()):
        got = compute("alibi", {"hf_config": hf, "query": [n - 1], "key": {"start": 0, "stop": n}})
        assert_close(got["bias"], want, atol=1e-6, rtol=1e-6, what="bias")
        assert got["spec"]["num_heads"] == 32 and got["spec"]["max_bias"] == 8.0


def test_falcon_alibi():
    """Falcon casts its slopes to bfloat16 (docs/reference.md): equal within that rounding."""
    from transformers.models.falcon.modeling_falcon import build_alibi_tensor

    published = ALIBI["falcon-rw-1b"]
    cfg = _hf_config(published)
    n = 300
    want = build_alibi_tensor(torch.ones(1, n), cfg.num_attention_heads, torch.float32).double().numpy()
    for hf in (published, cfg.to_dict()):
        got = compute("alibi", {"hf_config": hf, "query": [n - 1], "key": {"start": 0, "stop": n}})
        ours, atol = _shifted(got, n)
        assert_close(ours, want, atol=atol, rtol=2**-7, what="bias")  # bf16 slope times bf16 product


def test_every_model_type_is_tested():
    rope = {c["model_type"] for c in ROPE.values()}
    alibi = {c["model_type"] for c in ALIBI.values()}
    # the vision and multimodal types are held to their own classes by test_hf_vision.py
    # the zoo's rows (engine/models/zoo.json) are held to their classes by tests/engine/test_hf_zoo.py
    hand = {t: by for t, by in MODELS.items() if t in HAND_WRITTEN}
    assert rope == {t for t, by in hand.items() if "rope" in by and t not in VISION}
    assert alibi == {t for t, by in hand.items() if "alibi" in by}


def _class_default(cls, name):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    inv = {v: k for k, v in getattr(cls, "attribute_map", {}).items()}
    f = fields.get(name) or fields.get(getattr(cls, "attribute_map", {}).get(name, name))
    assert f is not None, (cls.__name__, name, inv)
    return f.default


@pytest.mark.parametrize(
    "model_type", sorted(HAND_WRITTEN & set(MODELS) - set(VISION) - set(FIXED))
)  # FIXED: test_hf_fixed.py
def test_defaults_are_the_config_classes(model_type):
    """What posenc assumes for an absent key is the config class's own default."""
    cls = CONFIG_MAPPING[model_type]
    for record in MODELS[model_type].values():
        for name, value in record.defaults.items():
            assert _class_default(cls, name) == value, (model_type, name)
        if hasattr(record, "default_theta") and not isinstance(cls.default_theta, dict):
            assert record.default_theta == cls.default_theta, model_type


def test_spec_parses_back_to_the_same_table():
    """The spec an answer shows is ordinary spec fields: sent back, it gives the same answer."""
    for name, published in ROPE.items():
        for lt in LAYER_TYPES.get(name, (None,)):
            body = {"hf_config": published, "positions": [0, 5000], **({"layer_type": lt} if lt else {})}
            a = compute("rope", body)
            b = compute("rope", {**a["spec"], "positions": [0, 5000]})
            assert "spec" not in b
            for k in ("cos", "sin", "inv_freq"):
                np.testing.assert_array_equal(a[k], b[k], err_msg=name)
            assert math.isclose(a["attention_scaling"], b["attention_scaling"])


def test_docs_list_every_model_type_with_its_file():
    """docs/models.md names each supported model type with the transformers file it follows."""
    import pathlib

    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    for model_type, by in (*MODELS.items(), *CLASSES.items()):
        for family, record in by.items():
            assert f"| {model_type} | {family} | `{record.source}` |" in text, (model_type, family)
