"""rows_lookup (engine/kernels/native_lookup.c), the C call behind ``Client.handle``: its gathers
against numpy indexing, its answer codes, and its refusals of a malformed plan (the handle's
answers against ``compute`` are in tests/integration/test_client_handle.py)."""

from __future__ import annotations

import numpy as np
import pytest

_native = pytest.importorskip("posenc.engine.kernels._native")


def _plan(tables, colmap, mode=0, length=None, offset=0, past=None, freqs=None, dtype="float32"):
    return (
        tuple(tables),
        tables[0].shape[0] if length is None else length,
        offset,
        np.asarray(colmap, np.int32).tobytes(),
        mode,
        past,
        freqs,
        1.0,
        dtype,
    )


@pytest.mark.parametrize("dtype, code", [(np.float32, "float32"), (np.uint16, "bfloat16")])
def test_gathers_equal_numpy_indexing_for_every_mode(dtype, code):
    rng = np.random.default_rng(5)
    t = rng.integers(0, 2**15, (50, 6)).astype(dtype)
    pos = rng.integers(0, 47, 40).astype(np.int64)
    for mode, colmap in (
        (0, [5, -1, 0, 0, 3]),
        (1, range(6)),
        (2, [*range(6)] * 2),
        (3, [c for c in range(6) for _ in (0, 1)]),
    ):
        cm = np.array(list(colmap))
        out = np.empty((40, cm.size), dtype)
        assert _native.rows_lookup(_plan([t], cm, mode, offset=3, dtype=code), pos, (out,)) == 0
        want = np.where(cm < 0, 0, t[pos + 3][:, cm])
        assert out.tobytes() == want.astype(dtype).tobytes()
        batch = np.empty((5, 8, cm.size), dtype)  # a [B, N] batch: the same rows
        assert (
            _native.rows_lookup(_plan([t], cm, mode, offset=3, dtype=code), pos.reshape(5, 8), (batch,)) == 0
        )
        assert batch.tobytes() == out.tobytes()


MODES = {
    0: lambda w: [w - 1, -1, *range(w - 2)],
    1: range,
    2: lambda w: [*range(w)] * 2,
    3: lambda w: [c for c in range(w) for _ in (0, 1)],
}


@pytest.mark.parametrize(
    "dtype, name", [(np.float32, "float32"), (np.float16, "float16"), (np.uint16, "bfloat16")]
)
@pytest.mark.parametrize("width", [3, 24, 32, 40, 64, 100])
def test_long_gathers_with_rows_past_the_table_between(dtype, name, width):
    """Hundreds of random rows (the prefetch runs ahead of the copy), rows of any byte length (the
    copy's 64-byte pieces and their tails), rows past the table in between (computed, and skipped
    by the prefetch): the gathered rows are numpy's indexing, the computed ones what the kernel
    computes for that position alone."""
    rng = np.random.default_rng(width)
    t = rng.integers(0, 2**15, (1000, width)).astype(dtype)
    pos = rng.integers(0, 994, 700)  # + offset 3: inside the table's 997 rows
    past_at = rng.random(700) < 0.05
    pos[past_at] = rng.integers(994, 2**31, int(past_at.sum()))
    freqs = (0.5 ** np.arange(2 * width)).tobytes()  # [cos | sin] of 2*width frequencies
    pm = np.arange(width, dtype=np.int32).tobytes()  # the table's column c <- cos item c
    for mode, colmap in MODES.items():
        cm = np.array(list(colmap(width)))
        plan = _plan([t], cm, mode, length=997, offset=3, past=pm, freqs=freqs, dtype=name)
        out = np.empty((700, cm.size), dtype)
        assert _native.rows_lookup(plan, pos, (out,)) == pos.max() + 3 + 1
        inside = ~past_at
        want = np.where(cm < 0, 0, t[pos[inside] + 3][:, cm]).astype(dtype)
        assert out[inside].tobytes() == want.tobytes()
        for i in np.flatnonzero(past_at)[:5]:
            alone = np.empty((1, cm.size), dtype)
            _native.rows_lookup(plan, pos[i : i + 1], (alone,))
            assert out[i].tobytes() == alone.tobytes()


def test_answer_codes():
    t = np.zeros((8, 2), np.float32)
    out = (np.empty((3, 2), np.float32),)
    plan = _plan([t], [0, 1], 1)
    assert _native.rows_lookup(plan, np.array([0, 7, 8]), out) == -3  # past, no way to compute
    assert _native.rows_lookup(plan, np.array([0, -1, 2**31]), out) == -4 - 1  # the first bad position
    assert _native.rows_lookup(plan, np.array([0, 1, 2**31]), out) == -4 - 2
    freqs, past = np.array([0.5], np.float64).tobytes(), np.array([0, 1], np.int32).tobytes()
    r = _native.rows_lookup(_plan([t], [0, 1], 1, past=past, freqs=freqs), np.array([0, 9, 2]), out)
    assert r == 10 and np.allclose(
        out[0][1], [np.cos(4.5), np.sin(4.5)], rtol=1e-6, atol=0
    )  # libm, rounded once


def test_a_malformed_plan_is_refused_before_any_write():
    t = np.zeros((8, 2), np.float32)
    pos, out = np.array([1, 2]), (np.empty((2, 2), np.float32),)
    with pytest.raises(ValueError):  # out too small for n * D
        _native.rows_lookup(_plan([t], [0, 1, 1], 0), pos, out)
    with pytest.raises(ValueError):  # a column past the table's width
        _native.rows_lookup(_plan([t], [0, 2], 0), pos, out)
    with pytest.raises(ValueError):  # the mode does not fit the column map
        _native.rows_lookup(_plan([t], [0, 1], 2), pos, out)
    with pytest.raises(ValueError):  # a table shorter than the length it claims
        _native.rows_lookup(_plan([t], [0, 1], 1, length=9), pos, out)
    with pytest.raises(ValueError):  # positions that are not int64
        _native.rows_lookup(_plan([t], [0, 1], 1), pos.astype(np.int32), out)
    with pytest.raises(ValueError):  # a table of another element size than the dtype
        _native.rows_lookup(_plan([t], [0, 1], 1, dtype="bfloat16"), pos, out)
    with pytest.raises(ValueError, match="dtype"):  # a dtype name the kernels do not know
        _native.rows_lookup(_plan([t], [0, 1], 1, dtype="float64"), pos, out)
    with pytest.raises(TypeError):
        _native.rows_lookup((t,), pos, out)
    ro = np.empty((2, 2), np.float32)
    ro.flags.writeable = False
    with pytest.raises((ValueError, BufferError)):
        _native.rows_lookup(_plan([t], [0, 1], 1), pos, (ro,))
    freqs, bad_past = np.array([0.5], np.float64).tobytes(), np.array([0, 5], np.int32).tobytes()
    with pytest.raises(ValueError):  # a past map outside the computed [cos | sin]
        _native.rows_lookup(_plan([t], [0, 1], 1, past=bad_past, freqs=freqs), np.array([9, 1]), out)
