"""Kernels: every backend refuses bad arguments (shape, dtype, contiguity, alignment,
writability) with an exception, never a crash; and the backend this run selected.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.kernel_helpers import ENV_BACKEND, _native


def _ok_args():
    f32 = np.float32
    return {
        "gather_rows": (np.zeros((4, 3), f32), np.array([0, 3], np.int64), np.empty((2, 3), f32)),
        "rope_expand": (
            np.zeros((4, 3), f32),
            np.array([0, 3], np.int64),
            np.empty((2, 6), f32),
            "half_split",
        ),
        "round_into": (np.zeros(5), np.empty(5, np.float16), "float16"),
        "alibi_block": (
            np.ones(2),
            np.arange(3),
            np.arange(4),
            np.empty((2, 3, 4), np.uint16),
            "bfloat16",
            False,
            True,
        ),
        "t5_block": (np.zeros(5, np.int32), np.arange(3), np.arange(4), np.empty((3, 4), np.int32), 2),
        "sincos": (np.ones(3), np.arange(4), 1.0, np.empty((4, 3), f32), np.empty((4, 3), f32), "float32"),
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


@pytest.mark.parametrize("name,idx,make,exc", BAD, ids=[f"{b[0]}-arg{b[1]}-{i}" for i, b in enumerate(BAD)])
def test_bad_input_raises(kern, name, idx, make, exc):
    args = list(_ok_args()[name])
    getattr(kern, name)(*args)  # the unmodified call is fine
    args[idx] = make(args[idx])
    with pytest.raises(exc):
        getattr(kern, name)(*args)


# ----------------------------------------------------------------------- backend selection


def test_selected_backend_and_info():
    import posenc.engine.kernels as k

    want = {"numpy": "numpy", "simd": "simd"}.get(ENV_BACKEND, "simd" if _native is not None else "numpy")
    assert k.BACKEND == want
    info = k.info()
    assert info["backend"] == k.BACKEND and info["features"] == list(k.FEATURES)
    if k.BACKEND == "numpy":
        assert k.FEATURES == () and info["compiler"] is None
    else:
        assert isinstance(info["compiler"], str) and k.FEATURES == _native.FEATURES
    assert set(k.KERNELS) <= set(dir(k))
