"""RoPE tables against transformers 5.24's own functions and modules (GPT-NeoX, Llama,
GPT-J); references in tests/engine/rope_refs.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb as neox_apply
from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_apply
from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions, rotate_every_two

from posenc.engine.answer.pipeline import compute
from tests.engine.rope_refs import (
    CASES,
    POSITIONS,
    hf_inv_freq,
    hf_inv_rtol,
    hf_module_cos_sin,
    hf_tol,
    req,
    to_interleaved,
)
from tests.numeric import assert_close


@pytest.mark.parametrize("case", CASES)
def test_inv_freq_and_scaling_vs_transformers(case):
    spec = CASES[case]
    positions = [0, 5, 4095]
    out = compute("rope", req(spec, positions))
    hf_inv, hf_af = hf_inv_freq(spec, seq_len=max(positions) + 1)
    assert out["inv_freq"].dtype == np.float32
    assert out["inv_freq"].shape == hf_inv.shape
    rtol = hf_inv_rtol(spec, max(positions) + 1)
    assert_close(out["inv_freq"], hf_inv, atol=1e-30, rtol=rtol, what=f"{case} inv_freq")
    assert isinstance(out["attention_scaling"], float)
    assert out["attention_scaling"] == pytest.approx(hf_af, rel=1e-12, abs=0)


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
@pytest.mark.parametrize("case", CASES)
def test_cos_sin_vs_transformers_forward(case, layout):
    spec = CASES[case]
    out = compute("rope", req(spec, POSITIONS, layout=layout))
    hcos, hsin = hf_module_cos_sin(spec, POSITIONS)
    if layout == "interleaved":
        hcos, hsin = to_interleaved(hcos), to_interleaved(hsin)
    assert out["cos"].dtype == np.float32 and out["sin"].dtype == np.float32
    tol = hf_tol(POSITIONS, out["attention_scaling"])
    assert_close(out["cos"], hcos, atol=tol, what=f"{case} {layout} cos")
    assert_close(out["sin"], hsin, atol=tol, what=f"{case} {layout} sin")


@pytest.mark.parametrize("case", CASES)
def test_interleaved_is_half_split_permuted(case):
    spec = CASES[case]
    pos = [0, 7, 4096, 131072, 2**31 - 1]
    half = compute("rope", req(spec, pos, layout="half_split"))
    inter = compute("rope", req(spec, pos, layout="interleaved"))
    for name in ("cos", "sin"):
        h, i = half[name], inter[name]
        d = h.shape[1]
        np.testing.assert_array_equal(i[:, 0::2], h[:, : d // 2])
        np.testing.assert_array_equal(i[:, 1::2], h[:, d // 2 :])
        # half_split pairs (k, k + d/2) rotate together: the two halves are equal.
        np.testing.assert_array_equal(h[:, : d // 2], h[:, d // 2 :])
    np.testing.assert_array_equal(half["inv_freq"], inter["inv_freq"])


def test_gptj_create_sinusoidal_positions():
    # GPT-J 6B: head_dim 256, rotary_dim 64 (theta hard-coded 10000), interleaved pairs.
    spec = {"head_dim": 256, "partial_rotary_factor": 0.25, "layout": "interleaved"}
    pos = list(range(0, 2048, 7)) + [2047]
    out = compute("rope", req(spec, pos))
    table = create_sinusoidal_positions(2048, 64).double().numpy()[pos]
    sin_h, cos_h = table[:, :32], table[:, 32:]
    tol = hf_tol(pos, 1.0)
    for col in (0, 1):
        assert_close(out["cos"][:, col::2], cos_h, atol=tol, what=f"gptj cos col {col}")
        assert_close(out["sin"][:, col::2], sin_h, atol=tol, what=f"gptj sin col {col}")


def test_gptj_create_sinusoidal_positions_past_131072():
    spec = {"head_dim": 64, "partial_rotary_factor": 0.25, "layout": "interleaved"}  # rotary_dim 16
    pos = [0, 1, 65535, 131071, 131072, 150001, 200000]
    out = compute("rope", req(spec, pos))
    table = create_sinusoidal_positions(200001, 16)[pos].double().numpy()
    tol = hf_tol(pos, 1.0)
    assert_close(out["cos"][:, 0::2], table[:, 8:], atol=tol, what="gptj cos")
    assert_close(out["sin"][:, 1::2], table[:, :8], atol=tol, what="gptj sin")


def test_gptj_apply_rotary_with_our_interleaved_tables():
    """Rotating with our full-width interleaved tables (x·cos + rotate_every_two(x)·sin) equals
    GPT-J's apply_rotary_pos_emb with its own half-width table."""
    spec = {"head_dim": 256, "partial_rotary_factor": 0.25, "layout": "interleaved"}
    pos = [0, 1, 100, 2047]
    out = compute("rope", req(spec, pos))
    g = torch.Generator().manual_seed(7)
    x = torch.randn(1, len(pos), 3, 64, generator=g, dtype=torch.float64)  # [b, seq, heads, rot]
    table = create_sinusoidal_positions(2048, 64).double()[pos][None]
    want = gptj_apply(x, table[..., :32], table[..., 32:])
    cos = torch.from_numpy(out["cos"].astype(np.float64))[None, :, None, :]
    sin = torch.from_numpy(out["sin"].astype(np.float64))[None, :, None, :]
    got = x * cos + rotate_every_two(x) * sin
    tol = 8 * hf_tol(pos, 1.0)[None, :, None, :]  # |x| < ~4 per pair component
    assert_close(got.numpy(), want.numpy(), atol=tol, what="gptj rotation")


def test_neox_apply_rotary_with_our_half_split_tables():
    spec = CASES["default-partial-phi2"]
    pos = [0, 3, 999, 4095]
    out = compute("rope", req(spec, pos))
    hcos, hsin = hf_module_cos_sin(spec, pos)
    g = torch.Generator().manual_seed(11)
    q = torch.randn(1, 2, len(pos), 80, generator=g, dtype=torch.float64)  # [b, heads, seq, D]
    k = torch.randn(1, 2, len(pos), 80, generator=g, dtype=torch.float64)
    ours = neox_apply(
        q,
        k,
        torch.from_numpy(out["cos"].astype(np.float64))[None],
        torch.from_numpy(out["sin"].astype(np.float64))[None],
    )
    theirs = neox_apply(q, k, torch.from_numpy(hcos)[None], torch.from_numpy(hsin)[None])
    tol = 8 * hf_tol(pos, 1.0)[None, None, :, :]
    for a, b in zip(ours, theirs):
        assert_close(a.numpy(), b.numpy(), atol=tol, what="neox rotation")


# --------------------------------------------------------------------------- vs float64 math
