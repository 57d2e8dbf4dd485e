"""RoPE request forms (legacy keys, rope_parameters, overrides, selections) and rotation
properties of the returned tables.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gptj.modeling_gptj import rotate_every_two

from posenc.engine.answer.pipeline import compute
from tests.engine.rope_refs import CASES, _longrope_factors, hf_inv_freq, hf_inv_rtol, req
from tests.numeric import assert_close


def _same(a, b):
    for name in ("cos", "sin", "inv_freq"):
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert a["attention_scaling"] == b["attention_scaling"]


def test_legacy_type_key_and_rope_parameters_forms():
    pos = [0, 1, 4096, 131072]
    base = {"head_dim": 64, "rope_theta": 500000.0, "partial_rotary_factor": 0.5}
    want = compute("rope", req(base, pos, rope_scaling={"rope_type": "linear", "factor": 2.0}))
    _same(want, compute("rope", req(base, pos, rope_scaling={"type": "linear", "factor": 2.0})))
    _same(
        want,
        compute(
            "rope", req(base, pos, rope_scaling={"type": "linear", "rope_type": "linear", "factor": 2.0})
        ),
    )
    _same(want, compute("rope", req(base, pos, rope_parameters={"rope_type": "linear", "factor": 2.0})))
    # transformers 5's rope_parameters may carry rope_theta and partial_rotary_factor itself
    _same(
        want,
        compute(
            "rope",
            req(
                {"head_dim": 64},
                pos,
                rope_parameters={
                    "rope_type": "linear",
                    "factor": 2.0,
                    "rope_theta": 500000.0,
                    "partial_rotary_factor": 0.5,
                },
            ),
        ),
    )
    # the same value at both places is not a conflict
    _same(
        want,
        compute(
            "rope",
            req(base, pos, rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 500000.0}),
        ),
    )
    # and transformers reads the legacy form the same way
    cfg = LlamaConfig(
        hidden_size=128,
        num_attention_heads=2,
        head_dim=64,
        rope_theta=500000.0,
        partial_rotary_factor=0.5,
        rope_scaling={"type": "linear", "factor": 2.0},
    )
    inv, _ = ROPE_INIT_FUNCTIONS["linear"](cfg, None)
    rtol = hf_inv_rtol(req(base, pos, rope_scaling={"rope_type": "linear", "factor": 2.0}), 1)
    assert_close(want["inv_freq"], inv.double().numpy(), atol=1e-30, rtol=rtol, what="legacy inv_freq")


def test_absent_rope_type_and_default_block_mean_default():
    pos = [0, 9, 131072]
    want = compute("rope", req({"head_dim": 64}, pos))
    _same(want, compute("rope", req({"head_dim": 64, "rope_scaling": {"rope_type": "default"}}, pos)))
    _same(want, compute("rope", req({"head_dim": 64, "rope_parameters": {"rope_theta": 10000.0}}, pos)))
    _same(want, compute("rope", req({"head_dim": 64, "rope_scaling": None, "rope_theta": 10000}, pos)))


@pytest.mark.parametrize("rope_type", ["longrope", "yarn"])
def test_top_level_original_max_position_embeddings_overrides(rope_type):
    inner = {"rope_type": rope_type, "original_max_position_embeddings": 2048}
    if rope_type == "longrope":
        inner.update(short_factor=_longrope_factors(32), long_factor=_longrope_factors(32, long=True))
    else:
        inner.update(factor=8.0)
    spec = {
        "head_dim": 64,
        "max_position_embeddings": 32768,
        "rope_scaling": inner,
        "original_max_position_embeddings": 4096,
    }
    pos = [0, 3000, 4095]  # long for O = 2048, short for O = 4096
    out = compute("rope", req(spec, pos))
    plain = copy.deepcopy(spec)
    del plain["original_max_position_embeddings"]
    plain["rope_scaling"]["original_max_position_embeddings"] = 4096
    _same(out, compute("rope", req(plain, pos)))
    hf_inv, hf_af = hf_inv_freq(spec, seq_len=max(pos) + 1)
    rtol = hf_inv_rtol(spec, max(pos) + 1)
    assert_close(out["inv_freq"], hf_inv, atol=1e-30, rtol=rtol, what="override inv_freq")
    assert out["attention_scaling"] == pytest.approx(hf_af, rel=1e-12)
    ignored = copy.deepcopy(plain)
    ignored["rope_scaling"]["original_max_position_embeddings"] = 2048
    other = compute("rope", req(ignored, pos))
    assert (
        not np.array_equal(other["inv_freq"], out["inv_freq"])
        or other["attention_scaling"] != out["attention_scaling"]
    )


def test_shapes_order_repeats_and_range_selection():
    spec = CASES["default-partial-phi2"]  # D = 80, d = 32
    out = compute("rope", req(spec, [5, 1, 5, 0, 200000]))
    assert out["cos"].shape == (5, 32) and out["sin"].shape == (5, 32)
    assert out["inv_freq"].shape == (16,)
    ref = compute("rope", req(spec, [0, 1, 5, 200000]))
    for name in ("cos", "sin"):
        np.testing.assert_array_equal(out[name][[3, 1, 0, 2, 4]], ref[name][[0, 1, 2, 2, 3]])
    rng_sel = compute("rope", req(spec, {"start": 3, "stop": 20, "step": 4}))
    lst = compute("rope", req(spec, [3, 7, 11, 15, 19]))
    np.testing.assert_array_equal(rng_sel["cos"], lst["cos"])
    np.testing.assert_array_equal(
        compute("rope", req(spec, {"start": 131070, "stop": 131075}))["sin"],
        compute("rope", req(spec, list(range(131070, 131075))))["sin"],
    )


# --------------------------------------------------------------------------- properties

PROP_SPECS = [
    "default",
    "default-partial-phi2",
    "yarn-partial",
    "llama3",
    "longrope-partial",
    "dynamic-partial",
]
POS = st.integers(0, 2**31 - 1)


def _rotate(x, cos, sin, layout):
    """Rotate rows of x [n, d] with the returned tables, as transformers applies them (float64)."""
    xt = torch.from_numpy(x)[None, :, None, :]  # [b, seq, heads, d]
    c = torch.from_numpy(cos.astype(np.float64))[None, :, None, :]
    s = torch.from_numpy(sin.astype(np.float64))[None, :, None, :]
    if layout == "interleaved":
        r = xt * c + rotate_every_two(xt) * s
    else:
        d = x.shape[1]
        half = torch.cat((-xt[..., d // 2 :], xt[..., : d // 2]), dim=-1)  # Llama's rotate_half
        r = xt * c + half * s
    return r[0, :, 0, :].numpy()


@settings(max_examples=40, deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(PROP_SPECS),
    layout=st.sampled_from(["half_split", "interleaved"]),
    m=POS,
    n=POS,
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_rotation_preserves_norm_and_is_relative(case, layout, m, n, seed, data):
    shift = data.draw(st.integers(-min(m, n), 2**31 - 1 - max(m, n)), label="shift")
    m2, n2 = m + shift, n + shift
    out = compute("rope", req(CASES[case], [m, n, m2, n2], layout=layout))
    alpha = out["attention_scaling"]
    d = out["cos"].shape[1]
    g = np.random.default_rng(seed)
    q, k = g.standard_normal(d), g.standard_normal(d)
    rq = _rotate(np.stack([q, q, q, q]), out["cos"], out["sin"], layout)
    rk = _rotate(np.stack([k, k, k, k]), out["cos"], out["sin"], layout)
    nq, nk = np.linalg.norm(q), np.linalg.norm(k)
    for row in range(4):
        assert np.linalg.norm(rq[row]) == pytest.approx(alpha * nq, rel=5e-7)
        assert np.linalg.norm(rk[row]) == pytest.approx(alpha * nk, rel=5e-7)
    # <R_m q, R_n k> depends only on n - m (float32 tables, exact angles at any position)
    a = rq[0] @ rk[1]
    b = rq[2] @ rk[3]
    assert abs(a - b) <= 4e-6 * alpha**2 * nq * nk, (a, b, m, n, m2, n2)


@pytest.mark.parametrize(
    "scaling",
    [
        None,
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    ],
)
def test_frequencies_finite_in_float64_but_not_float32_name_rope_theta(scaling):
    """A tiny rope_theta gives frequencies float64 holds and float32 does not (theta**(-2i/d) up to
    ~1e155 for 1.5e-156; float32 ends at 3.4e38): refused naming rope_theta, with no warning on the
    way (the suite turns warnings into errors: found by CI's rotating seed, an overflow warning of
    the float32 cast that tests for exactly this)."""
    from posenc.engine.core.errors import SpecError

    theta = 1.521573882177478e-156
    with np.errstate(over="ignore"):
        inv = theta ** (-np.arange(0, 128, 2, dtype=np.float64) / 128)  # the plain rule, in float64
        assert np.isfinite(inv).all() and not np.isfinite(inv.astype(np.float32)).all()
    extra = {} if scaling is None else {"rope_scaling": scaling, "max_position_embeddings": 131072}
    with pytest.raises(SpecError) as e:
        compute("rope", {"head_dim": 128, "rope_theta": theta, "positions": [0], **extra})
    assert e.value.loc == ("rope_theta",), e.value
