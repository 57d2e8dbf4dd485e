"""Kernels, every backend bit for bit against independent references: the single rounding of
float64 into each storage dtype (tests/numeric.round_once), row gathers and the RoPE half-to-full
expansion (numpy indexing of the table); the native backends also against the numpy one where
NaN's bits are left open.
"""

from __future__ import annotations

import numpy as np
import pytest

from posenc.engine.core import dtypes
from posenc.engine.core.errors import SpecError
from posenc.engine.kernels import numpy_impl as ref
from tests.engine.kernel_helpers import STORAGE, assert_same, bits, rng_for
from tests.numeric import FLOAT_DTYPES, as_storage, round_once


def oracle(x: np.ndarray, dtype: str) -> tuple[np.ndarray, bool]:
    """float64 ``x`` rounded once to ``dtype``'s storage, and whether a finite value overflowed."""
    v = round_once(x, dtype)
    return as_storage(v, dtype), bool((np.isinf(v) & np.isfinite(x)).any())


def rounding_inputs(dtype: str) -> np.ndarray:
    """float64 values that stress the single rounding to ``dtype``."""
    r = rng_for("round", dtype)
    n = 20000
    parts = [
        r.integers(0, 2**64, n, dtype=np.uint64).view(np.float64),  # every class of double
        r.standard_normal(n) * 10.0 ** r.integers(-12, 12, n),
    ]
    for mant_bits, lo, hi in ((10, -26, 17), (7, -135, 129), (23, -150, 129)):
        k = r.integers(0, 2**mant_bits, n).astype(np.float64)
        e = r.integers(lo, hi, n).astype(np.float64)
        sign = r.choice([-1.0, 1.0], n)
        tie = (2.0**mant_bits + k + 0.5) * 2.0 ** (e - mant_bits)  # exact ties
        parts += [sign * tie, sign * np.nextafter(tie, 0), sign * np.nextafter(tie, np.inf)]
        sub = (k + 0.5) * 2.0 ** {10: -24, 7: -133, 23: -149}[mant_bits]  # subnormal ties
        parts += [sign * sub, sign * np.nextafter(sub, np.inf)]
    specials = [
        0.0,
        -0.0,
        np.inf,
        -np.inf,
        np.nan,
        -np.nan,
        1.0,
        -1.0,
        1 + 2**-11 + 2**-30,  # float16 through float32 would give 1.0
        1 + 2**-8 + 2**-40,  # the same trap for bfloat16
        65504.0,
        65519.99,
        65520.0,
        65536.0,
        2**-24,
        2**-25,
        2**-25 * (1 + 2**-52),
        2**-14,
        2**-126,
        2**-133,
        2**-134,
        3 * 2**-134,
        1e-310,
        -1e-310,
        5e-324,
        float(np.finfo(np.float32).max),
        3.4028235677973366e38,
        3.402823669209385e38,
        dtypes.MAX_FINITE["bfloat16"],
        3.3961e38,
        np.finfo(np.float64).max,
        -1e300,
    ]
    parts.append(np.array(specials * 3))  # * 3: some land in the vector body, some in the tail
    return np.concatenate(parts)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_round_into_matches_reference(kern, dtype):
    x = rounding_inputs(dtype)
    for n in (x.size, x.size - 3, 7, 1, 0):  # vector body and scalar tails
        got = np.empty(n, STORAGE[dtype])
        want, over = oracle(x[:n], dtype)
        assert kern.round_into(x[:n], got, dtype) == over
        assert_same(got, want, f"round_into {dtype} n={n}", nan=np.isnan(x[:n]))
        if kern is not ref:  # NaN's bits: the same as the numpy backend's
            same = np.empty(n, STORAGE[dtype])
            ref.round_into(x[:n], same, dtype)
            assert_same(got, same, f"round_into {dtype} n={n} against the numpy backend")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_round_into_equals_round_f64(kern, dtype):
    """Without overflow or NaN, round_into is engine.dtypes.round_f64 bit for bit, any shape, and
    both are the float64 value rounded once."""
    x = rounding_inputs(dtype)
    x = x[np.isfinite(x) & (np.abs(x) < dtypes.MAX_FINITE[dtype])][: 3 * 5 * 700]
    x = x.reshape(3, 5, 700)
    out = np.empty(x.shape, STORAGE[dtype])
    assert kern.round_into(x, out, dtype) is False
    assert_same(out, oracle(x, dtype)[0], f"round_into {dtype}")
    assert_same(dtypes.round_f64(x, dtype), oracle(x, dtype)[0], f"round_f64 {dtype}")
    scalar = np.empty((), STORAGE[dtype])
    assert kern.round_into(np.array(-0.0), scalar, dtype) is False
    assert bits(scalar[None])[0] == {"float32": 0x80000000, "float16": 0x8000, "bfloat16": 0x8000}[dtype]


def test_round_into_single_rounding_examples(kern):
    cases = {  # value -> float16 bits, bfloat16 bits
        1 + 2**-11: (0x3C00, 0x3F80),  # tie to even
        1 + 2**-11 + 2**-30: (0x3C01, 0x3F80),  # just above the tie: up (float32 hop: down)
        1 + 3 * 2**-11: (0x3C02, 0x3F80),
        1 + 2**-8 + 2**-40: (0x3C04, 0x3F81),  # bfloat16 tie, just above: up
        2**-25: (0x0000, 0x3300),  # float16 subnormal tie -> 0
        3 * 2**-25: (0x0002, 0x33C0),  # float16 subnormal tie -> even
        -(2**-134): (0x8000, 0x8000),  # bfloat16 subnormal tie -> -0
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
        got = np.empty((n, w), dt)
        assert kern.gather_rows(table, rows, got) is None
        assert_same(got, table[rows], f"gather {np.dtype(dt).name} w={w}")
    empty = np.empty((0, 4), dt)
    kern.gather_rows(empty, np.empty(0, np.int64), np.empty((0, 4), dt))


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
@pytest.mark.parametrize("dt", GATHER_DTYPES, ids=lambda d: np.dtype(d).name)
def test_rope_expand(kern, layout, dt):
    r = rng_for("rope", layout, np.dtype(dt).name)
    for h, n in ((1, 3), (32, 0), (32, 100), (67, 9)):
        half = _table(r, 501, h, dt)
        rows = _rows(r, 501, n)
        got = np.empty((n, 2 * h), dt)
        assert kern.rope_expand(half, rows, got, layout) is None
        picked = half[
            rows
        ]  # half_split: [x | x] (rotate_half's pairs k, k + h); interleaved: x0 x0 x1 x1 ...
        want = (
            np.concatenate([picked, picked], axis=1)
            if layout == "half_split"
            else np.repeat(picked, 2, axis=1)
        )
        assert_same(got, want, f"rope_expand {layout} h={h}")


# ------------------------------------------------------------------------------------ ALiBi
