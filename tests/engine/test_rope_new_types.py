"""The rope types transformers 5.24 has beyond the original six: ``proportional`` (Gemma 4's
full-attention layers) and Phi-3's legacy spelling ``su`` of longrope, against transformers'
own ``ROPE_INIT_FUNCTIONS`` and rotary embedding forward (docs/reference.md tolerances:
inv_freq rtol 2e-7, cos/sin 1e-6 + 2.5e-7·p)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, Phi3Config
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from tests.numeric import assert_close

POSITIONS = [0, 1, 2, 17, 255, 4095, 4096, 4097, 65535, 131072]


def _hf_forward(module, positions):
    with torch.no_grad():
        cos, sin = module(torch.zeros(1, dtype=torch.float32), torch.tensor([positions]))
    return cos[0].double().numpy(), sin[0].double().numpy()


def _tol(positions, scaling=1.0):
    return (1e-6 + 2.5e-7 * np.asarray(positions, dtype=np.float64)[:, None]) * max(1.0, scaling)


@pytest.mark.parametrize(
    "head_dim,prf,theta,factor",
    [
        (256, 0.25, 1e6, None),  # Gemma 4's full-attention entry
        (128, 0.5, 10000.0, 2.0),  # with the optional factor
        (64, 1.0, 10000.0, None),  # nothing padded: the default frequencies
        (96, 0.3, 5e5, 8.0),  # int(0.3 * 96 // 2) = 14 of 48 angles rotate
    ],
)
def test_proportional_vs_transformers(head_dim, prf, theta, factor):
    rp = {"rope_type": "proportional", "rope_theta": theta, "partial_rotary_factor": prf}
    if factor is not None:
        rp["factor"] = factor
    cfg = LlamaConfig(
        hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim, rope_parameters=dict(rp)
    )
    want_inv, want_att = ROPE_INIT_FUNCTIONS["proportional"](cfg)
    got = compute("rope", {"head_dim": head_dim, "rope_parameters": rp, "positions": POSITIONS})
    assert got["cos"].shape == (len(POSITIONS), head_dim)  # always head_dim wide
    assert got["attention_scaling"] == want_att == 1.0
    want_inv = want_inv.double().numpy()
    np.testing.assert_array_equal(got["inv_freq"] == 0, want_inv == 0)
    assert_close(got["inv_freq"], want_inv, atol=0, rtol=2e-7, what="inv_freq")
    cos, sin = _hf_forward(LlamaRotaryEmbedding(cfg), POSITIONS)
    assert_close(got["cos"], cos, atol=_tol(POSITIONS), what="cos")
    assert_close(got["sin"], sin, atol=_tol(POSITIONS), what="sin")
    # the pairs that do not rotate are exactly cos 1, sin 0
    zero = np.concatenate([want_inv == 0, want_inv == 0])
    assert (got["cos"][:, zero] == 1).all() and (got["sin"][:, zero] == 0).all()


def test_proportional_table_identity_includes_the_factor():
    """Same head_dim and theta, different partial_rotary_factor: different numbers, so the
    stored tables must differ too; the canonical spec parses back to itself."""
    from posenc.engine.answer.pipeline import parse

    a = parse(
        "rope",
        {
            "head_dim": 64,
            "rope_parameters": {"rope_type": "proportional", "partial_rotary_factor": 0.25},
            "positions": [1],
        },
    )
    b = parse(
        "rope",
        {
            "head_dim": 64,
            "rope_parameters": {"rope_type": "proportional", "partial_rotary_factor": 0.5},
            "positions": [1],
        },
    )
    assert a.table.key != b.table.key
    from posenc.engine.tables import TableDef

    assert TableDef.from_key(a.table.key, a.table.length).key == a.table.key


def test_proportional_that_rotates_nothing_is_refused():
    with pytest.raises(SpecError) as e:
        compute(
            "rope",
            {
                "head_dim": 8,
                "rope_parameters": {"rope_type": "proportional", "partial_rotary_factor": 0.1},
                "positions": [1],
            },
        )
    assert e.value.loc == ("partial_rotary_factor",)


def _phi3_scaling(rope_type, n):
    return {
        "type": rope_type,
        "short_factor": [1.0 + k / 64 for k in range(n)],
        "long_factor": [1.0 + k / 8 for k in range(n)],
        "original_max_position_embeddings": 4096,
    }


@pytest.mark.parametrize("positions", [[0, 1, 4095], [0, 4096, 9000]])  # short and long factors
def test_su_is_longrope_vs_phi3(positions):
    """Phi3Config renames "su" to longrope; posenc's registry takes "su" as the same type."""
    head_dim = 96
    scaling = _phi3_scaling("su", head_dim // 2)
    cfg = Phi3Config(
        hidden_size=2 * head_dim,
        num_attention_heads=2,
        max_position_embeddings=131072,
        original_max_position_embeddings=4096,
        rope_scaling=dict(scaling),
    )
    cos, sin = _hf_forward(Phi3RotaryEmbedding(cfg), positions)
    body = {
        "head_dim": head_dim,
        "max_position_embeddings": 131072,
        "rope_scaling": scaling,
        "positions": positions,
    }
    got = compute("rope", body)
    scale = got["attention_scaling"]
    assert scale == pytest.approx(Phi3RotaryEmbedding(cfg).attention_scaling, rel=1e-12)
    assert_close(got["cos"], cos, atol=_tol(positions, scale), what="cos")
    assert_close(got["sin"], sin, atol=_tol(positions, scale), what="sin")
    same = compute("rope", {**body, "rope_scaling": {**scaling, "type": "longrope"}})
    for k in ("cos", "sin", "inv_freq"):
        np.testing.assert_array_equal(got[k], same[k])


def test_su_shares_longropes_tables_and_canonical_name():
    from posenc.engine.answer.pipeline import parse

    body = {"head_dim": 64, "max_position_embeddings": 8192, "positions": [1]}
    su = parse("rope", {**body, "rope_scaling": _phi3_scaling("su", 32)})
    lr = parse("rope", {**body, "rope_scaling": _phi3_scaling("longrope", 32)})
    assert su.spec == lr.spec and su.spec.rope_type == "longrope"
    assert su.table.key == lr.table.key
