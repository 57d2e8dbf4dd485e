"""Bit-for-bit comparison, shared by the tests and the reader processes they start."""

from __future__ import annotations

import numpy as np


def bits_equal(a, b) -> bool:
    """True when two results are identical bit for bit: same keys, and for every array the same
    dtype, shape and bytes (-0.0 differs from +0.0, NaN equals the same NaN); scalars as float64."""
    if set(a) != set(b):
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            x, y = np.asarray(x), np.asarray(y)
            if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
                return False
        elif np.float64(x).tobytes() != np.float64(y).tobytes():
            return False
    return True


def digest_of(view) -> str:
    """A table view's manifest key: its segment is named {ns}.seg.{generation}.{digest}[-rev]."""
    return view.segment.entry["file"].rsplit(".", 1)[1]
