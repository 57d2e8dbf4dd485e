"""RoPE tables against float64 math written from docs/reference.md (every dtype and layout), the
scaling constants, and the seq_len switch of longrope and dynamic.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from posenc.engine.answer.pipeline import compute
from tests.engine.rope_refs import (
    CASES,
    HIGH,
    POSITIONS,
    hf_inv_freq,
    hf_inv_rtol,
    hf_module_cos_sin,
    hf_style_cos_sin,
    hf_tol,
    ref_cos_sin64,
    ref_inv64,
    req,
    rope_exponents,
    to_interleaved,
)
from tests.numeric import FLOAT_DTYPES, angle_slack, assert_close, assert_within_ulp


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_against_float64_rounded_once(case, dtype, layout):
    """Within half an ulp of the float64 value (the promise: computed in float64, rounded once),
    give or take the float64 reference's own error (numeric.angle_slack)."""
    spec = CASES[case]
    pos = POSITIONS + HIGH
    out = compute("rope", req(spec, pos, dtype=dtype, layout=layout))
    inv64, alpha = ref_inv64(spec, max(pos) + 1)
    cos64, sin64, ang = ref_cos_sin64(inv64, alpha, pos)
    e, base = rope_exponents(spec, max(pos) + 1)
    slack = angle_slack(ang, np.concatenate([e, e])[None, :], base, alpha)
    if layout == "interleaved":
        cos64, sin64, slack = to_interleaved(cos64), to_interleaved(sin64), to_interleaved(slack)
    assert_within_ulp(out["cos"], cos64, dtype, slack=slack, what=f"{case} cos")
    assert_within_ulp(out["sin"], sin64, dtype, slack=slack, what=f"{case} sin")
    # inv_freq stays float32 whatever dtype: float64 frequencies rounded once.
    assert out["inv_freq"].dtype == np.float32
    assert_within_ulp(
        out["inv_freq"], inv64, "float32", slack=angle_slack(inv64, e, base), what=f"{case} inv_freq"
    )
    assert out["attention_scaling"] == pytest.approx(alpha, rel=1e-13)


def test_dtype_default_is_float32_and_storage_types():
    spec = CASES["yarn-partial"]
    a = compute("rope", req(spec, [0, 1, 2]))
    b = compute("rope", req(spec, [0, 1, 2], dtype="float32"))
    np.testing.assert_array_equal(a["cos"], b["cos"])
    assert compute("rope", req(spec, [0], dtype="float16"))["cos"].dtype == np.float16
    bf = compute("rope", req(spec, [0], dtype="bfloat16"))
    assert bf["cos"].dtype == np.uint16 and bf["inv_freq"].dtype == np.float32


# --------------------------------------------------------------------------- scaling constants


@pytest.mark.parametrize("factor,want", [(4.0, 1.1386294361119891), (32.0, 1.3465735902799727)])
def test_yarn_attention_scaling_constants(factor, want):
    spec = {
        "head_dim": 64,
        "max_position_embeddings": 4096,
        "rope_scaling": {"rope_type": "yarn", "factor": factor},
    }
    out = compute("rope", req(spec, [0]))
    assert out["attention_scaling"] == pytest.approx(want, rel=1e-15)
    # cos at p = 0 is the scaling itself, rounded once to float32
    assert out["cos"][0, 0] == np.float32(want)


def test_yarn_deepseek_equal_mscales_give_one():
    spec = {
        "head_dim": 64,
        "max_position_embeddings": 163840,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 40.0,
            "original_max_position_embeddings": 4096,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
    }
    assert compute("rope", req(spec, [0]))["attention_scaling"] == 1.0
    assert hf_inv_freq(spec)[1] == 1.0


def test_longrope_attention_scaling_from_M_over_O_at_every_length():
    # factor absent -> M/O = 32; sqrt(1 + ln 32 / ln 4096) = sqrt(1 + 5/12)
    spec = CASES["longrope-partial"]
    want = math.sqrt(17.0 / 12.0)
    short = compute("rope", req(spec, [0, 1]))
    long_ = compute("rope", req(spec, [0, 5000]))
    assert short["attention_scaling"] == pytest.approx(want, rel=1e-15)
    assert long_["attention_scaling"] == pytest.approx(want, rel=1e-15)
    assert short["cos"][0, 0] == np.float32(want)
    assert long_["cos"][0, 0] == np.float32(want)


# --------------------------------------------------------------------------- seq_len switching

LONGROPE = CASES["longrope-partial"]  # O = 4096 (top level)


@pytest.mark.parametrize(
    "positions,seq_len,long",
    [
        ([0, 1, 4095], None, False),  # seq_len 4096 = O -> short
        ([0, 1, 4096], None, True),  # seq_len 4097 > O -> long
        ([0, 1, 2], 4097, True),  # explicit seq_len picks long
        ([0, 10000], 100, False),  # a smaller explicit seq_len is allowed, picks short
        ([4096], 4096, False),
    ],
)
def test_longrope_short_long_switch(positions, seq_len, long):
    r = req(LONGROPE, positions) if seq_len is None else req(LONGROPE, positions, seq_len=seq_len)
    out = compute("rope", r)
    hf_inv, hf_af = hf_inv_freq(LONGROPE, seq_len=4097 if long else 4096)
    rtol = hf_inv_rtol(LONGROPE, 4097)
    assert_close(out["inv_freq"], hf_inv, atol=1e-30, rtol=rtol, what="longrope inv_freq")
    other, _ = hf_inv_freq(LONGROPE, seq_len=4096 if long else 4097)
    assert not np.allclose(out["inv_freq"], other, rtol=1e-3), "picked the wrong factor set"
    hcos, hsin = hf_style_cos_sin(hf_inv.astype(np.float32), positions, hf_af)
    tol = hf_tol(positions, hf_af)
    assert_close(out["cos"], hcos, atol=tol, what="longrope cos")
    assert_close(out["sin"], hsin, atol=tol, what="longrope sin")
    if seq_len is None:  # the module's own update agrees
        mcos, _ = hf_module_cos_sin(LONGROPE, positions)
        assert_close(out["cos"], mcos, atol=tol, what="longrope cos (module)")


DYNAMIC = CASES["dynamic-partial"]  # M = 4096, factor 2


@pytest.mark.parametrize(
    "positions,seq_len,eff",
    [
        ([0, 1, 100], None, 4096),  # below M: original frequencies
        ([0, 4095], None, 4096),
        ([0, 4096], None, 4097),  # just past M: rescaled
        ([3, 16383], None, 16384),
        ([0, 1, 2], 16384, 16384),  # explicit seq_len (stateless stand-in for a grown cache)
        ([0, 20000], 8192, 8192),  # smaller than max(position)+1 is allowed
    ],
)
def test_dynamic_seq_len(positions, seq_len, eff):
    r = req(DYNAMIC, positions) if seq_len is None else req(DYNAMIC, positions, seq_len=seq_len)
    out = compute("rope", r)
    hf_inv, _ = hf_inv_freq(DYNAMIC, seq_len=eff)
    rtol = hf_inv_rtol(DYNAMIC, eff)
    assert_close(out["inv_freq"], hf_inv, atol=1e-30, rtol=rtol, what="dynamic inv_freq")
    inv64, _ = ref_inv64(DYNAMIC, eff)
    e, base = rope_exponents(DYNAMIC, eff)
    assert_within_ulp(
        out["inv_freq"], inv64, "float32", slack=angle_slack(inv64, e, base), what="dynamic inv64"
    )
    hcos, hsin = hf_style_cos_sin(hf_inv.astype(np.float32), positions, 1.0)
    tol = hf_tol(positions, 1.0)
    assert_close(out["cos"], hcos, atol=tol, what="dynamic cos")
    assert_close(out["sin"], hsin, atol=tol, what="dynamic sin")


# --------------------------------------------------------------------------- request forms
