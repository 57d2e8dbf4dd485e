"""RoPE references for the rope tests: transformers' side and float64 math from docs/reference.md.

References:
- inv_freq / attention_factor: ``ROPE_INIT_FUNCTIONS[rope_type](config, device, seq_len)`` and,
  for "default", ``GPTNeoXRotaryEmbedding.compute_default_rope_parameters`` (it honours
  partial_rotary_factor; Llama's does not, docs/reference.md).
- cos/sin: a fresh ``GPTNeoXRotaryEmbedding(config).forward`` (same code as Llama's, plus the
  dynamic/longrope frequency update), tolerance ``(1e-6 + 2.5e-7·p)·max(1, α)`` (docs/reference.md:
  transformers' own float32 error).
- interleaved layout: GPT-J's ``create_sinusoidal_positions`` / ``apply_rotary_pos_emb``.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding

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
    "linear-partial": {
        "head_dim": 64,
        "partial_rotary_factor": 0.5,
        "rope_scaling": {"rope_type": "linear", "factor": 4.0},
    },
    "dynamic-partial": {
        "head_dim": 128,
        "partial_rotary_factor": 0.75,
        "max_position_embeddings": 4096,
        "rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
    },
    "yarn-partial": {
        "head_dim": 128,
        "partial_rotary_factor": 0.5,
        "max_position_embeddings": 4096,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
    },
    "yarn-deepseek": {
        "head_dim": 64,
        "rope_theta": 10000.0,
        "max_position_embeddings": 163840,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 40.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 16,
            "beta_slow": 2,
            "mscale": 1.0,
            "mscale_all_dim": 0.5,
            "truncate": False,
        },
    },
    "yarn-attention-factor": {
        "head_dim": 96,
        "rope_theta": 1e6,
        "partial_rotary_factor": 0.5,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 8.0,
            "attention_factor": 0.9,
            "original_max_position_embeddings": 8192,
        },
    },
    "llama3": {
        "head_dim": 128,
        "rope_theta": 500000.0,
        "max_position_embeddings": 131072,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    },
    "llama3-partial": {
        "head_dim": 128,
        "rope_theta": 500000.0,
        "partial_rotary_factor": 0.5,
        "max_position_embeddings": 8192,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 8.0,
        },
    },
    "longrope-partial": {
        "head_dim": 96,
        "partial_rotary_factor": 0.5,
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
        "rope_scaling": {
            "rope_type": "longrope",
            "short_factor": _longrope_factors(24),
            "long_factor": _longrope_factors(24, long=True),
        },
    },
    "longrope-factor": {
        "head_dim": 64,
        "max_position_embeddings": 8192,
        "rope_scaling": {
            "rope_type": "longrope",
            "factor": 3.0,
            "original_max_position_embeddings": 2048,
            "short_factor": _longrope_factors(32),
            "long_factor": _longrope_factors(32, long=True),
        },
    },
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
    """transformers' own float32 inv_freq error: 2e-7 (docs/reference.md) plus the float32 rounding of
    the exponent 2k/d (exact for d a power of two), which theta**e magnifies by ln(theta)."""
    rs = _scaling_block(spec)
    e64, theta = rope_exponents(spec, seq_len)
    d = 2 * len(e64)
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
    """inv_freq and attention scaling in float64, from docs/reference.md (not transformers' code)."""
    rs = _scaling_block(spec)
    theta = float(spec.get("rope_theta") or rs.get("rope_theta") or 10000.0)
    prf = spec.get("partial_rotary_factor") or rs.get("partial_rotary_factor") or 1.0
    d = int(spec["head_dim"] * prf)
    k = np.arange((d + 1) // 2, dtype=np.float64)  # ⌈d/2⌉: an odd width has one more
    base = 1.0 / theta ** (2.0 * k / d)
    t = _rope_type(spec)
    M = spec.get("max_position_embeddings")
    O = spec.get("original_max_position_embeddings") or rs.get("original_max_position_embeddings") or M
    if t == "default":
        return base, 1.0
    if t == "proportional":
        # docs/reference.md: the table is D = head_dim wide; the first int(prf·D // 2) frequencies are
        # 1/θ^(2k/D), the rest 0; all divided by factor
        D = int(spec["head_dim"])
        kd = np.arange(D // 2, dtype=np.float64)
        inv = np.where(kd < int(prf * D // 2), 1.0 / theta ** (2.0 * kd / D), 0.0)
        return inv / (rs.get("factor") or 1.0), 1.0
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


def rope_exponents(spec, seq_len):
    """The exponent e_k = 2k/d of each of the d/2 frequencies, and the base they are powers of
    (θ, or dynamic's θ' at seq_len): what the float64 reference's own error depends on."""
    rs = _scaling_block(spec)
    theta = float(spec.get("rope_theta") or rs.get("rope_theta") or 10000.0)
    prf = spec.get("partial_rotary_factor") or rs.get("partial_rotary_factor") or 1.0
    d = int(spec["head_dim"] * prf)
    if _rope_type(spec) == "proportional":  # exponents over the whole head_dim (ref_inv64)
        d = int(spec["head_dim"])
    if _rope_type(spec) == "dynamic":
        f, M = rs["factor"], spec["max_position_embeddings"]
        theta *= (f * max(seq_len, M) / M - (f - 1)) ** (d / (d - 2))
    return np.arange((d + 1) // 2, dtype=np.float64) * 2.0 / d, theta


def ref_cos_sin64(inv64, alpha, positions):
    ang = np.asarray(positions, dtype=np.float64)[:, None] * inv64[None, :]
    ang = np.concatenate([ang, ang], axis=1)
    return np.cos(ang) * alpha, np.sin(ang) * alpha, ang


# --------------------------------------------------------------------------- multi-axis (float64)


def dealt_axes(half, section, interleaved):
    """The axis of each of the d/2 frequencies, as docs/reference.md words it."""
    if interleaved:
        return [
            1 if (k % 3 == 1 and k < 3 * section[1]) else 2 if (k % 3 == 2 and k < 3 * section[2]) else 0
            for k in range(half)
        ]
    return [a for a, c in enumerate(section) for _ in range(c)]


def ref_mrope64(spec, ids, seq_len):
    inv, alpha = ref_inv64(spec, seq_len)
    axis = spec.get("mrope_axes") or dealt_axes(
        inv.size, spec["mrope_section"], spec.get("mrope_interleaved", False)
    )
    ang = np.stack([ids[a] for a in axis], axis=1).astype(np.float64) * inv[None, :]
    return ang, alpha, inv


def ref_axes64(axes_dim, theta, ids):
    parts, exps = [], []
    for a, w in enumerate(axes_dim):
        e = np.arange(0, w, 2, dtype=np.float64) / w
        parts.append(ids[a].astype(np.float64)[:, None] * (1.0 / theta**e)[None, :])
        exps.append(e)
    return parts, exps


def lay(half_blocks, layout):
    """Per block, half_split [c | c] or interleaved [c0, c0, c1, c1, ...]; blocks concatenated."""
    return np.concatenate(
        [np.concatenate([b, b], 1) if layout == "half_split" else np.repeat(b, 2, 1) for b in half_blocks],
        axis=1,
    )


def to_interleaved(half):
    """half_split columns (k, k+d/2) -> interleaved columns (2k, 2k+1)."""
    n, d = half.shape
    out = np.empty_like(half)
    out[:, 0::2] = half[:, : d // 2]
    out[:, 1::2] = half[:, d // 2 :]
    return out


# --------------------------------------------------------------------------- vs transformers
