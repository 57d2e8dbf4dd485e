"""hf_config for the vision, video and multimodal models, each held to what the model itself
builds: transformers' Qwen2-VL / Qwen2.5-VL / Qwen3-VL rotary classes (from composite and flat,
published-style configs) and ViTMAE's embeddings; diffusers' FluxTransformer2DModel (its
FluxPosEmbed), SD3Transformer2DModel (its PatchEmbed table) and CogVideoXTransformer3DModel (its
CogVideoXPatchEmbed table), built small from their configs. Also the records' defaults against
the classes, and the refusals of configs whose positions are not of the asked family."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest
import torch
from diffusers import CogVideoXTransformer3DModel, FluxTransformer2DModel, SD3Transformer2DModel
from transformers import (
    Qwen2_5_VLConfig,
    Qwen2_5_VLTextConfig,
    Qwen2VLConfig,
    Qwen2VLTextConfig,
    Qwen3VLConfig,
    Qwen3VLTextConfig,
    ViTMAEConfig,
    ViTMAEModel,
)
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLRotaryEmbedding
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding

from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from posenc.engine.models import registry
from tests.engine.rope_refs import hf_tol
from tests.numeric import assert_close, spec_error

QWEN = [
    ("qwen2_vl", Qwen2VLConfig, Qwen2VLTextConfig, Qwen2VLRotaryEmbedding),
    ("qwen2_5_vl", Qwen2_5_VLConfig, Qwen2_5_VLTextConfig, Qwen2_5_VLRotaryEmbedding),
    ("qwen3_vl", Qwen3VLConfig, Qwen3VLTextConfig, Qwen3VLTextRotaryEmbedding),
]


def _ids(rng, n=24, hi=1 << 16):
    ids = rng.integers(0, hi, (3, n))
    ids[:, :4] = ids[0, :4]  # text tokens
    return ids


@pytest.mark.parametrize("name,composite,text_cls,rotary", QWEN, ids=[q[0] for q in QWEN])
@pytest.mark.parametrize("section", [None, [8, 12, 12]])
def test_qwen_vl_configs_against_their_rotary_class(name, composite, text_cls, rotary, section, rng):
    rp = {"rope_type": "default", "rope_theta": 250000.0, **({"mrope_section": section} if section else {})}
    cfg = composite(
        text_config={
            "hidden_size": 512,
            "num_attention_heads": 4 if section is None else 8,
            "rope_parameters": rp,
            **({"head_dim": 128 if section is None else 64} if name == "qwen3_vl" else {}),
        }
    )
    module = rotary(cfg.text_config)
    ids = _ids(rng)
    cos, sin = module(torch.zeros(1), torch.from_numpy(ids[:, None, :]))
    for raw in (json.loads(cfg.to_json_string()), json.loads(cfg.text_config.to_json_string())):
        out = compute("rope", {"hf_config": raw, "position_ids": ids.tolist()})
        assert_close(out["cos"], cos[0].numpy(), hf_tol(ids.max(axis=0), 1.0), what=f"{name} cos")
        assert_close(out["sin"], sin[0].numpy(), hf_tol(ids.max(axis=0), 1.0), what=f"{name} sin")
        assert out["spec"]["mrope_section"] == list(module.mrope_section)


def test_published_flat_qwen2_vl_config(rng):
    """Qwen2-VL-7B-Instruct's config.json as published: flat, "type": "mrope"."""
    raw = {
        "model_type": "qwen2_vl",
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "vision_config": {"depth": 32},
    }
    module = Qwen2VLRotaryEmbedding(Qwen2VLConfig(**raw).text_config)
    ids = _ids(rng)
    cos, _ = module(torch.zeros(1), torch.from_numpy(ids[:, None, :]))
    out = compute("rope", {"hf_config": raw, "position_ids": ids.tolist()})
    assert_close(out["cos"], cos[0].numpy(), hf_tol(ids.max(axis=0), 1.0))


def test_vit_mae_config():
    cfg = ViTMAEConfig(
        hidden_size=96,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=32,
        image_size=64,
        patch_size=16,
    )
    emb = ViTMAEModel(cfg).embeddings
    emb.patch_embeddings.projection._is_hf_initialized = False  # transformers 5 marks it done
    emb.initialize_weights()
    out = compute("sinusoidal-grid", {"hf_config": json.loads(cfg.to_json_string())})["encoding"]
    assert_close(out, emb.position_embeddings[0].detach().numpy(), 2e-6)


def _diffusers_json(model) -> dict:
    return json.loads(model.to_json_string())


def test_flux_config_against_its_pos_embed(rng):
    model = FluxTransformer2DModel(
        num_layers=0,
        num_single_layers=0,
        attention_head_dim=32,
        num_attention_heads=1,
        axes_dims_rope=(8, 12, 12),
        joint_attention_dim=8,
        pooled_projection_dim=8,
        in_channels=4,
    )
    ids = _ids(rng, hi=256)
    cos, sin = model.pos_embed(torch.from_numpy(ids.T.copy()))
    out = compute("rope", {"hf_config": _diffusers_json(model), "position_ids": ids.tolist()})
    assert_close(out["cos"], cos.numpy(), 1e-7)
    assert_close(out["sin"], sin.numpy(), 1e-7)


def test_sd3_config_against_its_patch_embed():
    model = SD3Transformer2DModel(
        sample_size=32,
        patch_size=2,
        in_channels=4,
        num_layers=0,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=8,
        caption_projection_dim=32,
        pooled_projection_dim=8,
        out_channels=4,
        pos_embed_max_size=24,
    )
    out = compute("sinusoidal-grid", {"hf_config": _diffusers_json(model)})["encoding"]
    assert_close(out, model.pos_embed.pos_embed[0].numpy(), 1e-6 + 1.2e-7 * 24)


def test_cogvideox_config_against_its_patch_embed():
    model = CogVideoXTransformer3DModel(
        num_attention_heads=2,
        attention_head_dim=32,
        in_channels=4,
        out_channels=4,
        time_embed_dim=8,
        text_embed_dim=8,
        num_layers=0,
        sample_width=24,
        sample_height=16,
        sample_frames=9,
        max_text_seq_length=7,
    )
    out = compute("sinusoidal-grid", {"hf_config": _diffusers_json(model)})["encoding"]
    assert_close(out, model.patch_embed.pos_embedding[0].numpy(), 1e-6 + 1.2e-7 * 12)


@pytest.mark.parametrize("cls", [FluxTransformer2DModel, SD3Transformer2DModel, CogVideoXTransformer3DModel])
def test_diffusers_defaults_are_the_classes(cls):
    (record,) = registry.CLASSES[cls.__name__].values()
    init = inspect.signature(cls.__init__).parameters
    for k, v in record.defaults.items():
        want = init[k].default
        assert (list(want) if isinstance(want, tuple) else want) == v, k


@pytest.mark.parametrize("name,composite,text_cls,rotary", QWEN, ids=[q[0] for q in QWEN])
def test_qwen_defaults_are_the_classes(name, composite, text_cls, rotary):
    record, text = registry.MODELS[name]["rope"], text_cls()
    for k, v in record.defaults.items():
        assert getattr(text, k) == v, k
    assert text.rope_parameters["rope_theta"] == record.default_theta
    module = rotary(text_cls(rope_parameters={"rope_type": "default", "rope_theta": 1e4}))
    assert list(module.mrope_section) == list(record.section_default)


def test_vit_mae_defaults_are_the_class():
    c = ViTMAEConfig()
    for k, v in registry.MODELS["vit_mae"]["sinusoidal-grid"].defaults.items():
        assert getattr(c, k) == v, k


@pytest.mark.parametrize(
    "family,cfg,loc",
    [
        (
            "sinusoidal-grid",
            {"_class_name": "CogVideoXTransformer3DModel", "use_rotary_positional_embeddings": True},
            ("hf_config", "use_rotary_positional_embeddings"),
        ),
        (
            "sinusoidal-grid",
            {"_class_name": "CogVideoXTransformer3DModel", "use_learned_positional_embeddings": True},
            ("hf_config", "use_learned_positional_embeddings"),
        ),
        ("sinusoidal-grid", {"_class_name": "FluxTransformer2DModel"}, ("hf_config", "_class_name")),
        ("rope", {"_class_name": "SD3Transformer2DModel"}, ("hf_config", "_class_name")),
        ("rope", {"_class_name": "UNet2DConditionModel"}, ("hf_config", "_class_name")),
        ("sinusoidal-grid", {"model_type": "qwen2_vl"}, ("hf_config", "model_type")),
        ("rope", {"model_type": "vit_mae"}, ("hf_config", "model_type")),
        (
            "rope",
            {
                "model_type": "qwen2_vl",
                "text_config": {
                    "hidden_size": 256,
                    "num_attention_heads": 2,
                    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 23]},
                },
            },
            ("hf_config", "text_config", "rope_scaling", "mrope_section"),
        ),
        (
            "rope",
            {"_class_name": "FluxTransformer2DModel", "axes_dims_rope": [16, 56, 50]},
            ("hf_config", "axes_dims_rope"),
        ),
    ],
)
def test_refusals_name_the_key(family, cfg, loc):
    body = {"hf_config": cfg, **({"position_ids": [[0], [0], [0]]} if family == "rope" else {})}
    with pytest.raises(SpecError) as e:
        compute(family, body)
    assert spec_error(e) == loc


@pytest.mark.parametrize(
    "family,cfg,sel",
    [
        (
            "rope",
            {"model_type": "qwen3_vl", "text_config": {"hidden_size": 512, "num_attention_heads": 4}},
            {"position_ids": [[0, 5, 7], [0, 6, 1], [0, 9, 2]]},
        ),
        ("rope", {"_class_name": "FluxTransformer2DModel"}, {"position_ids": [[0, 0], [3, 1], [2, 9]]}),
        (
            "sinusoidal-grid",
            {"_class_name": "CogVideoXTransformer3DModel", "sample_frames": 5},
            {"positions": [0, 300, 2925]},
        ),
        ("sinusoidal-grid", {"model_type": "vit_mae"}, {"positions": [0, 1, 196]}),
    ],
)
def test_the_spec_shown_gives_the_same_answer(family, cfg, sel):
    a = compute(family, {"hf_config": cfg, **sel})
    b = compute(family, {**a["spec"], **sel})
    assert "spec" not in b
    for k, v in b.items():
        np.testing.assert_array_equal(a[k], v)
