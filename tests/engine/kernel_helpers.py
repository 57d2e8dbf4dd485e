"""The kernel tests' backends and helpers.

Kernel layer: every backend against independent float64 math of each kernel's formula rounded
once by tests/numeric.round_once (never against posenc's own numpy backend, which is one of the
backends tested), and, for the native backends, against the numpy backend bit for bit where the
formula leaves bits open (NaN's).

Parametrized over the numpy backend and each dispatch level of the native one this CPU runs
("simd-avx2", "simd-baseline"), so the portable fallback is tested on an AVX2 machine too.
POSENC_BACKEND is honoured: under ``numpy`` the native params are skipped, under ``simd`` the
numpy param is, and under ``simd``
a missing extension fails rather than skips. Randomness comes from POSENC_TEST_SEED.

``kern`` (registered as a fixture by tests/engine/conftest.py) yields each backend in turn.
"""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

from posenc.engine.core import dtypes
from posenc.engine.kernels import numpy_impl as ref
from tests.numeric import SEED

try:
    from posenc.engine.kernels import _native
except ImportError as exc:  # not built: the simd params skip (or fail under POSENC_BACKEND=simd)
    _native, _NATIVE_ERR = None, str(exc)

ENV_BACKEND = os.environ.get("POSENC_BACKEND", "auto") or "auto"
STORAGE = dtypes.DTYPES
I31 = 2**31 - 1


def _backend_params():
    numpy_marks = (
        [pytest.mark.skip(reason="POSENC_BACKEND=simd: only the simd backend runs")]
        if ENV_BACKEND == "simd"
        else []
    )
    params = [pytest.param(("numpy", None), id="numpy", marks=numpy_marks)]
    if _native is None:
        if ENV_BACKEND == "simd":
            marks = []  # the fixture fails: simd was asked for and is not there
        else:
            marks = [
                pytest.mark.skip(
                    reason="native extension engine.kernels._native not built "
                    f"(python setup.py build_ext --inplace): {_NATIVE_ERR}"
                )
            ]
        return params + [pytest.param(("simd", None), id="simd", marks=marks)]
    marks = (
        [pytest.mark.skip(reason="POSENC_BACKEND=numpy: only the numpy backend runs")]
        if ENV_BACKEND == "numpy"
        else []
    )
    return params + [pytest.param(("simd", lv), id=f"simd-{lv}", marks=marks) for lv in _native.levels()]


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


def is_nan(a: np.ndarray) -> np.ndarray:
    """Where a storage array (float32, float16, or bfloat16 as uint16 bits) holds a NaN."""
    if a.dtype == np.uint16:  # bfloat16: exponent all ones, mantissa not zero
        return ((a & 0x7F80) == 0x7F80) & ((a & 0x007F) != 0)
    return np.isnan(a)


def assert_same(got: np.ndarray, want: np.ndarray, what="", nan=None):
    """Bit for bit; where ``nan`` (a mask) is set, any NaN (an oracle does not define NaN's bits)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape)
    g, w = bits(got), bits(want)
    if nan is not None:
        nan = np.broadcast_to(nan, got.shape)
        assert is_nan(got)[nan].all(), f"{what}: not NaN where the float64 value is"
        g, w = np.where(nan, 0, g), np.where(nan, 0, w)
    if not np.array_equal(g, w):
        i = np.argwhere(g != w)[0]
        raise AssertionError(
            f"{what}: {int((g != w).sum())} of {g.size} differ (seed "
            f"{SEED}); first at {tuple(i)}: {hex(g[tuple(i)])} != "
            f"{hex(w[tuple(i)])}"
        )


# ------------------------------------------------------------------------------- round_into
