"""posenc.torch.RotaryEmbedding as the Qwen2-VL / Qwen2.5-VL / Qwen3-VL text models' rotary
embedding: the rotary class's (cos, sin) for [3, B, N] and [B, N] position ids within its float32
error, and small random-weight text models built from their configs give the same logits with it
swapped in (image-like (t, h, w) positions mixed with text positions, past the module's table too)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLRotaryEmbedding, Qwen2_5_VLTextModel
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding, Qwen2VLTextModel
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextModel, Qwen3VLTextRotaryEmbedding

from posenc.engine.reader.client import Client
from posenc.torch import RotaryEmbedding
from tests.engine.rope_refs import hf_tol
from tests.numeric import assert_close

TINY = dict(
    hidden_size=64,
    num_attention_heads=2,
    num_key_value_heads=1,
    num_hidden_layers=2,
    intermediate_size=64,
    vocab_size=96,
    max_position_embeddings=8192,
    initializer_range=0.2,
)
QWEN = {
    "qwen2_vl": (transformers.Qwen2VLTextConfig, Qwen2VLRotaryEmbedding, Qwen2VLTextModel, [4, 6, 6]),
    "qwen2_5_vl": (
        transformers.Qwen2_5_VLTextConfig,
        Qwen2_5_VLRotaryEmbedding,
        Qwen2_5_VLTextModel,
        [8, 4, 4],
    ),
    "qwen3_vl": (transformers.Qwen3VLTextConfig, Qwen3VLTextRotaryEmbedding, Qwen3VLTextModel, [6, 5, 5]),
}


def _config(name, theta=1e4):
    cls, _, _, section = QWEN[name]
    extra = {"head_dim": 32} if name == "qwen3_vl" else {}
    return cls(
        **TINY,
        **extra,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": theta,
            "mrope_section": section,
            **({"mrope_interleaved": True} if name == "qwen3_vl" else {}),
        },
    )


def _position_ids(rng, batch=2, n=40, start=0):
    """[3, B, N]: text tokens (t = h = w), a (t, h, w) grid, then text again."""
    out = []
    for _ in range(batch):
        t, h, w = np.meshgrid(np.arange(2), np.arange(4), np.arange(4), indexing="ij")
        base = start + int(rng.integers(0, 50))
        grid = np.stack([t.ravel(), h.ravel(), w.ravel()]) + base + 8
        text = np.arange(8) + base
        tail = np.arange(n - 8 - grid.shape[1]) + int(grid.max()) + 1
        out.append(np.concatenate([np.repeat(text[None], 3, 0), grid, np.repeat(tail[None], 3, 0)], axis=1))
    return torch.from_numpy(np.stack(out, axis=1))


def rotary(config):
    return RotaryEmbedding(config, client=Client(namespace="ptest-none"))


@pytest.mark.parametrize("name", QWEN)
def test_cos_sin_are_the_rotary_class(name, rng):
    config = _config(name)
    ours, theirs = rotary(config), QWEN[name][1](config)
    x = torch.zeros(1, dtype=torch.float32)
    for pos in (
        _position_ids(rng),
        _position_ids(rng, start=6000),
        _position_ids(rng)[0],
    ):  # [3,B,N] and [B,N]
        got, want = ours(x, pos), theirs(x, pos)
        p = (pos if pos.ndim == 2 else pos.max(0).values).numpy()
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            for b in range(g.shape[0]):
                assert_close(g[b].numpy(), w[b].numpy(), hf_tol(p[b], 1.0))
    for g, w in zip(
        ours(x.to(torch.bfloat16), _position_ids(rng)), theirs(x.to(torch.bfloat16), _position_ids(rng))
    ):
        assert g.dtype == w.dtype == torch.bfloat16


@pytest.mark.parametrize("name", QWEN)
def test_swapped_into_the_text_model_logits_stay(name, rng):
    """The same hidden states, within transformers' own float32 angle error: 1e-4 near the start;
    at positions past 4090 (across the module's 4096-row local table) its angles are off by about
    2.5e-7·p = 1e-3 rad, which the random weights carry to the last hidden state."""
    torch.manual_seed(0)
    config = _config(name)
    model = QWEN[name][2](config).eval()
    ids = torch.randint(0, 96, (2, 40), generator=torch.Generator().manual_seed(1))
    for start, tol in ((0, 1e-4), (4090, 2e-3)):
        pos = _position_ids(rng, start=start)
        with torch.no_grad():
            model.rotary_emb = QWEN[name][1](config)
            want = model(input_ids=ids, position_ids=pos).last_hidden_state
            model.rotary_emb = rotary(config)
            got = model(input_ids=ids, position_ids=pos).last_hidden_state
            assert got.shape == want.shape and (got - want).abs().max() <= tol, (
                (got - want).abs().max(),
                start,
            )
            model.rotary_emb = rotary(_config(name, theta=50.0))  # the test can fail: another θ moves them
            assert (model(input_ids=ids, position_ids=pos).last_hidden_state - want).abs().max() > 10 * tol
