"""Kernels, every backend bit for bit against independent references: ALiBi blocks and sin/cos
rows against the float64 formula rounded once (tests/numeric.round_once; sin/cos also held to
mpmath), T5 blocks against their lookup in Python integers; the native backends also against the
numpy one where NaN's bits are left open.
"""

from __future__ import annotations

import numpy as np
import pytest

from posenc.engine.kernels import numpy_impl as ref
from tests.engine.kernel_helpers import I31, STORAGE, assert_same, bits, rng_for
from tests.numeric import EPS64, FLOAT_DTYPES, MAX_FINITE, as_storage, assert_within_ulp, round_once

MASK_BITS = {"float32": 0xFF7FFFFF, "float16": 0xFBFF, "bfloat16": 0xFF7F}  # -largest finite (finfo.min)


def wrap64(a) -> np.ndarray:
    """Python integers as int64 wraps them (two's complement), as object arrays."""
    return (np.asarray(a, dtype=object) + 2**63) % 2**64 - 2**63


def alibi64(slopes, query, key, symmetric: bool, mask: bool, dtype: str):
    """ALiBi's block from its formula (docs/reference.md): 0 - m·(q - k) (or |q - k|) in float64, the
    distance the int64 difference (Python integers, wrapped), the masked cells -largest finite; rounded
    once to ``dtype``'s storage. Also the overflow the kernel reports (an unmasked cell +-inf, the
    float64 value not NaN) and where the float64 value is NaN."""
    d = wrap64(np.asarray(query, dtype=object)[:, None] - np.asarray(key, dtype=object)[None, :])
    if symmetric:
        d = wrap64(np.abs(d))
    dist = np.array([[float(v) for v in row] for row in d], dtype=np.float64).reshape(d.shape)
    with np.errstate(over="ignore", invalid="ignore"):
        v = 0.0 - slopes[:, None, None] * dist[None]
    if mask:
        v[:, np.asarray(key)[None, :] > np.asarray(query)[:, None]] = -MAX_FINITE[dtype]
    r = round_once(v, dtype)
    return as_storage(r, dtype), bool((np.isinf(r) & ~np.isnan(v)).any()), np.isnan(v)


def t5_lookup(lut, query, key, radius: int) -> np.ndarray:
    """T5's tabulated buckets: lut[clip(key - query, -radius, radius) + radius], the difference in
    Python integers wrapped as int64 (what both backends document)."""
    rel = wrap64(np.asarray(key, dtype=object)[None, :] - np.asarray(query, dtype=object)[:, None])
    idx = np.clip(rel, -radius, radius) + radius
    return lut[idx.astype(np.int64)].reshape(len(query), len(key))


def sincos64(freqs, pos, scale: float, dtype: str):
    """cos and sin rows from their formula: angle = float64(p)·f, one multiply; cos/sin of it, times
    scale, rounded once to ``dtype``'s storage (and where the float64 values are NaN)."""
    with np.errstate(over="ignore", invalid="ignore"):
        angle = pos.astype(np.float64)[:, None] * freqs[None, :]
        out = []
        for v in (np.cos(angle), np.sin(angle)):
            v = v * scale
            out.append((as_storage(round_once(v, dtype), dtype), np.isnan(v)))
    return out


def alibi_slopes(num_heads: int) -> np.ndarray:
    """Press et al. 2022 slopes (power-of-two heads): 2^(-8(h+1)/H), float64."""
    return 2.0 ** (-8.0 * np.arange(1, num_heads + 1) / num_heads)


def _positions(r, n, big=False):
    p = r.integers(0, 4096, n).astype(np.int64)
    if big and n >= 3:
        p[:3] = [I31, 0, I31 - 1]
        p[3 : n // 2] = r.integers(0, I31 + 1, max(n // 2 - 3, 0))
    return p


def _query_key_pairs(r, nq, nk):
    """Random positions, and key ranges (the native kernels copy rows out of one line of values
    when the keys are contiguous): queries inside, around and far from the keys, near 2^31."""
    yield _positions(r, nq), _positions(r, nk)
    yield _positions(r, nq, True), _positions(r, nk, True)
    for k0, spread in ((0, 0), (100, 3 * nk + 200), (I31 - nk + 1, nk), (5000, 10**6)):
        k = np.arange(k0, k0 + nk, dtype=np.int64)
        q = k0 + r.integers(-spread // 2 - 1, spread + 2, nq).astype(np.int64)
        if nq > 1:
            q[:2] = [k0 + nk - 1, k0]
        yield np.clip(q, 0, I31), k


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("mode", ["causal", "symmetric", "masked"])
def test_alibi_block(kern, dtype, mode):
    r = rng_for("alibi", dtype, mode)
    sym, mask = mode == "symmetric", mode == "masked"
    shapes = [(8, 1, 1100), (3, 17, 33), (2, 40, 700), (2, 5, 0), (0, 3, 4), (4, 0, 9)]
    for H, nq, nk in shapes:
        slopes = np.concatenate([alibi_slopes(8), r.uniform(0, 2, 8)])[:H]
        for case, (q, k) in enumerate(_query_key_pairs(r, nq, nk)):
            big = case == 1
            if case == 0 and nq and nk:
                k[: min(nk, nq)] = q[: min(nk, nq)]  # zero distances: +-0.0
            got = np.empty((H, nq, nk), STORAGE[dtype])
            want, over, _ = alibi64(slopes, q, k, sym, mask, dtype)
            assert kern.alibi_block(slopes, q, k, got, dtype, sym, mask) == over, (H, nq, nk, case)
            assert_same(got, want, f"alibi {mode} {dtype} {(H, nq, nk)} case={case}")
            if dtype == "float16" and big and H and nq > 2 and nk > 2:
                assert over  # 2^31 * 2^-1 overflows float16


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_alibi_mask_value_and_masked_overflow(kern, dtype):
    # key far in the future: unmasked it would overflow float16; masked it is finfo.min and no
    # overflow is reported
    q = np.array([0, 10], np.int64)
    k = np.array([0, 5, 10, 1_000_000], np.int64)
    slopes = np.array([1.0, 0.5])
    out = np.empty((2, 2, 4), STORAGE[dtype])
    assert kern.alibi_block(slopes, q, k, out, dtype, False, True) is False
    assert (bits(out[:, 0, 1:]) == MASK_BITS[dtype]).all()
    assert (bits(out[:, 1, 3]) == MASK_BITS[dtype]).all()
    unmasked = kern.alibi_block(slopes, q, k, out, dtype, False, False)
    assert unmasked is (dtype == "float16")


def test_alibi_positions_beyond_2_53(kern):
    """The exact-float64 fast path needs |position| <= 2^53; past it both backends use the
    int64 (wrapping) difference."""
    q = np.array([0, 2**62, -(2**63), 2**53 + 1], np.int64)
    k = np.array([2**63 - 1, 1, 2**53, -5], np.int64)
    slopes = np.array([1.0, 2.0**-8])
    for sym, mask in ((False, False), (True, False), (False, True)):
        got = np.empty((2, 4, 4), np.float32)
        want, over, _ = alibi64(slopes, q, k, sym, mask, "float32")
        assert kern.alibi_block(slopes, q, k, got, "float32", sym, mask) == over
        assert_same(got, want, f"alibi beyond 2^53 sym={sym} mask={mask}")


def test_alibi_nan_slope_does_not_crash(kern):
    slopes = np.array([np.nan, np.inf, -np.inf, 1e308])
    q, k = np.arange(3, dtype=np.int64), np.arange(5, dtype=np.int64)
    for dtype in FLOAT_DTYPES:
        got = np.empty((4, 3, 5), STORAGE[dtype])
        want, over, nan = alibi64(slopes, q, k, False, False, dtype)
        assert over  # inf * d and 1e308 * 4 overflow: reported
        assert kern.alibi_block(slopes, q, k, got, dtype, False, False) == over
        assert_same(got, want, f"alibi nan {dtype}", nan=nan)
        if kern is not ref:  # NaN's bits: the same as the numpy backend's
            same = np.empty((4, 3, 5), STORAGE[dtype])
            ref.alibi_block(slopes, q, k, same, dtype, False, False)
            assert_same(got, same, f"alibi nan {dtype} against the numpy backend")


# --------------------------------------------------------------------------------------- T5


@pytest.mark.parametrize("radius", [0, 1, 7, 128, 5000])
def test_t5_block(kern, radius):
    r = rng_for("t5", radius)
    lut = r.integers(-(2**31), 2**31, 2 * radius + 1).astype(np.int32)
    for nq, nk in ((1, 8192), (33, 70), (64, 300), (0, 5), (4, 0)):
        for case, (q, k) in enumerate(_query_key_pairs(r, nq, nk)):
            got = np.empty((nq, nk), np.int32)
            assert kern.t5_block(lut, q, k, got, radius) is None
            assert_same(got, t5_lookup(lut, q, k, radius), f"t5 r={radius} {(nq, nk)} case={case}")
    q = np.array([0, 2**62, -(2**63), 5], np.int64)  # wrapping differences
    k = np.array([2**63 - 1, 1, 2**53, -5], np.int64)
    got = np.empty((4, 4), np.int32)
    kern.t5_block(lut, q, k, got, radius)
    assert_same(got, t5_lookup(lut, q, k, radius), "t5 extreme positions")


# ----------------------------------------------------------------------------------- sincos


def rope_freqs(d: int, theta: float = 10000.0) -> np.ndarray:
    """RoFormer/Llama inverse frequencies theta^(-2k/d), float64."""
    return 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)


def ordered(a: np.ndarray) -> np.ndarray:
    """Float bit patterns as integers whose difference counts ulps (both zeros -> 0)."""
    b = bits(a).astype(np.int64)
    top = 8 * a.itemsize - 1
    mag = b & ((1 << top) - 1)
    return np.where(b >> top, -mag, mag)


def _sincos_inputs(r):
    freqs = np.concatenate([rope_freqs(128), rope_freqs(64, 500000.0) / 8.0, [0.0, 1.0]])
    pos = np.concatenate(
        [np.arange(64), r.integers(0, 131072, 200), r.integers(0, I31 + 1, 56), [I31, 0]]
    ).astype(np.int64)
    return freqs, pos


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("scale", [1.0, 1.2302585092994046])  # yarn: 0.1 ln(factor 16) + 1
def test_sincos_bit_equal_to_numpy(kern, dtype, scale):
    r = rng_for("sincos", dtype, scale)
    freqs, pos = _sincos_inputs(r)
    for f in (freqs, np.tile(freqs, 9)[:600]):  # 600 > one 512-wide staging block
        shape = (pos.size, f.size)
        gc, gs = np.empty(shape, STORAGE[dtype]), np.empty(shape, STORAGE[dtype])
        assert kern.sincos(f, pos, scale, gc, gs, dtype) is False
        for got, (want, _), what in zip((gc, gs), sincos64(f, pos, scale, dtype), ("cos", "sin")):
            diff = np.abs(ordered(got) - ordered(want))
            assert diff.max() == 0, (
                f"{what} {dtype}: {int((diff > 0).sum())} values differ from the float64 "
                f"cos/sin rounded once (max {int(diff.max())} ulp)"
            )
    empty = np.empty((0, freqs.size), STORAGE[dtype])
    kern.sincos(freqs, np.empty(0, np.int64), scale, empty, empty.copy(), dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_sincos_accuracy_vs_mpmath(kern, dtype):
    """Correctly rounded from float64 against a 40-digit reference, value by value: within half
    an ulp of the exact cos/sin of the float64 angle, give or take 2·eps64 (the float64
    evaluation of cos/sin that is rounded once; |cos|, |sin| <= 1)."""
    import mpmath  # the test extra installs it: a missing one fails, never skips

    r = rng_for("sincos-mp", dtype)
    freqs, pos = _sincos_inputs(r)
    pos = r.choice(pos, 48, replace=False)
    f = r.choice(freqs, 24, replace=False)
    shape = (pos.size, f.size)
    outs = {
        name: (np.empty(shape, STORAGE[dtype]), np.empty(shape, STORAGE[dtype])) for name in ("got", "numpy")
    }
    kern.sincos(f, pos, 1.0, *outs["got"], dtype)
    ref.sincos(f, pos, 1.0, *outs["numpy"], dtype)
    angle = pos.astype(np.float64)[:, None] * f[None, :]
    mpmath.mp.dps = 40
    exact = {"cos": np.empty(shape), "sin": np.empty(shape)}
    for i, j in np.ndindex(*shape):
        a = mpmath.mpf(float(angle[i, j]))  # the float64 angle itself is the definition
        exact["cos"][i, j] = float(mpmath.cos(a))
        exact["sin"][i, j] = float(mpmath.sin(a))
    for k, name in enumerate(("cos", "sin")):
        for which in ("got", "numpy"):
            assert_within_ulp(outs[which][k], exact[name], dtype, slack=2 * EPS64, what=f"{name} {which}")


def test_sincos_nonfinite_does_not_crash(kern):
    freqs = np.array([np.nan, np.inf, 1e308, 1.0])
    pos = np.array([0, 1, I31], np.int64)
    for dtype in FLOAT_DTYPES:
        outs = [np.empty((3, 4), STORAGE[dtype]) for _ in range(2)]
        kern.sincos(freqs, pos, 1.0, outs[0], outs[1], dtype)
        for got, (want, nan) in zip(outs, sincos64(freqs, pos, 1.0, dtype)):
            assert nan.any()
            assert_same(got, want, f"sincos non-finite {dtype}", nan=nan)
        # a scale that overflows is reported
        assert (
            kern.sincos(
                np.array([0.0]), pos, 1e300, *[np.empty((3, 1), STORAGE[dtype]) for _ in range(2)], dtype
            )
            is True
        )


# -------------------------------------------------------------------------------- bad input
