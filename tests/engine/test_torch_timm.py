"""posenc.torch.TimmRope, the drop-in for a timm ViT's rope module: its ``get_embed`` is timm's own
module's (built from the registered model's arguments, tests/engine/test_timm_zoo.py) for each
family of modules, at the module's grid and others, within the zoo's tolerance; a model runs on it;
a model posenc does not read is refused when the module is made."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posenc.engine.core.errors import SpecError
from posenc.torch import TimmRope
from tests.engine import test_timm_zoo as zoo  # noqa: E402  (timm's modules, built as the zoo test builds them)
from tests.numeric import assert_close
from tests.tools import hf_zoo

timm = zoo.timm

# one model per reading: EVA's rescaled grid, PE's offset xy grid, the vit_*_rope xy grid, DINOv3's
# centred grid, the Qwen3 and DeepSeek ViTs' half layout
NAMES = [
    "eva02_base_patch14_448",
    "vit_pe_core_base_patch16_224",
    "vit_base_patch16_rope_224",
    "vit_base_patch16_dinov3",
    "qwen3_vit_88m",
    "deepseek_vit_412m",
]


@pytest.mark.parametrize("name", NAMES)
def test_get_embed_is_the_modules(name):
    feat = zoo.MODELS[name]["args"].get("feat_shape")
    rope = TimmRope(name, feat_shape=feat)
    for h, w in ([tuple(feat)] if feat else []) + [(5, 9), (12, 3)]:
        cos, sin, angle = zoo.timm_answer(name, h, w)
        got = rope.get_embed([h, w]).numpy()
        assert got.dtype == np.float32 and got.shape == (h * w, 2 * cos.shape[1]), name
        tol = hf_zoo.tolerance(angle, 1.0)
        assert_close(got, np.concatenate([sin, cos], axis=1), atol=tol, what=name)
    if feat:  # timm's cached modules answer their feat_shape when no shape is given
        assert torch.equal(rope.get_embed(), rope.get_embed(feat))
        rope.update_feat_shape([5, 9])
        assert torch.equal(rope.get_embed(), rope.get_embed([5, 9]))


def test_a_model_runs_on_it():
    torch.manual_seed(0)
    model = timm.create_model("eva02_tiny_patch14_224", pretrained=False, num_classes=0).eval()
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        want = model(x)
        model.rope = TimmRope("eva02_tiny_patch14_224", feat_shape=model.rope.feat_shape)
        got = model(x)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), float((got - want).abs().max())


def test_a_model_posenc_does_not_read_is_refused_when_made():
    with pytest.raises(SpecError) as e:
        TimmRope("vit_base_patch16_rope_mixed_224", feat_shape=[14, 14])
    assert e.value.loc == ("hf_config", "architecture") and "learns its frequencies" in e.value.msg
    with pytest.raises(ValueError, match="needs a shape"):
        TimmRope("vit_base_patch16_dinov3").get_embed()
