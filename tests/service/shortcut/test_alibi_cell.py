"""The ALiBi cell (engine/kernels/alibi_cell.h) as both C extensions compute it, held bit for bit
to the reference, engine/kernels/numpy_impl.alibi_block: service.shortcut._hot's AlibiTemplate
answers (float32) and engine.kernels._native's alibi_block, for any positive slope, each mode,
and positions up to 2**31 - 1 in any order. (The shortcut's copies from the engine's distance
table are held to the full path in tests/service/shortcut/test_hot_alibi.py.)"""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc.engine.kernels import numpy_impl as ref
from posenc.service.shortcut import templates as replay

try:
    from posenc.engine.kernels import _native
except ImportError:
    _native = None

pytestmark = pytest.mark.skipif(not replay.NATIVE, reason="service._hot is not built")

TOP = 2**31 - 1
KEY = b'{"query":\0,"key":\0}'
ACCEPT = b"application/x-safetensors"
MODES = {"causal": (False, False), "symmetric": (True, False), "masked": (False, True)}

slopes = st.lists(
    st.one_of(
        st.sampled_from([2.0**-8, 0.5, 1.0, 2.0**-0.5]),
        st.floats(2.0**-40, 4.0, allow_nan=False, allow_infinity=False),
    ),
    min_size=1,
    max_size=5,
)
positions = st.lists(
    st.one_of(st.integers(0, 70), st.integers(0, TOP), st.sampled_from([0, 1, TOP, TOP - 1])),
    min_size=1,
    max_size=24,
)


def shortcut_block(m: np.ndarray, mode: str, query: list, key: list) -> bytes:
    """The block of a one-template AlibiTemplate answer (header b"" and the float32 slopes after)."""
    sym, mask = MODES[mode]
    t = replay._hot.AlibiTemplate(
        slopes=m,
        symmetric=sym,
        mask_future=mask,
        header_for=lambda nq, nk: b"",
        tail=m.astype(np.float32).tobytes(),
        max_n=1 << 20,
        max_bytes=1 << 30,
    )
    raw = orjson.dumps({"query": query, "key": key})
    out = replay.answer(raw, [(b"accept", ACCEPT)], {ACCEPT: 0}, {KEY: t}, "alibi")
    assert out is not None
    return out[: -4 * len(m)]


@settings(max_examples=300, deadline=None)
@given(m=slopes, mode=st.sampled_from(sorted(MODES)), query=positions, key=positions)
def test_both_extensions_compute_the_reference_cells(m, mode, query, key):
    m = np.array(m, dtype=np.float64)
    sym, mask = MODES[mode]
    q, k = np.array(query, dtype=np.int64), np.array(key, dtype=np.int64)
    want = np.empty((len(m), len(q), len(k)), np.float32)
    ref.alibi_block(m, q, k, want, "float32", sym, mask)
    assert shortcut_block(m, mode, query, key) == want.tobytes()
    if _native is not None:
        got = np.empty_like(want)
        _native.alibi_block(m, q, k, got, "float32", sym, mask)
        assert got.tobytes() == want.tobytes()
