"""Kernel layer (issue #5): every backend against the numpy reference, bit for bit.

Parametrized over the numpy backend and each dispatch level of the native one this CPU runs
("simd-avx2", "simd-baseline"), so the portable fallback is tested on an AVX2 machine too.
POSENC_BACKEND is honoured: under ``numpy`` the native params are skipped, under ``simd`` the
numpy param is (the reference itself still computes every expected value), and under ``simd``
a missing extension fails rather than skips. Randomness comes from POSENC_TEST_SEED.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from posenc.engine import dtypes
from posenc.engine.errors import SpecError
from posenc.engine.kernels import numpy_impl as ref
from tests.conftest import FLOAT_DTYPES, SEED

try:
    from posenc.engine.kernels import _native
except ImportError as exc:  # not built: the simd params skip (or fail under POSENC_BACKEND=simd)
    _native, _NATIVE_ERR = None, str(exc)

ROOT = Path(__file__).resolve().parents[1]
ENV_BACKEND = os.environ.get("POSENC_BACKEND", "auto") or "auto"
STORAGE = dtypes.DTYPES
I31 = 2**31 - 1


def _backend_params():
    numpy_marks = ([pytest.mark.skip(reason="POSENC_BACKEND=simd: only the simd backend runs")]
                   if ENV_BACKEND == "simd" else [])
    params = [pytest.param(("numpy", None), id="numpy", marks=numpy_marks)]
    if _native is None:
        if ENV_BACKEND == "simd":
            marks = []  # the fixture fails: simd was asked for and is not there
        else:
            marks = [pytest.mark.skip(reason="native extension engine.kernels._native not built "
                                             f"(python setup.py build_ext --inplace): {_NATIVE_ERR}")]
        return params + [pytest.param(("simd", None), id="simd", marks=marks)]
    marks = ([pytest.mark.skip(reason="POSENC_BACKEND=numpy: only the numpy backend runs")]
             if ENV_BACKEND == "numpy" else [])
    return params + [pytest.param(("simd", lv), id=f"simd-{lv}", marks=marks)
                     for lv in _native.levels()]


@pytest.fixture(params=_backend_params())
def kern(request):
    name, level = request.param
    if name == "numpy":
        yield ref
        return
    if _native is None:
        pytest.fail(f"POSENC_BACKEND=simd but engine.kernels._native is not built: {_NATIVE_ERR}")
    prev = _native._set_level(level)
    try:
        yield _native
    finally:
        _native._set_level(prev)


def rng_for(*key) -> np.random.Generator:
    """A generator seeded by POSENC_TEST_SEED and the test's own key (stable across runs)."""
    return np.random.default_rng([SEED, zlib.crc32(repr(key).encode())])


def bits(a: np.ndarray) -> np.ndarray:
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize])


def assert_same(got: np.ndarray, want: np.ndarray, what=""):
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape)
    g, w = bits(got), bits(want)
    if not np.array_equal(g, w):
        i = np.argwhere(g != w)[0]
        raise AssertionError(f"{what}: {int((g != w).sum())} of {g.size} differ (seed "
                             f"{SEED}); first at {tuple(i)}: {hex(g[tuple(i)])} != "
                             f"{hex(w[tuple(i)])}")


# ------------------------------------------------------------------------------- round_into

def rounding_inputs(dtype: str) -> np.ndarray:
    """float64 values that stress the single rounding to ``dtype``."""
    r = rng_for("round", dtype)
    n = 20000
    parts = [
        r.integers(0, 2**64, n, dtype=np.uint64).view(np.float64),       # every class of double
        r.standard_normal(n) * 10.0 ** r.integers(-12, 12, n),
    ]
    for mant_bits, lo, hi in ((10, -26, 17), (7, -135, 129), (23, -150, 129)):
        k = r.integers(0, 2**mant_bits, n).astype(np.float64)
        e = r.integers(lo, hi, n).astype(np.float64)
        sign = r.choice([-1.0, 1.0], n)
        tie = (2.0**mant_bits + k + 0.5) * 2.0 ** (e - mant_bits)        # exact ties
        parts += [sign * tie, sign * np.nextafter(tie, 0), sign * np.nextafter(tie, np.inf)]
        sub = (k + 0.5) * 2.0 ** {10: -24, 7: -133, 23: -149}[mant_bits]  # subnormal ties
        parts += [sign * sub, sign * np.nextafter(sub, np.inf)]
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0,
                1 + 2**-11 + 2**-30,            # float16 through float32 would give 1.0
                1 + 2**-8 + 2**-40,             # the same trap for bfloat16
                65504.0, 65519.99, 65520.0, 65536.0, 2**-24, 2**-25, 2**-25 * (1 + 2**-52),
                2**-14, 2**-126, 2**-133, 2**-134, 3 * 2**-134, 1e-310, -1e-310, 5e-324,
                float(np.finfo(np.float32).max), 3.4028235677973366e38, 3.402823669209385e38,
                dtypes.MAX_FINITE["bfloat16"], 3.3961e38, np.finfo(np.float64).max, -1e300]
    parts.append(np.array(specials * 3))   # * 3: some land in the vector body, some in the tail
    return np.concatenate(parts)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_round_into_matches_reference(kern, dtype):
    x = rounding_inputs(dtype)
    for n in (x.size, x.size - 3, 7, 1, 0):  # vector body and scalar tails
        got, want = np.empty(n, STORAGE[dtype]), np.empty(n, STORAGE[dtype])
        assert kern.round_into(x[:n], got, dtype) == ref.round_into(x[:n], want, dtype)
        assert_same(got, want, f"round_into {dtype} n={n}")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_round_into_equals_round_f64(kern, dtype):
    """Without overflow or NaN, round_into is engine.dtypes.round_f64 bit for bit, any shape."""
    x = rounding_inputs(dtype)
    x = x[np.isfinite(x) & (np.abs(x) < dtypes.MAX_FINITE[dtype])][:3 * 5 * 700]
    x = x.reshape(3, 5, 700)
    out = np.empty(x.shape, STORAGE[dtype])
    assert kern.round_into(x, out, dtype) is False
    assert_same(out, dtypes.round_f64(x, dtype), f"round_f64 {dtype}")
    scalar = np.empty((), STORAGE[dtype])
    assert kern.round_into(np.array(-0.0), scalar, dtype) is False
    assert bits(scalar[None])[0] == bits(dtypes.round_f64(np.array([-0.0]), dtype))[0]


def test_round_into_single_rounding_examples(kern):
    cases = {  # value -> float16 bits, bfloat16 bits
        1 + 2**-11: (0x3C00, 0x3F80),            # tie to even
        1 + 2**-11 + 2**-30: (0x3C01, 0x3F80),   # just above the tie: up (float32 hop: down)
        1 + 3 * 2**-11: (0x3C02, 0x3F80),
        1 + 2**-8 + 2**-40: (0x3C04, 0x3F81),   # bfloat16 tie, just above: up
        2**-25: (0x0000, 0x3300),                # float16 subnormal tie -> 0
        3 * 2**-25: (0x0002, 0x33C0),            # float16 subnormal tie -> even
        -(2**-134): (0x8000, 0x8000),            # bfloat16 subnormal tie -> -0
        3 * 2**-134: (0x0000, 0x0002),
    }
    for v, (h, b) in cases.items():
        for dtype, want in (("float16", h), ("bfloat16", b)):
            out = np.empty(1, STORAGE[dtype])
            kern.round_into(np.array([v]), out, dtype)
            assert bits(out)[0] == want, (v, dtype, hex(bits(out)[0]), hex(want))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_round_into_overflow_flag(kern, dtype):
    # the tie just above the largest finite value rounds (to even) to infinity; below it, not
    big = {"float32": 2.0**128 - 2.0**103, "float16": 65520.0, "bfloat16": 2.0**128 - 2.0**119}[dtype]
    edge = float(np.nextafter(big, 0))
    out = np.empty(9, STORAGE[dtype])
    assert kern.round_into(np.array([1.0] * 8 + [big]), out, dtype) is True
    assert kern.round_into(np.array([-big] + [1.0] * 8), out, dtype) is True
    assert kern.round_into(np.array([edge, -edge] + [0.5] * 7), out, dtype) is False
    # infinities and NaN in the input are not an overflow (the caller sees them anyway)
    assert kern.round_into(np.array([np.inf, -np.inf, np.nan] * 3), out, dtype) is False
    with pytest.raises(SpecError):
        dtypes.round_f64(np.array([big]), dtype)


# ------------------------------------------------------------------------- gathers and RoPE

GATHER_DTYPES = [np.float32, np.float16, np.uint16, np.int32, np.int16, np.uint32]


def _table(r, n, w, dt):
    raw = r.integers(0, 2**32, (n, w), dtype=np.uint64).astype(np.uint32)
    return raw.astype(np.uint16).view(dt) if np.dtype(dt).itemsize == 2 else raw.view(dt)


def _rows(r, n_table, n):
    rows = r.integers(0, n_table, n).astype(np.int64)
    if n >= 4:
        rows[:4] = [n_table - 1, 0, rows[2], rows[2]]  # both ends, a repeat
    return rows


@pytest.mark.parametrize("dt", GATHER_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", [0, 1, 5, 300])
def test_gather_rows(kern, dt, n):
    r = rng_for("gather", np.dtype(dt).name, n)
    for w in (1, 3, 64):
        table = _table(r, 257, w, dt)
        rows = _rows(r, 257, n)
        got, want = np.empty((n, w), dt), np.empty((n, w), dt)
        assert kern.gather_rows(table, rows, got) is None
        ref.gather_rows(table, rows, want)
        assert_same(got, want, f"gather {np.dtype(dt).name} w={w}")
        assert_same(want, table[rows], "reference")
    empty = np.empty((0, 4), dt)
    kern.gather_rows(empty, np.empty(0, np.int64), np.empty((0, 4), dt))


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
@pytest.mark.parametrize("dt", GATHER_DTYPES, ids=lambda d: np.dtype(d).name)
def test_rope_expand(kern, layout, dt):
    r = rng_for("rope", layout, np.dtype(dt).name)
    for h, n in ((1, 3), (32, 0), (32, 100), (67, 9)):
        half = _table(r, 501, h, dt)
        rows = _rows(r, 501, n)
        got, want = np.empty((n, 2 * h), dt), np.empty((n, 2 * h), dt)
        assert kern.rope_expand(half, rows, got, layout) is None
        ref.rope_expand(half, rows, want, layout)
        assert_same(got, want, f"rope_expand {layout} h={h}")
        picked = half[rows]
        if layout == "half_split":
            assert_same(want, np.concatenate([picked, picked], axis=1), "reference")
        else:
            assert_same(want, np.repeat(picked, 2, axis=1), "reference")


# ------------------------------------------------------------------------------------ ALiBi

def alibi_slopes(num_heads: int) -> np.ndarray:
    """Press et al. 2022 slopes (power-of-two heads): 2^(-8(h+1)/H), float64."""
    return 2.0 ** (-8.0 * np.arange(1, num_heads + 1) / num_heads)


def _positions(r, n, big=False):
    p = r.integers(0, 4096, n).astype(np.int64)
    if big and n >= 3:
        p[:3] = [I31, 0, I31 - 1]
        p[3:n // 2] = r.integers(0, I31 + 1, max(n // 2 - 3, 0))
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
            want = np.empty((H, nq, nk), STORAGE[dtype])
            o_got = kern.alibi_block(slopes, q, k, got, dtype, sym, mask)
            o_want = ref.alibi_block(slopes, q, k, want, dtype, sym, mask)
            assert o_got == o_want, (H, nq, nk, case)
            assert_same(got, want, f"alibi {mode} {dtype} {(H, nq, nk)} case={case}")
            if dtype == "float16" and big and H and nq > 2 and nk > 2:
                assert o_want  # 2^31 * 2^-1 overflows float16 ...
            if not o_want and H and nq and nk:
                # ... and where nothing overflows, it is round_f64 of the float64 formula
                d = q[:, None].astype(np.float64) - k[None, :].astype(np.float64)
                v = 0.0 - slopes[:, None, None] * (np.abs(d) if sym else d)  # +0.0 on the diagonal
                if mask:
                    v[:, k[None, :] > q[:, None]] = -dtypes.MAX_FINITE[dtype]
                assert_same(want, dtypes.round_f64(v, dtype), "reference vs formula")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_alibi_mask_value_and_masked_overflow(kern, dtype):
    # key far in the future: unmasked it would overflow float16; masked it is finfo.min and no
    # overflow is reported
    q = np.array([0, 10], np.int64)
    k = np.array([0, 5, 10, 1_000_000], np.int64)
    slopes = np.array([1.0, 0.5])
    out = np.empty((2, 2, 4), STORAGE[dtype])
    assert kern.alibi_block(slopes, q, k, out, dtype, False, True) is False
    mv = dtypes.mask_value(dtype)
    assert (bits(out[:, 0, 1:]) == bits(np.array([mv]))[0]).all()
    assert (bits(out[:, 1, 3]) == bits(np.array([mv]))[0]).all()
    unmasked = kern.alibi_block(slopes, q, k, out, dtype, False, False)
    assert unmasked is (dtype == "float16")


def test_alibi_positions_beyond_2_53(kern):
    """The exact-float64 fast path needs |position| <= 2^53; past it both backends use the
    int64 (wrapping) difference."""
    q = np.array([0, 2**62, -(2**63), 2**53 + 1], np.int64)
    k = np.array([2**63 - 1, 1, 2**53, -5], np.int64)
    slopes = np.array([1.0, 2.0**-8])
    for sym, mask in ((False, False), (True, False), (False, True)):
        got, want = np.empty((2, 4, 4), np.float32), np.empty((2, 4, 4), np.float32)
        kern.alibi_block(slopes, q, k, got, "float32", sym, mask)
        ref.alibi_block(slopes, q, k, want, "float32", sym, mask)
        assert_same(got, want, f"alibi beyond 2^53 sym={sym} mask={mask}")


def test_alibi_nan_slope_does_not_crash(kern):
    slopes = np.array([np.nan, np.inf, -np.inf, 1e308])
    q, k = np.arange(3, dtype=np.int64), np.arange(5, dtype=np.int64)
    for dtype in FLOAT_DTYPES:
        got, want = np.empty((4, 3, 5), STORAGE[dtype]), np.empty((4, 3, 5), STORAGE[dtype])
        assert kern.alibi_block(slopes, q, k, got, dtype, False, False) == \
            ref.alibi_block(slopes, q, k, want, dtype, False, False)
        assert_same(got, want, f"alibi nan {dtype}")


# --------------------------------------------------------------------------------------- T5

@pytest.mark.parametrize("radius", [0, 1, 7, 128, 5000])
def test_t5_block(kern, radius):
    r = rng_for("t5", radius)
    lut = r.integers(-(2**31), 2**31, 2 * radius + 1).astype(np.int32)
    for nq, nk in ((1, 8192), (33, 70), (64, 300), (0, 5), (4, 0)):
        for case, (q, k) in enumerate(_query_key_pairs(r, nq, nk)):
            got, want = np.empty((nq, nk), np.int32), np.empty((nq, nk), np.int32)
            assert kern.t5_block(lut, q, k, got, radius) is None
            ref.t5_block(lut, q, k, want, radius)
            assert_same(got, want, f"t5 r={radius} {(nq, nk)} case={case}")
    q = np.array([0, 2**62, -(2**63), 5], np.int64)  # wrapping differences, as numpy
    k = np.array([2**63 - 1, 1, 2**53, -5], np.int64)
    got, want = np.empty((4, 4), np.int32), np.empty((4, 4), np.int32)
    kern.t5_block(lut, q, k, got, radius)
    ref.t5_block(lut, q, k, want, radius)
    assert_same(got, want, "t5 extreme positions")


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
    pos = np.concatenate([np.arange(64), r.integers(0, 131072, 200),
                          r.integers(0, I31 + 1, 56), [I31, 0]]).astype(np.int64)
    return freqs, pos


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("scale", [1.0, 1.2302585092994046])  # yarn: 0.1 ln(factor 16) + 1
def test_sincos_within_one_ulp_of_numpy(kern, dtype, scale):
    r = rng_for("sincos", dtype, scale)
    freqs, pos = _sincos_inputs(r)
    for f in (freqs, np.tile(freqs, 9)[:600]):   # 600 > one 512-wide staging block
        shape = (pos.size, f.size)
        gc, gs = np.empty(shape, STORAGE[dtype]), np.empty(shape, STORAGE[dtype])
        wc, ws = np.empty(shape, STORAGE[dtype]), np.empty(shape, STORAGE[dtype])
        assert kern.sincos(f, pos, scale, gc, gs, dtype) is False
        assert ref.sincos(f, pos, scale, wc, ws, dtype) is False
        for got, want, what in ((gc, wc, "cos"), (gs, ws, "sin")):
            diff = np.abs(ordered(got) - ordered(want))
            assert diff.max() <= 1, f"{what} {dtype}: {int((diff > 1).sum())} values > 1 ulp"
    empty = np.empty((0, freqs.size), STORAGE[dtype])
    kern.sincos(freqs, np.empty(0, np.int64), scale, empty, empty.copy(), dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_sincos_accuracy_vs_mpmath(kern, dtype):
    """No less accurate than numpy against a 40-digit reference, value by value."""
    mpmath = pytest.importorskip("mpmath")
    r = rng_for("sincos-mp", dtype)
    freqs, pos = _sincos_inputs(r)
    pos = r.choice(pos, 48, replace=False)
    f = r.choice(freqs, 24, replace=False)
    shape = (pos.size, f.size)
    outs = {name: (np.empty(shape, STORAGE[dtype]), np.empty(shape, STORAGE[dtype]))
            for name in ("got", "numpy")}
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
        e = exact[name]
        spacing = np.maximum(_ulp_of(e, dtype), 2.0**-149)
        err_got = np.abs(dtypes.to_float(outs["got"][k], dtype).astype(np.float64) - e) / spacing
        err_np = np.abs(dtypes.to_float(outs["numpy"][k], dtype).astype(np.float64) - e) / spacing
        assert (err_got <= np.maximum(err_np, 0.5) + 1e-6).all(), \
            f"{name} {dtype}: max err {err_got.max():.3f} ulp vs numpy {err_np.max():.3f}"


def _ulp_of(x, dtype):
    x = np.abs(x)
    if dtype == "float32":
        return np.spacing(x.astype(np.float32)).astype(np.float64)
    if dtype == "float16":
        return np.spacing(x.astype(np.float16)).astype(np.float64)
    e = np.floor(np.log2(np.where(x > 0, x, 1.0)))
    return np.exp2(np.maximum(e, -126.0) - 7.0)


def test_sincos_nonfinite_does_not_crash(kern):
    freqs = np.array([np.nan, np.inf, 1e308, 1.0])
    pos = np.array([0, 1, I31], np.int64)
    for dtype in FLOAT_DTYPES:
        outs = [np.empty((3, 4), STORAGE[dtype]) for _ in range(4)]
        kern.sincos(freqs, pos, 1.0, outs[0], outs[1], dtype)
        ref.sincos(freqs, pos, 1.0, outs[2], outs[3], dtype)
        for got, want in ((outs[0], outs[2]), (outs[1], outs[3])):
            g, w = dtypes.to_float(got, dtype), dtypes.to_float(want, dtype)
            assert (np.isnan(g) == np.isnan(w)).all()
        # a scale that overflows is reported
        assert kern.sincos(np.array([0.0]), pos, 1e300, *[np.empty((3, 1), STORAGE[dtype])
                                                          for _ in range(2)], dtype) is True


# -------------------------------------------------------------------------------- bad input

def _ok_args():
    f32 = np.float32
    return {
        "gather_rows": (np.zeros((4, 3), f32), np.array([0, 3], np.int64), np.empty((2, 3), f32)),
        "rope_expand": (np.zeros((4, 3), f32), np.array([0, 3], np.int64), np.empty((2, 6), f32),
                        "half_split"),
        "round_into": (np.zeros(5), np.empty(5, np.float16), "float16"),
        "alibi_block": (np.ones(2), np.arange(3), np.arange(4), np.empty((2, 3, 4), np.uint16),
                        "bfloat16", False, True),
        "t5_block": (np.zeros(5, np.int32), np.arange(3), np.arange(4), np.empty((3, 4), np.int32),
                     2),
        "sincos": (np.ones(3), np.arange(4), 1.0, np.empty((4, 3), f32), np.empty((4, 3), f32),
                   "float32"),
    }


def _noncontig(a):
    b = np.repeat(a, 2, axis=-1)[..., ::2]
    assert not b.flags.c_contiguous and np.array_equal(b, a)
    return b


def _unaligned(a):
    buf = np.zeros(a.nbytes + 1, np.uint8)
    b = buf[1:].view(a.dtype).reshape(a.shape)
    assert not b.flags.aligned
    return b


def _readonly(a):
    a = a.copy()
    a.flags.writeable = False
    return a


BAD = [  # kernel, argument index, replacement, exception
    ("gather_rows", 0, lambda a: a.astype(np.float64), TypeError),
    ("gather_rows", 0, lambda a: a.astype(np.int8), TypeError),
    ("gather_rows", 0, lambda a: a.ravel(), ValueError),
    ("gather_rows", 0, _noncontig, ValueError),
    ("gather_rows", 0, lambda a: a.tolist(), TypeError),
    ("gather_rows", 0, lambda a: a.astype(">f4"), TypeError),
    ("gather_rows", 1, lambda a: a.astype(np.int32), TypeError),
    ("gather_rows", 1, lambda a: np.array([0, 4], np.int64), IndexError),
    ("gather_rows", 1, lambda a: np.array([-1, 0], np.int64), IndexError),
    ("gather_rows", 1, lambda a: np.array([2**62, 0], np.int64), IndexError),
    ("gather_rows", 1, lambda a: np.array([0, 1, 2, 3], np.int64)[::2], ValueError),
    ("gather_rows", 2, lambda a: a.astype(np.float16), TypeError),
    ("gather_rows", 2, lambda a: np.empty((3, 3), np.float32), ValueError),
    ("gather_rows", 2, _readonly, ValueError),
    ("gather_rows", 2, _unaligned, ValueError),
    ("rope_expand", 2, lambda a: np.empty((2, 3), np.float32), ValueError),
    ("rope_expand", 3, lambda a: "rotate_half", ValueError),
    ("rope_expand", 1, lambda a: np.array([5], np.int64), IndexError),
    ("round_into", 0, lambda a: a.astype(np.float32), TypeError),
    ("round_into", 0, _unaligned, ValueError),
    ("round_into", 1, lambda a: a.astype(np.float32), TypeError),
    ("round_into", 1, lambda a: np.empty(6, np.float16), ValueError),
    ("round_into", 1, lambda a: np.empty((5, 1), np.float16), ValueError),
    ("round_into", 2, lambda a: "float64", ValueError),
    ("alibi_block", 1, lambda a: a.astype(np.int32), TypeError),
    ("alibi_block", 0, lambda a: a.reshape(2, 1), ValueError),
    ("alibi_block", 3, lambda a: np.empty((2, 4, 3), np.uint16), ValueError),
    ("alibi_block", 3, lambda a: a.view(np.float16), TypeError),
    ("alibi_block", 4, lambda a: "bf16", ValueError),
    ("alibi_block", 5, lambda a: True, ValueError),  # symmetric with mask_future
    ("t5_block", 0, lambda a: np.zeros(4, np.int32), ValueError),
    ("t5_block", 0, lambda a: a.astype(np.int64), TypeError),
    ("t5_block", 3, lambda a: a.astype(np.float32), TypeError),
    ("t5_block", 4, lambda a: -1, ValueError),
    ("t5_block", 2, _noncontig, ValueError),
    ("sincos", 1, lambda a: a.astype(np.float64), TypeError),
    ("sincos", 4, lambda a: np.empty((4, 2), np.float32), ValueError),
    ("sincos", 3, _readonly, ValueError),
    ("sincos", 5, lambda a: "half", ValueError),
]


@pytest.mark.parametrize("name,idx,make,exc", BAD,
                         ids=[f"{b[0]}-arg{b[1]}-{i}" for i, b in enumerate(BAD)])
def test_bad_input_raises(kern, name, idx, make, exc):
    args = list(_ok_args()[name])
    getattr(kern, name)(*args)  # the unmodified call is fine
    args[idx] = make(args[idx])
    with pytest.raises(exc):
        getattr(kern, name)(*args)


# ----------------------------------------------------------------------- backend selection

def _import_in_subprocess(backend: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "POSENC_BACKEND": backend}
    code = "import engine.kernels as k; print(k.BACKEND, ','.join(k.FEATURES), k.info())"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_backend_bogus_is_refused_at_import():
    p = _import_in_subprocess("bogus")
    assert p.returncode != 0
    assert "ConfigError" in p.stderr and "POSENC_BACKEND" in p.stderr and "bogus" in p.stderr


def test_backend_numpy_forced():
    p = _import_in_subprocess("numpy")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[0] == "numpy"


def test_backend_simd_forced():
    p = _import_in_subprocess("simd")
    if _native is None:
        assert p.returncode != 0 and "not built" in p.stderr, p.stderr
    else:
        assert p.returncode == 0, p.stderr
        backend, feats = p.stdout.split()[:2]
        assert backend == "simd" and feats  # x86-64: avx2,f16c or sse2; aarch64: neon


def test_selected_backend_and_info():
    import engine.kernels as k
    want = {"numpy": "numpy", "simd": "simd"}.get(ENV_BACKEND,
                                                  "simd" if _native is not None else "numpy")
    assert k.BACKEND == want
    info = k.info()
    assert info["backend"] == k.BACKEND and info["features"] == list(k.FEATURES)
    if k.BACKEND == "numpy":
        assert k.FEATURES == () and info["compiler"] is None
    else:
        assert isinstance(info["compiler"], str) and k.FEATURES == _native.FEATURES
    assert set(k.KERNELS) <= set(dir(k))
