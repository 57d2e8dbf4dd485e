"""rows_lookup (engine/kernels/native_lookup.c), the C call behind ``Client.handle``: a family's row
plan (engine/tables/base.py RowPlan) made a RowGather, its gathers (the one row gather,
engine/kernels/row_gather.h) against numpy indexing, its answer codes, and its refusals of a
malformed plan (the handle's answers against ``compute`` are in tests/integration/test_client_handle.py)."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.engine.tables.base import PastRows, RowPlan

_native = pytest.importorskip("posenc.engine.kernels._native")


def _gather(tables, colmap, length=None, offset=0, maps=None, freqs=None, dtype="float32"):
    past = None
    if freqs is not None:
        past = PastRows(
            freqs=np.asarray(freqs, np.float64), scale=1.0, dtype=dtype, maps=maps, row_limit=2**31
        )
    plan = RowPlan(arrays=tuple(tables), colmap=tuple(int(c) for c in colmap), offset=offset, past=past)
    return _native.RowGather(plan=plan, length=tables[0].shape[0] if length is None else length)


# the column maps the row gather tells apart (row_gather.h): any map with zeros (runs), the stored
# row (one run), twice over (two runs: RoPE's half_split), each column twice (a zip of the row with
# itself: RoPE's interleaved), two runs interleaved (a zip: sinusoidal's interleaved), a scattered
# gather without zeros
MAPS = {
    "zeros": lambda w: [w - 1, -1, *range(w - 2)],
    "copy": range,
    "repeat": lambda w: [*range(w)] * 2,
    "twice": lambda w: [c for c in range(w) for _ in (0, 1)],
    "zip": lambda w: [c for k in range(w // 2) for c in (k, w // 2 + k)],
    "gather": lambda w: [(7 * c) % w for c in range(w)],
}


@pytest.mark.parametrize("dtype, code", [(np.float32, "float32"), (np.uint16, "bfloat16")])
@pytest.mark.parametrize("kind", sorted(MAPS))
def test_gathers_equal_numpy_indexing_for_every_kind_of_map(dtype, code, kind):
    rng = np.random.default_rng(5)
    t = rng.integers(0, 2**15, (50, 6)).astype(dtype)
    pos = rng.integers(0, 47, 40).astype(np.int64)
    cm = np.array(list(MAPS[kind](6)))
    out = np.empty((40, cm.size), dtype)
    g = _gather([t], cm, offset=3, dtype=code)
    assert _native.rows_lookup(g, pos, (out,)) == 0
    want = np.where(cm < 0, 0, t[pos + 3][:, cm])
    assert out.tobytes() == want.astype(dtype).tobytes()
    batch = np.empty((5, 8, cm.size), dtype)  # a [B, N] batch: the same rows
    assert _native.rows_lookup(g, pos.reshape(5, 8), (batch,)) == 0
    assert batch.tobytes() == out.tobytes()


@pytest.mark.parametrize(
    "dtype, name", [(np.float32, "float32"), (np.float16, "float16"), (np.uint16, "bfloat16")]
)
@pytest.mark.parametrize("width", [3, 24, 32, 40, 64, 100])
def test_long_gathers_with_rows_past_the_table_between(dtype, name, width):
    """Hundreds of random rows (the prefetch runs ahead of the copy), rows of any byte length (the
    copy's 64-byte pieces and their tails, a zip's vectors and their tails), rows past the table in
    between (computed, and skipped by the prefetch): the gathered rows are numpy's indexing, the
    computed ones what the kernel computes for that position alone."""
    rng = np.random.default_rng(width)
    t = rng.integers(0, 2**15, (1000, width)).astype(dtype)
    pos = rng.integers(0, 994, 700)  # + offset 3: inside the table's 997 rows
    past_at = rng.random(700) < 0.05
    pos[past_at] = rng.integers(994, 2**31, int(past_at.sum()))
    freqs = 0.5 ** np.arange(2 * width)  # [cos | sin] of 2*width frequencies
    maps = (tuple(range(width)),)  # the table's column c <- cos item c
    for kind, colmap in sorted(MAPS.items()):
        cm = np.array(list(colmap(width)))
        g = _gather([t], cm, length=997, offset=3, maps=maps, freqs=freqs, dtype=name)
        out = np.empty((700, cm.size), dtype)
        assert _native.rows_lookup(g, pos, (out,)) == pos.max() + 3 + 1, kind
        inside = ~past_at
        want = np.where(cm < 0, 0, t[pos[inside] + 3][:, cm]).astype(dtype)
        assert out[inside].tobytes() == want.tobytes(), kind
        for i in np.flatnonzero(past_at)[:5]:
            alone = np.empty((1, cm.size), dtype)
            _native.rows_lookup(g, pos[i : i + 1], (alone,))
            assert out[i].tobytes() == alone.tobytes(), kind


def test_answer_codes():
    t = np.zeros((8, 2), np.float32)
    out = (np.empty((3, 2), np.float32),)
    g = _gather([t], [0, 1])
    assert _native.rows_lookup(g, np.array([0, 7, 8]), out) == -3  # past, no way to compute
    assert _native.rows_lookup(g, np.array([0, -1, 2**31]), out) == -4 - 1  # the first bad position
    assert _native.rows_lookup(g, np.array([0, 1, 2**31]), out) == -4 - 2
    r = _native.rows_lookup(_gather([t], [0, 1], maps=((0, 1),), freqs=[0.5]), np.array([0, 9, 2]), out)
    assert r == 10 and np.allclose(
        out[0][1], [np.cos(4.5), np.sin(4.5)], rtol=1e-6, atol=0
    )  # libm, rounded once


def test_a_malformed_plan_is_refused():
    t = np.zeros((8, 2), np.float32)
    pos, out = np.array([1, 2]), (np.empty((2, 2), np.float32),)
    with pytest.raises(ValueError):  # out too small for n * D
        _native.rows_lookup(_gather([t], [0, 1, 1]), pos, out)
    with pytest.raises(ValueError):  # a column past the table's width
        _gather([t], [0, 2])
    with pytest.raises(ValueError):  # a table shorter than the length it claims
        _gather([t], [0, 1], length=9)
    with pytest.raises(ValueError):  # positions that are not int64
        _native.rows_lookup(_gather([t], [0, 1]), pos.astype(np.int32), out)
    with pytest.raises(ValueError):  # a table of another element size than the dtype
        _gather([t], [0, 1], maps=((0, 1),), freqs=[0.5], dtype="bfloat16")
    with pytest.raises(ValueError, match="dtype"):  # a dtype name the kernels do not know
        _gather([t], [0, 1], maps=((0, 1),), freqs=[0.5], dtype="float64")
    with pytest.raises(ValueError):  # a past map outside the computed [cos | sin]
        _gather([t], [0, 1], maps=((0, 5),), freqs=[0.5])
    with pytest.raises(AttributeError, match="arrays"):  # a plan is named fields, never a tuple
        _native.RowGather(plan=(t,), length=8)
    with pytest.raises(TypeError):  # keywords only
        _native.RowGather(RowPlan(arrays=(t,), colmap=(0, 1)), 8)
    with pytest.raises(TypeError):
        _native.rows_lookup((t,), pos, out)
    with pytest.raises(ValueError):  # a RowGather never initialised
        _native.rows_lookup(_native.RowGather.__new__(_native.RowGather), pos, out)
    ro = np.empty((2, 2), np.float32)
    ro.flags.writeable = False
    with pytest.raises((ValueError, BufferError)):
        _native.rows_lookup(_gather([t], [0, 1]), pos, (ro,))
