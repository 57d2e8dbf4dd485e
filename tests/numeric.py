"""Numeric helpers for the table-math tests: ulps of each output dtype and the comparisons the
tests make against transformers or float64 references written here from SEMANTICS.md."""

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


def ulp(x, dtype: str) -> np.ndarray:
    """Spacing of ``dtype`` at magnitude |x| (the gap to the next larger representable value)."""
    x = np.abs(np.asarray(x, dtype=np.float64))
    if dtype == "float32":
        return np.spacing(x.astype(np.float32)).astype(np.float64)
    if dtype == "float16":
        return np.spacing(np.minimum(x, 65504.0).astype(np.float16)).astype(np.float64)
    if dtype == "bfloat16":
        with np.errstate(divide="ignore"):
            e = np.floor(np.log2(np.where(x > 0, x, 1.0)))
        e = np.maximum(e, -126.0)  # subnormals: fixed quantum 2**-133
        return np.exp2(e - 7.0)
    raise ValueError(dtype)


def assert_within_ulp(got, ref64, dtype: str, slack=0.0, n_ulp=1.0, what=""):
    """|got - ref| <= n_ulp * ulp_dtype(max(|got|, |ref|)) + slack, elementwise.

    ``slack`` is the float64 reference's own absolute error (e.g. (|angle|+1)·64·eps64 for a
    cos/sin whose angle is computed differently by a few float64 ulps); it only matters near zero.
    """
    g = to_f64(got, dtype)
    r = np.asarray(ref64, dtype=np.float64)
    assert g.shape == r.shape, (what, g.shape, r.shape)
    assert np.isfinite(g).all(), f"{what}: non-finite output"
    tol = n_ulp * ulp(np.maximum(np.abs(g), np.abs(r)), dtype) + slack
    err = np.abs(g - r)
    bad = err > tol
    if bad.any():
        idx = np.argwhere(bad)[:5]
        detail = "; ".join(f"at {tuple(int(v) for v in i)}: got {g[tuple(i)]!r} want {r[tuple(i)]!r}"
                           for i in idx)
        raise AssertionError(f"{what} [{dtype}]: {int(bad.sum())} of {bad.size} values off by "
                             f"more than {n_ulp} ulp (max err/tol {float((err / tol).max()):.3g}); {detail}")


def assert_close(got, ref, atol, rtol=0.0, what=""):
    g = np.asarray(got, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    assert g.shape == r.shape, (what, g.shape, r.shape)
    tol = np.broadcast_to(atol + rtol * np.abs(r), r.shape)
    err = np.abs(g - r)
    bad = err > tol
    if bad.any():
        i = tuple(int(v) for v in np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} values out of tolerance; "
                             f"first at {i}: got {g[i]!r} want {r[i]!r} (tol {tol[i]:.3g}); "
                             f"max err {float(err.max()):.3g}")


def spec_error(excinfo):
    """The SpecError's loc as a tuple (tests check loc[0]/loc[1], not message text)."""
    return tuple(excinfo.value.loc)
