"""RoPE tables (issue #2): every rope_type against transformers 5.24's own functions, against
float64 math written here from SEMANTICS.md §1, and rotation properties.

References:
- inv_freq / attention_factor: ``ROPE_INIT_FUNCTIONS[rope_type](config, device, seq_len)`` and,
  for "default", ``GPTNeoXRotaryEmbedding.compute_default_rope_parameters`` (it honours
  partial_rotary_factor; Llama's does not, SEMANTICS §1.3).
- cos/sin: a fresh ``GPTNeoXRotaryEmbedding(config).forward`` (same code as Llama's, plus the
  dynamic/longrope frequency update), tolerance ``(1e-6 + 2.5e-7·p)·max(1, α)`` (SEMANTICS §1.3:
  transformers' own float32 error).
- interleaved layout: GPT-J's ``create_sinusoidal_positions`` / ``apply_rotary_pos_emb``.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb as neox_apply
from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_apply
from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions, rotate_every_two

from posenc.engine.compute import compute
from tests.conftest import EPS64, FLOAT_DTYPES, assert_close, assert_within_ulp

# Positions sampled up to and beyond 131072 (tables are never built that long here).
POSITIONS = [0, 1, 2, 3, 17, 255, 1000, 4095, 4096, 4097, 8191, 65535, 131071, 131072, 200000]
HIGH = [2**24 + 1, 10**9 + 7, 2**31 - 1]


def _longrope_factors(n, long=False):
    # Values exact in float32, so float64 and float32 readings of the JSON agree.
    return [1.0 + (k / 8 if long else k / 64) for k in range(n)]


# id -> spec without positions. Every rope_type, partial rotary < 1 for each.
CASES = {
    "default": {"head_dim": 128},
    "default-partial-phi2": {"head_dim": 80, "partial_rotary_factor": 0.4, "rope_theta": 10000.0},
    "default-partial-theta1e6": {"head_dim": 256, "partial_rotary_factor": 0.25, "rope_theta": 1e6},
    "linear-partial": {"head_dim": 64, "partial_rotary_factor": 0.5,
                       "rope_scaling": {"rope_type": "linear", "factor": 4.0}},
    "dynamic-partial": {"head_dim": 128, "partial_rotary_factor": 0.75, "max_position_embeddings": 4096,
                        "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
    "yarn-partial": {"head_dim": 128, "partial_rotary_factor": 0.5, "max_position_embeddings": 4096,
                     "rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
    "yarn-deepseek": {"head_dim": 64, "rope_theta": 10000.0, "max_position_embeddings": 163840,
                      "rope_scaling": {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                                       "beta_fast": 16, "beta_slow": 2, "mscale": 1.0, "mscale_all_dim": 0.5,
                                       "truncate": False}},
    "yarn-attention-factor": {"head_dim": 96, "rope_theta": 1e6, "partial_rotary_factor": 0.5,
                              "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "attention_factor": 0.9,
                                               "original_max_position_embeddings": 8192}},
    "llama3": {"head_dim": 128, "rope_theta": 500000.0, "max_position_embeddings": 131072,
               "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
    "llama3-partial": {"head_dim": 128, "rope_theta": 500000.0, "partial_rotary_factor": 0.5,
                       "max_position_embeddings": 8192,
                       "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 8.0}},
    "longrope-partial": {"head_dim": 96, "partial_rotary_factor": 0.5, "max_position_embeddings": 131072,
                         "original_max_position_embeddings": 4096,
                         "rope_scaling": {"rope_type": "longrope", "short_factor": _longrope_factors(24),
                                          "long_factor": _longrope_factors(24, long=True)}},
    "longrope-factor": {"head_dim": 64, "max_position_embeddings": 8192,
                        "rope_scaling": {"rope_type": "longrope", "factor": 3.0,
                                         "original_max_position_embeddings": 2048,
                                         "short_factor": _longrope_factors(32),
                                         "long_factor": _longrope_factors(32, long=True)}},
}


def req(spec, positions, **extra):
    r = copy.deepcopy(spec)
    r["positions"] = positions
    r.update(extra)
    return r


# --------------------------------------------------------------------------- transformers side

def _scaling_block(spec):
    return spec.get("rope_scaling") or spec.get("rope_parameters") or {}


def _rope_type(spec):
    rs = _scaling_block(spec)
    return rs.get("rope_type") or rs.get("type") or "default"


def hf_config(spec):
    """A real transformers config for a posenc rope spec (the mapping is the field names only)."""
    rs = dict(_scaling_block(spec))
    rs.pop("type", None)
    rs["rope_type"] = _rope_type(spec)
    rs.setdefault("rope_theta", spec.get("rope_theta", 10000.0))
    if "partial_rotary_factor" in spec:
        rs.setdefault("partial_rotary_factor", spec["partial_rotary_factor"])
    head_dim = spec["head_dim"]
    kw = dict(hidden_size=head_dim * 2, num_attention_heads=2, head_dim=head_dim, rope_parameters=rs)
    if "max_position_embeddings" in spec:
        kw["max_position_embeddings"] = spec["max_position_embeddings"]
    if spec.get("original_max_position_embeddings") is not None:
        kw["original_max_position_embeddings"] = spec["original_max_position_embeddings"]
    return LlamaConfig(**kw)


def hf_inv_freq(spec, seq_len=None):
    cfg = hf_config(spec)
    t = _rope_type(spec)
    if t == "default":
        inv, af = GPTNeoXRotaryEmbedding.compute_default_rope_parameters(cfg)
    else:
        inv, af = ROPE_INIT_FUNCTIONS[t](cfg, None, seq_len=seq_len)
    return inv.double().numpy(), float(af)


def hf_module_cos_sin(spec, positions):
    """transformers' own forward on a fresh module (its dynamic/longrope update sees max(pos)+1)."""
    module = GPTNeoXRotaryEmbedding(hf_config(spec))
    pos = torch.tensor([positions], dtype=torch.int64)
    with torch.no_grad():
        cos, sin = module(torch.zeros(1, dtype=torch.float32), pos)
    return cos[0].double().numpy(), sin[0].double().numpy()


def hf_style_cos_sin(inv_freq_f32, positions, scaling):
    """Exactly LlamaRotaryEmbedding.forward's arithmetic, from a given float32 inv_freq."""
    inv = torch.tensor(inv_freq_f32, dtype=torch.float32)
    freqs = torch.tensor(positions, dtype=torch.int64).float()[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * scaling).double().numpy(), (emb.sin() * scaling).double().numpy()


def hf_inv_rtol(spec, seq_len):
    """transformers' own float32 inv_freq error: 2e-7 (SEMANTICS §1.3) plus the float32 rounding of
    the exponent 2k/d (exact for d a power of two), which theta**e magnifies by ln(theta)."""
    rs = _scaling_block(spec)
    theta = float(spec.get("rope_theta") or rs.get("rope_theta") or 10000.0)
    prf = spec.get("partial_rotary_factor") or rs.get("partial_rotary_factor") or 1.0
    d = int(spec["head_dim"] * prf)
    if _rope_type(spec) == "dynamic":
        f, M = rs["factor"], spec["max_position_embeddings"]
        theta *= (f * max(seq_len, M) / M - (f - 1)) ** (d / (d - 2))
    e64 = np.arange(0, d, 2, dtype=np.float64) / d
    e32 = (np.arange(0, d, 2, dtype=np.float32) / np.float32(d)).astype(np.float64)
    rtol = 2e-7 + math.log(theta) * np.abs(e32 - e64)
    # yarn and llama3 blend inv/f and inv with a float32 coefficient; its rounding error is
    # magnified where the blend nearly cancels: rel err = δc·(1 − 1/f)/((1 − c) + c/f).
    t, k, u = _rope_type(spec), np.arange(d // 2, dtype=np.float64), 2.0**-24
    M = spec.get("max_position_embeddings")
    O = spec.get("original_max_position_embeddings") or rs.get("original_max_position_embeddings") or M
    if t == "yarn":
        f = rs["factor"]

        def corr(r):
            return d * math.log(O / (r * 2 * math.pi)) / (2 * math.log(theta))

        low, high = corr(rs.get("beta_fast") or 32), corr(rs.get("beta_slow") or 1)
        if rs.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, d - 1)
        high = high + 0.001 if low == high else high
        ramp = np.clip((k - low) / (high - low), 0.0, 1.0)
        dc = np.where((ramp > 0) & (ramp < 1), 4 * u * (k + abs(low)) / (high - low), 0.0)
        rtol = rtol + dc * (1 - 1 / f) / ((1 - ramp) + ramp / f)
    elif t == "llama3":
        f, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        wavelen = 2 * math.pi * theta ** (2 * k / d)
        s = np.clip((O / wavelen - lo) / (hi - lo), 0.0, 1.0)
        dc = np.where((s > 0) & (s < 1), 4 * u * (O / wavelen + lo) / (hi - lo), 0.0)
        rtol = rtol + dc * (1 - 1 / f) / ((1 - s) / f + s)
    return rtol


def hf_tol(positions, scaling):
    p = np.asarray(positions, dtype=np.float64)[:, None]
    return (1e-6 + 2.5e-7 * p) * max(1.0, scaling)


# --------------------------------------------------------------------------- float64 side

def ref_inv64(spec, seq_len):
    """inv_freq and attention scaling in float64, from SEMANTICS.md §1.1 (not transformers' code)."""
    rs = _scaling_block(spec)
    theta = float(spec.get("rope_theta") or rs.get("rope_theta") or 10000.0)
    prf = spec.get("partial_rotary_factor") or rs.get("partial_rotary_factor") or 1.0
    d = int(spec["head_dim"] * prf)
    k = np.arange(d // 2, dtype=np.float64)
    base = 1.0 / theta ** (2.0 * k / d)
    t = _rope_type(spec)
    M = spec.get("max_position_embeddings")
    O = spec.get("original_max_position_embeddings") or rs.get("original_max_position_embeddings") or M
    if t == "default":
        return base, 1.0
    if t == "linear":
        return base / rs["factor"], 1.0
    if t == "dynamic":
        f = rs["factor"]
        L = max(seq_len, M)
        theta2 = theta * (f * L / M - (f - 1)) ** (d / (d - 2))
        return 1.0 / theta2 ** (2.0 * k / d), 1.0
    if t == "yarn":
        f = rs["factor"]
        beta_fast = rs.get("beta_fast") or 32
        beta_slow = rs.get("beta_slow") or 1

        def corr(r):
            return d * math.log(O / (r * 2 * math.pi)) / (2 * math.log(theta))

        low, high = corr(beta_fast), corr(beta_slow)
        if rs.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, d - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((k - low) / (high - low), 0.0, 1.0)
        inv = (1 - ramp) * base + ramp * (base / f)

        def mscale(s, m=1.0):
            return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0

        alpha = rs.get("attention_factor")
        if alpha is None:
            ms, msa = rs.get("mscale"), rs.get("mscale_all_dim")
            alpha = mscale(f, ms) / mscale(f, msa) if (ms and msa) else mscale(f)
        return inv, float(alpha)
    if t == "llama3":
        f, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        wavelen = 2 * math.pi / base
        inv = np.where(wavelen > O / lo, base / f, base)
        s = (O / wavelen - lo) / (hi - lo)
        medium = (wavelen >= O / hi) & (wavelen <= O / lo)
        return np.where(medium, (1 - s) * base / f + s * base, inv), 1.0
    if t == "longrope":
        ext = np.array(rs["long_factor"] if seq_len > O else rs["short_factor"], dtype=np.float64)
        inv = 1.0 / (ext * theta ** (2.0 * k / d))
        alpha = rs.get("attention_factor")
        if alpha is None:
            f = rs.get("factor") or M / O
            alpha = 1.0 if f <= 1 else math.sqrt(1 + math.log(f) / math.log(O))
        return inv, float(alpha)
    raise AssertionError(t)


def ref_cos_sin64(inv64, alpha, positions):
    ang = np.asarray(positions, dtype=np.float64)[:, None] * inv64[None, :]
    ang = np.concatenate([ang, ang], axis=1)
    return np.cos(ang) * alpha, np.sin(ang) * alpha, ang


def to_interleaved(half):
    """half_split columns (k, k+d/2) -> interleaved columns (2k, 2k+1)."""
    n, d = half.shape
    out = np.empty_like(half)
    out[:, 0::2] = half[:, : d // 2]
    out[:, 1::2] = half[:, d // 2:]
    return out


# --------------------------------------------------------------------------- vs transformers

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
        np.testing.assert_array_equal(i[:, 1::2], h[:, d // 2:])
        # half_split pairs (k, k + d/2) rotate together: the two halves are equal.
        np.testing.assert_array_equal(h[:, : d // 2], h[:, d // 2:])
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
    ours = neox_apply(q, k, torch.from_numpy(out["cos"].astype(np.float64))[None],
                      torch.from_numpy(out["sin"].astype(np.float64))[None])
    theirs = neox_apply(q, k, torch.from_numpy(hcos)[None], torch.from_numpy(hsin)[None])
    tol = 8 * hf_tol(pos, 1.0)[None, None, :, :]
    for a, b in zip(ours, theirs):
        assert_close(a.numpy(), b.numpy(), atol=tol, what="neox rotation")


# --------------------------------------------------------------------------- vs float64 math

@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_against_float64_within_one_ulp(case, dtype, layout):
    spec = CASES[case]
    pos = POSITIONS + HIGH
    out = compute("rope", req(spec, pos, dtype=dtype, layout=layout))
    inv64, alpha = ref_inv64(spec, max(pos) + 1)
    cos64, sin64, ang = ref_cos_sin64(inv64, alpha, pos)
    if layout == "interleaved":
        cos64, sin64, ang = to_interleaved(cos64), to_interleaved(sin64), to_interleaved(ang)
    # The float64 reference's own error: the angle may be formed a few float64 ulps differently.
    slack = (np.abs(ang) + 1.0) * 64 * EPS64 * alpha
    assert_within_ulp(out["cos"], cos64, dtype, slack=slack, what=f"{case} cos")
    assert_within_ulp(out["sin"], sin64, dtype, slack=slack, what=f"{case} sin")
    # inv_freq stays float32 whatever dtype: float64 frequencies rounded once.
    assert out["inv_freq"].dtype == np.float32
    assert_within_ulp(out["inv_freq"], inv64, "float32", slack=64 * EPS64 * inv64, what=f"{case} inv_freq")
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
    spec = {"head_dim": 64, "max_position_embeddings": 4096,
            "rope_scaling": {"rope_type": "yarn", "factor": factor}}
    out = compute("rope", req(spec, [0]))
    assert out["attention_scaling"] == pytest.approx(want, rel=1e-15)
    # cos at p = 0 is the scaling itself, rounded once to float32
    assert out["cos"][0, 0] == np.float32(want)


def test_yarn_deepseek_equal_mscales_give_one():
    spec = {"head_dim": 64, "max_position_embeddings": 163840,
            "rope_scaling": {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                             "mscale": 1.0, "mscale_all_dim": 1.0}}
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


@pytest.mark.parametrize("positions,seq_len,long", [
    ([0, 1, 4095], None, False),          # seq_len 4096 = O -> short
    ([0, 1, 4096], None, True),           # seq_len 4097 > O -> long
    ([0, 1, 2], 4097, True),              # explicit seq_len picks long
    ([0, 10000], 100, False),             # a smaller explicit seq_len is allowed, picks short
    ([4096], 4096, False),
])
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


@pytest.mark.parametrize("positions,seq_len,eff", [
    ([0, 1, 100], None, 4096),            # below M: original frequencies
    ([0, 4095], None, 4096),
    ([0, 4096], None, 4097),              # just past M: rescaled
    ([3, 16383], None, 16384),
    ([0, 1, 2], 16384, 16384),            # explicit seq_len (stateless stand-in for a grown cache)
    ([0, 20000], 8192, 8192),             # smaller than max(position)+1 is allowed
])
def test_dynamic_seq_len(positions, seq_len, eff):
    r = req(DYNAMIC, positions) if seq_len is None else req(DYNAMIC, positions, seq_len=seq_len)
    out = compute("rope", r)
    hf_inv, _ = hf_inv_freq(DYNAMIC, seq_len=eff)
    rtol = hf_inv_rtol(DYNAMIC, eff)
    assert_close(out["inv_freq"], hf_inv, atol=1e-30, rtol=rtol, what="dynamic inv_freq")
    inv64, _ = ref_inv64(DYNAMIC, eff)
    assert_within_ulp(out["inv_freq"], inv64, "float32", slack=64 * EPS64 * inv64, what="dynamic inv64")
    hcos, hsin = hf_style_cos_sin(hf_inv.astype(np.float32), positions, 1.0)
    tol = hf_tol(positions, 1.0)
    assert_close(out["cos"], hcos, atol=tol, what="dynamic cos")
    assert_close(out["sin"], hsin, atol=tol, what="dynamic sin")


# --------------------------------------------------------------------------- request forms

def _same(a, b):
    for name in ("cos", "sin", "inv_freq"):
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert a["attention_scaling"] == b["attention_scaling"]


def test_legacy_type_key_and_rope_parameters_forms():
    pos = [0, 1, 4096, 131072]
    base = {"head_dim": 64, "rope_theta": 500000.0, "partial_rotary_factor": 0.5}
    want = compute("rope", req(base, pos, rope_scaling={"rope_type": "linear", "factor": 2.0}))
    _same(want, compute("rope", req(base, pos, rope_scaling={"type": "linear", "factor": 2.0})))
    _same(want, compute("rope", req(base, pos, rope_scaling={"type": "linear", "rope_type": "linear",
                                                                 "factor": 2.0})))
    _same(want, compute("rope", req(base, pos, rope_parameters={"rope_type": "linear", "factor": 2.0})))
    # transformers 5's rope_parameters may carry rope_theta and partial_rotary_factor itself
    _same(want, compute("rope", req({"head_dim": 64}, pos, rope_parameters={
        "rope_type": "linear", "factor": 2.0, "rope_theta": 500000.0, "partial_rotary_factor": 0.5})))
    # the same value at both places is not a conflict
    _same(want, compute("rope", req(base, pos, rope_parameters={
        "rope_type": "linear", "factor": 2.0, "rope_theta": 500000.0})))
    # and transformers reads the legacy form the same way
    cfg = LlamaConfig(hidden_size=128, num_attention_heads=2, head_dim=64, rope_theta=500000.0,
                      partial_rotary_factor=0.5, rope_scaling={"type": "linear", "factor": 2.0})
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
    spec = {"head_dim": 64, "max_position_embeddings": 32768, "rope_scaling": inner,
            "original_max_position_embeddings": 4096}
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
    assert not np.array_equal(other["inv_freq"], out["inv_freq"]) or \
        other["attention_scaling"] != out["attention_scaling"]


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
        compute("rope", req(spec, list(range(131070, 131075))))["sin"])


# --------------------------------------------------------------------------- properties

PROP_SPECS = ["default", "default-partial-phi2", "yarn-partial", "llama3", "longrope-partial", "dynamic-partial"]
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
        half = torch.cat((-xt[..., d // 2:], xt[..., : d // 2]), dim=-1)  # Llama's rotate_half
        r = xt * c + half * s
    return r[0, :, 0, :].numpy()


@settings(derandomize=True, max_examples=40, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(PROP_SPECS), layout=st.sampled_from(["half_split", "interleaved"]),
       m=POS, n=POS, seed=st.integers(0, 2**32 - 1), data=st.data())
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
