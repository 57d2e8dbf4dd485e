"""posenc.torch.DiffusersPosEmbed, the drop-in for the positional module of the diffusers
transformers whose pipeline hands them token ids (FluxPosEmbed and its copies): its ``(cos, sin)``
is the class's own module's (built from the class's config defaults as the zoo test builds it,
tests/engine/test_diffusers_zoo.py) for the ids the pipelines make, within the zoo's tolerance; a
small random-weight Flux runs on it; a class it does not stand for, and ids it cannot take, are
refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posenc.torch import DIFFUSERS_POS_EMBED, DiffusersPosEmbed
from tests.engine import test_diffusers_zoo as zoo  # noqa: E402  (diffusers' modules, as the zoo builds them)
from tests.numeric import assert_close
from tests.tools import hf_zoo

diffusers = zoo.diffusers
zoo.ATTR.setdefault("FluxTransformer2DModel", "pos_embed")  # vision.py's record: the zoo's cases lack it


def _pipeline_ids(k: int, h: int, w: int, text: int = 6) -> torch.Tensor:
    """The ids a Flux-like pipeline hands its transformer: the caption's all 0, then the image's
    (0, row, column) (Flux 2's fourth axis: a reference image's index), float32 [tokens, k]."""
    img = zoo._grid_ids(1, h, w)
    pid = np.concatenate([np.zeros((3, text), np.int64), img], axis=1)
    if k == 2:
        pid = pid[1:]
    if k == 4:
        pid = np.concatenate([pid, np.arange(pid.shape[1])[None] % 3], axis=0)
    return torch.tensor(pid.T, dtype=torch.float32)


@pytest.mark.parametrize("name", DIFFUSERS_POS_EMBED)
def test_forward_is_the_modules(name):
    model, module = zoo._built(name)
    drop = DiffusersPosEmbed(model)
    for h, w in ((4, 5), (7, 2), (16, 16)):
        ids = _pipeline_ids(drop.axes, h, w)
        want = module(ids)
        got = drop(ids)
        assert len(got) == 2 and all(g.dtype == torch.float32 for g in got), name
        tol = hf_zoo.tolerance(ids.numpy().max(axis=1), 1.0)  # each token's largest id
        for g, x, what in zip(got, want, ("cos", "sin")):
            assert g.shape == x.shape, (name, what, g.shape, x.shape)
            assert_close(g.double().numpy(), x.double().numpy(), atol=tol, what=f"{name} {h}x{w} {what}")


def test_a_flux_model_runs_on_it():
    torch.manual_seed(0)
    model = diffusers.FluxTransformer2DModel(
        patch_size=1,
        in_channels=8,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=32,
        pooled_projection_dim=16,
        axes_dims_rope=(4, 6, 6),
    ).eval()
    h, w, text = 6, 5, 7
    ids = _pipeline_ids(3, h, w, text)
    args = dict(
        hidden_states=torch.randn(1, h * w, 8),
        encoder_hidden_states=torch.randn(1, text, 32),
        pooled_projections=torch.randn(1, 16),
        timestep=torch.tensor([0.5]),
        img_ids=ids[text:],
        txt_ids=ids[:text],
    )
    with torch.no_grad():
        want = model(**args).sample
        model.pos_embed = DiffusersPosEmbed(model)
        got = model(**args).sample
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), float((got - want).abs().max())


def test_what_it_does_not_stand_for_is_refused():
    with pytest.raises(ValueError, match="stands for the positional module of FluxTransformer2DModel"):
        DiffusersPosEmbed({"_class_name": "WanTransformer3DModel"})
    drop = DiffusersPosEmbed({"_class_name": "FluxTransformer2DModel"})
    for ids in (torch.tensor([[0.0, 0.5, 1.0]]), torch.zeros(2, 4), torch.zeros(3)):
        with pytest.raises(ValueError, match=r"ids must be \[tokens, 3\] whole numbers"):
            drop(ids)
