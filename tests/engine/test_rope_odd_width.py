"""Odd rotary widths (GLM-4 MoE's int(128 · 0.165...) = 21, Qwen3-Omni's whole head of 73 by its
defaults, hidden_size 2048 over 28 heads): transformers takes
ceil(w/2) frequencies θ^(−2k/w) (``torch.arange(0, w, 2) / w``) and hands attention cos/sin of
2·ceil(w/2) columns, which ``apply_rotary_pos_emb`` rotates (``rotary_dim = cos.shape[-1]``).
posenc answers the same: against float64 math written here, against transformers 5.25's own
rotary class for every rope type that takes an odd width, stored rows equal to computed ones, and
the types whose transformers functions fail on an odd width refused, naming the field."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import Glm4MoeConfig
from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeRotaryEmbedding

from posenc.engine.answer import pipeline
from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from tests.engine.rope_refs import hf_tol
from tests.numeric import assert_close, spec_error
from tests.service.shortcut.test_templates_in_memory import view_of

POSITIONS = [0, 1, 2, 17, 1000, 4095, 4096, 32768, 131071]


@pytest.mark.parametrize(
    "head_dim,prf,theta", [(128, 21 / 128, 10000.0), (128, 73 / 128, 1e6), (8, 0.375, 500.0), (73, 1.0, 1e6)]
)
@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
def test_odd_width_against_float64(head_dim, prf, theta, layout):
    w = int(head_dim * prf)
    assert w % 2
    out = compute(
        "rope",
        {
            "head_dim": head_dim,
            "partial_rotary_factor": prf,
            "rope_theta": theta,
            "layout": layout,
            "positions": POSITIONS,
        },
    )
    inv = np.array([theta ** (-k / w) for k in range(0, w, 2)])  # ceil(w/2) of them
    ang = np.array(POSITIONS, dtype=np.float64)[:, None] * inv[None, :]
    cols = np.concatenate([inv, inv]) if layout == "half_split" else np.repeat(inv, 2)
    assert out["cos"].shape == (len(POSITIONS), w + 1) and cols.shape == (w + 1,)
    full = np.concatenate([ang, ang], 1) if layout == "half_split" else np.repeat(ang, 2, 1)
    # float32 rounding of exact values (half an ulp of 1) and float64 angle error at these positions
    assert_close(out["cos"], np.cos(full), 1.2e-7, what="cos")
    assert_close(out["sin"], np.sin(full), 1.2e-7, what="sin")
    np.testing.assert_allclose(out["inv_freq"], inv.astype(np.float32), rtol=0)


SCALED = {
    "default": {},
    "linear": {"factor": 4.0},
    "dynamic": {"factor": 2.0},
    "llama3": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}


@pytest.mark.parametrize("rope_type", SCALED)
def test_odd_width_against_transformers(rope_type):
    """Glm4MoeRotaryEmbedding on GLM-4 MoE's odd width (21), each type through transformers' own
    function, against posenc from the spec fields and from the config."""
    rp = {
        "rope_type": rope_type,
        "rope_theta": 10000.0,
        "partial_rotary_factor": 21 / 128,
        **SCALED[rope_type],
    }
    conf = Glm4MoeConfig(head_dim=128, max_position_embeddings=131072 * 2, rope_parameters=rp)
    module = Glm4MoeRotaryEmbedding(conf)
    with torch.no_grad():
        cos, sin = (t[0].double().numpy() for t in module(torch.zeros(1), torch.tensor([POSITIONS])))
    assert cos.shape == (len(POSITIONS), 22)
    spec = {"head_dim": 128, "max_position_embeddings": 131072 * 2, "rope_parameters": rp}
    tol = hf_tol(POSITIONS, module.attention_scaling)
    for what, body in (("spec", spec), ("hf_config", {"hf_config": conf.to_dict()})):
        out = compute("rope", {**body, "positions": POSITIONS})
        assert_close(out["cos"], cos, tol, what=f"{rope_type} {what} cos")
        assert_close(out["sin"], sin, tol, what=f"{rope_type} {what} sin")
        # transformers computes them in float32 (a few ulps); a wrong exponent is off by far more
        np.testing.assert_allclose(out["inv_freq"], module.inv_freq.numpy(), rtol=1e-6)


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
def test_odd_width_rows_served_equal_computed(layout, rng):
    body = {"head_dim": 128, "partial_rotary_factor": 21 / 128, "layout": layout}
    pos = [int(p) for p in rng.integers(0, 4096, 30)] + [4095, 4096, 100000]
    req = pipeline.parse("rope", {**body, "positions": pos}, 4096)
    assert req.table is not None
    served, computed = pipeline.arrays(req, view_of(req.table)), pipeline.arrays(req)
    for name in ("cos", "sin", "inv_freq"):
        np.testing.assert_array_equal(served[name], computed[name])
    # width 21 and width 22 are other frequencies (exponents over 21, over 22): other tables
    even = pipeline.parse("rope", {"head_dim": 22, "positions": pos}, 4096)
    assert even.table.key != req.table.key


@pytest.mark.parametrize(
    "body,loc",
    [
        (
            {
                "head_dim": 128,
                "partial_rotary_factor": 21 / 128,
                "max_position_embeddings": 4096,
                "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
            },
            ("partial_rotary_factor",),
        ),
        (
            {
                "head_dim": 128,
                "partial_rotary_factor": 21 / 128,
                "max_position_embeddings": 4096,
                "rope_scaling": {
                    "rope_type": "longrope",
                    "short_factor": [1.0] * 10,
                    "long_factor": [1.0] * 10,
                },
            },
            ("partial_rotary_factor",),
        ),
        ({"head_dim": 128, "partial_rotary_factor": 1 / 128}, ("partial_rotary_factor",)),
        (
            {
                "head_dim": 21,
                "max_position_embeddings": 4096,
                "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
            },
            ("head_dim",),
        ),
    ],
    ids=["yarn", "longrope", "width-1", "yarn-whole-head"],
)
def test_odd_widths_transformers_cannot_take_are_refused(body, loc):
    with pytest.raises(SpecError) as e:
        compute("rope", {**body, "positions": [0]})
    assert spec_error(e) == loc
