"""Numeric helpers for the table-math tests: ulps of each output dtype and the comparisons the
tests make against transformers or float64 references written here from docs/reference.md."""

from __future__ import annotations

import os

import numpy as np

SEED = int(os.environ.get("POSENC_TEST_SEED", "20240611"))
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
EPS64 = np.finfo(np.float64).eps


def to_f64(a, dtype: str) -> np.ndarray:
    """An output array of output dtype ``dtype`` as float64 (bfloat16 arrives as uint16 bits)."""
    a = np.asarray(a)
    if dtype == "bfloat16":
        assert a.dtype == np.uint16, a.dtype
        # Independent of engine.dtypes: bfloat16 is the top half of a float32.
        return (a.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    assert a.dtype == np.dtype(dtype), (a.dtype, dtype)
    return a.astype(np.float64)


# Precision (significand bits) and smallest normal exponent of each output dtype.
_FORMAT = {"float32": (24, -126), "float16": (11, -14), "bfloat16": (8, -126)}

# Every non-negative finite bfloat16, ascending (bit order is value order for a fixed sign),
# plus 2^128 standing for +inf: the rounding candidate just past the largest finite value.
_BF16_BITS = np.arange(0x0000, 0x7F80, dtype=np.uint32)
_BF16_VALS = np.concatenate([(_BF16_BITS << 16).view(np.float32).astype(np.float64), [2.0**128]])
_BF16_BITS = np.concatenate([_BF16_BITS, [0x7F80]]).astype(np.uint16)
BF16_MAX = float(_BF16_VALS[-2])


def ulp(x, dtype: str) -> np.ndarray:
    """Spacing of ``dtype`` in the binade of |x| (x a float64), subnormals included: the unit a
    correctly rounded result is within half of. Taken from x's own exponent, never from x
    rounded to dtype (which may round up into the next binade and double the spacing)."""
    p, emin = _FORMAT[dtype]
    x = np.abs(np.asarray(x, dtype=np.float64))
    e = np.frexp(x)[1] - 1  # floor(log2 x) for x > 0, exactly
    e = np.where(x > 0, np.maximum(e, emin), emin)
    return np.ldexp(1.0, (e - (p - 1)).astype(np.int64))


def nearest_bf16_bits(x) -> np.ndarray:
    """float64 -> bfloat16 bits, round to nearest, ties to the even bit pattern, by looking at
    the two neighbours (independent of posenc.engine.core.dtypes)."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    hi = np.clip(np.searchsorted(_BF16_VALS, a, side="left"), 0, len(_BF16_VALS) - 1)
    lo = np.clip(hi - 1, 0, None)
    d_lo, d_hi = a - _BF16_VALS[lo], _BF16_VALS[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (_BF16_BITS[hi] % 2 == 0))
    pick_hi |= a >= _BF16_VALS[-1]
    bits = np.where(pick_hi, _BF16_BITS[hi], _BF16_BITS[lo])
    return np.where(np.signbit(x), bits | 0x8000, bits).astype(np.uint16)


def rounded(x64, dtype: str) -> np.ndarray:
    """The float64 values ``x64`` rounded once, to nearest even, to ``dtype`` (as float64)."""
    x64 = np.asarray(x64, dtype=np.float64)
    if dtype == "bfloat16":
        return to_f64(nearest_bf16_bits(x64), dtype)
    return x64.astype(dtype).astype(np.float64)  # numpy converts float64 directly, rounding once


MAX_FINITE = {"float32": float(np.finfo(np.float32).max), "float16": 65504.0, "bfloat16": BF16_MAX}


def round_once(x64, dtype: str) -> np.ndarray:
    """The float64 values ``x64`` rounded once, to nearest even, to ``dtype``, as float64 values:
    +-inf past the largest finite value, NaN and infinities kept. Each x is scaled by a power of two
    (exact) so that ``dtype``'s spacing in x's binade (subnormals included) is 1, rounded to an
    integer by np.rint (ties to even) and scaled back: no cast of numpy's and nothing of
    posenc.engine.core.dtypes, an oracle of the kernels' round_into."""
    p, emin = _FORMAT[dtype]
    x = np.asarray(x64, dtype=np.float64)
    finite = np.isfinite(x)
    xs = np.where(finite, x, 0.0)
    q = np.maximum(np.frexp(xs)[1] - 1, emin) - (p - 1)  # the exponent of the spacing at |x|
    with np.errstate(over="ignore"):
        v = np.ldexp(np.rint(np.ldexp(xs, -q)), q)
    v = np.where(np.abs(v) > MAX_FINITE[dtype], np.copysign(np.inf, xs), v)
    return np.where(finite, v, x)


def as_storage(v64, dtype: str) -> np.ndarray:
    """Values ``dtype`` holds exactly (round_once's) as its storage: float32/float16 arrays, bfloat16
    as uint16 bits (the top half of the float32). No rounding is left to any cast; NaN's bits are
    not defined here (compare NaN as NaN)."""
    v = np.asarray(v64, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        if dtype == "bfloat16":
            return (v.astype(np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)
        return v.astype(dtype)


def assert_rounded_once(got, ref64, dtype: str, what=""):
    """``got`` equals the float64 reference rounded once to ``dtype``, value for value (the
    promise where the float64 value itself is exact, e.g. ALiBi's −m·d; -0.0 equals +0.0)."""
    g, want = to_f64(got, dtype), rounded(ref64, dtype)
    assert g.shape == want.shape, (what, g.shape, want.shape)
    bad = g != want
    if bad.any():
        idx = np.argwhere(bad)[:5]
        detail = "; ".join(
            f"at {tuple(int(v) for v in i)}: got {g[tuple(i)]!r} want {want[tuple(i)]!r} "
            f"(float64 {np.asarray(ref64, dtype=np.float64)[tuple(i)]!r})"
            for i in idx
        )
        raise AssertionError(
            f"{what} [{dtype}]: {int(bad.sum())} of {bad.size} values are not the "
            f"float64 value rounded once; {detail}"
        )


def assert_same_rounding(got, table, ref64, dtype: str, slack, what=""):
    """``got`` and ``table`` (another library's float64 values rounded once to dtype) are equal,
    except where the float64 value lies within ``slack`` (its own error) of the midpoint between
    two neighbours, where the two roundings may honestly pick either neighbour."""
    g, t, r = to_f64(got, dtype), np.asarray(table, dtype=np.float64), np.asarray(ref64, dtype=np.float64)
    assert g.shape == t.shape == r.shape, (what, g.shape, t.shape, r.shape)
    slack = np.broadcast_to(np.asarray(slack, dtype=np.float64), r.shape)
    differ = g != t
    near_tie = (np.abs(g - t) <= ulp(np.minimum(np.abs(g), np.abs(t)), dtype)) & (
        np.abs(r - (g + t) / 2) <= slack
    )
    bad = differ & ~near_tie
    if bad.any():
        i = tuple(int(v) for v in np.argwhere(bad)[0])
        raise AssertionError(
            f"{what} [{dtype}]: {int(bad.sum())} of {bad.size} values differ from the other "
            f"rounding away from a tie; first at {i}: got {g[i]!r}, table {t[i]!r}, float64 {r[i]!r}"
        )


def angle_slack(ang, exponent, base: float, scale: float = 1.0) -> np.ndarray:
    """The float64 reference's own absolute error in scale·cos(ang) and scale·sin(ang), where
    ang = p·base^(−exponent) is formed in float64 (here, and differently inside posenc).

    Each side's base^(−e) carries the rounding of e (relative 2^-53, magnified by ln(base)·e by
    the power) and at most 2 ulps from pow, the division and a scaling blend; both sides
    together: (ln(base)·e + 4)·eps64, times |ang| through the product with p, plus 2·eps64 for
    evaluating cos/sin themselves. At e = 0 (the first frequency, exactly 1) that leaves
    4·eps64·|ang|: at p = 2^31 − 1 about 2e-6, i.e. the float64 angle's own spacing (4.8e-7)
    a few times over, which no float64 reference can resolve more finely.
    """
    ang = np.abs(np.asarray(ang, dtype=np.float64))
    e = np.asarray(exponent, dtype=np.float64)
    return (ang * (np.log(base) * e + 4.0) + 2.0) * EPS64 * scale


def assert_within_ulp(got, ref64, dtype: str, slack=0.0, n_ulp=0.5, what=""):
    """|got − ref| <= n_ulp·ulp_dtype(|ref| + slack) + slack, elementwise.

    The default, half an ulp, is the promise "computed in float64 and rounded once" (docs/reference.md);
    ``slack`` is the float64 reference's own absolute error (angle_slack). A larger ``n_ulp`` is
    for comparisons with tables that are themselves rounded (transformers' float32 tables).
    """
    g = to_f64(got, dtype)
    r = np.asarray(ref64, dtype=np.float64)
    assert g.shape == r.shape, (what, g.shape, r.shape)
    assert np.isfinite(g).all(), f"{what}: non-finite output"
    tol = n_ulp * ulp(np.abs(r) + slack, dtype) + slack
    err = np.abs(g - r)
    bad = err > tol
    if bad.any():
        idx = np.argwhere(bad)[:5]
        detail = "; ".join(
            f"at {tuple(int(v) for v in i)}: got {g[tuple(i)]!r} want {r[tuple(i)]!r}" for i in idx
        )
        raise AssertionError(
            f"{what} [{dtype}]: {int(bad.sum())} of {bad.size} values off by "
            f"more than {n_ulp} ulp (max err/tol {float((err / tol).max()):.3g}); {detail}"
        )


def assert_close(got, ref, atol, rtol=0.0, what=""):
    g = np.asarray(got, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    assert g.shape == r.shape, (what, g.shape, r.shape)
    tol = np.broadcast_to(atol + rtol * np.abs(r), r.shape)
    err = np.abs(g - r)
    bad = err > tol
    if bad.any():
        i = tuple(int(v) for v in np.argwhere(bad)[0])
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.size} values out of tolerance; "
            f"first at {i}: got {g[i]!r} want {r[i]!r} (tol {tol[i]:.3g}); "
            f"max err {float(err.max()):.3g}"
        )


def spec_error(excinfo):
    """The SpecError's loc as a tuple (tests check loc[0]/loc[1], not message text)."""
    return tuple(excinfo.value.loc)
