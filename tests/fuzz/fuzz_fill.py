"""Coverage-guided fuzz of fill() and fill_into() (service/shortcut/hot_fill.c, the v2 shortcut's
rows for raw binary positions) on the RowsTemplates of real rope and sinusoidal specs. An input's
first byte picks the template, the item size (int32 or int64) and whether the positions are
masked to 0 .. 511 (so that long runs of them are rows of the table: copies of 1 MiB and more
drop the GIL); the rest are the raw little-endian positions. With 0x20 | 0x10 in byte 0, fill_block()
(the v2 shortcut's ALiBi and T5 blocks, service/shortcut/hot_blocks.c) instead: byte 0 also picks
the block template and the first input's item size, byte 1 the second's, the input order and the
first input's length; the block is None exactly when a position is negative or not below the
limit, the block is over the template's bytes, or the full path refuses it (a float16 overflow),
and otherwise the pipeline's block between the given parts. Besides the sanitizers: fill is None exactly when
a position is negative or not below the position limit (each position tried alone says which), each array's
rows are those of each position alone, in order, between the given parts, the first positions' rows (past the
table too: computed with the engine's kernel) are the pipeline's, and fill_into writes the same bytes.

    python tests/fuzz/fuzz_fill.py tests/fuzz/corpus/fill
"""

from __future__ import annotations

import sys

import numpy as np  # noqa: E402

from tests.fuzz import hot_targets as ht  # first: it loads the instrumented shortcut

ROWS = ht.rows_templates()
AXES = ht.axes_templates()
BLOCKS = ht.block_templates()
PAST_IN_C = ht.replay.kernels.c_api() is not None
SINGLES = 64  # positions checked one by one
PIPELINE = 4  # of them, held to the pipeline's rows


def axes_input(data: bytes) -> None:
    """Per-axis templates (rope position_ids: [3, n] positions, axis after axis; first byte & 0x20):
    None exactly when the count is not a multiple of 3 or a position is negative or not below the
    limit; else the pipeline's rows of those position_ids (up to 64 rows checked)."""
    t, body, length = AXES[data[0] % len(AXES)]
    isz = 8 if data[0] & 0x80 else 4
    raw = data[1 : len(data) - (len(data) - 1) % isz]
    if not raw:
        return
    positions = np.frombuffer(raw, "<i%d" % isz).astype(np.int64)
    if data[0] & 0x40:
        positions &= 511
        raw = positions.astype("<i%d" % isz).tobytes()
    got = ht.replay.fill(t, raw, isz, (b"", b"", b""))
    valid = (
        positions.size % 3 == 0
        and positions.min() >= 0
        and positions.max() < ht.replay.POSITION_LIMIT
        and (PAST_IN_C or positions.max() < length)
    )  # the numpy backend lends no kernel for rows past the table
    assert (got is not None) == valid, raw
    if got is not None and positions.size // 3 <= 64:
        assert got == ht.pipeline_ids_rows(body, positions.reshape(3, -1).tolist()), raw


def block_input(data: bytes) -> None:
    """fill_block (byte 0 & 0x30): byte 0 picks the template (low nibble), the first input's item
    size (0x80) and masking (0x40: positions & 1023, both sides of the 512-distance tables); byte 1
    the second's item size (0x80), key first (0x40) and the first input's 1 + (byte 1 & 3) positions."""
    if len(data) < 3 or not BLOCKS:
        return
    t, family, body = BLOCKS[(data[0] & 0x0F) % len(BLOCKS)]
    isz = (8 if data[0] & 0x80 else 4, 8 if data[1] & 0x80 else 4)
    key_first, n1 = bool(data[1] & 0x40), (1 + (data[1] & 3)) * isz[0]
    first, second = data[2 : 2 + n1], data[2 + n1 :]
    second = second[: len(second) - len(second) % isz[1]]
    if len(first) < n1 or not second:
        return
    a, b = (np.frombuffer(x, "<i%d" % i).astype(np.int64) for x, i in ((first, isz[0]), (second, isz[1])))
    if data[0] & 0x40:
        a, b = a & 1023, b & 1023
        first, second = a.astype("<i%d" % isz[0]).tobytes(), b.astype("<i%d" % isz[1]).tobytes()
    parts = (b"<", b">")
    got = ht.replay.fill_block(t, first, second, isz, key_first, parts)
    q, k = (b, a) if key_first else (a, b)
    limit = ht.replay.POSITION_LIMIT
    if min(q.min(), k.min()) < 0 or max(q.max(), k.max()) >= limit:
        assert got is None, data
        return
    heads = len(body.get("heads", range(body.get("num_heads", 1))))
    itemsize = 4 if body.get("dtype", "float32") == "float32" or family == "t5-buckets" else 2
    if heads * q.size * k.size > ht.BLOCK_BYTES // itemsize:
        assert got is None, data
        return
    want = ht.pipeline_block(family, body, q.tolist(), k.tolist())
    assert got == (None if want is None else b"<" + want + b">"), data


def one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    if data[0] & 0x30 == 0x30:
        return block_input(data)
    if data[0] & 0x20:
        return axes_input(data)
    t, narr, (family, body) = ROWS[data[0] % len(ROWS)]
    isz = 8 if data[0] & 0x80 else 4
    raw = data[1:]
    parts = tuple(b"<%d>" % i for i in range(narr + 1))
    if data[0] & 0x40 and len(raw) % isz == 0:
        raw = (np.frombuffer(raw, "<i%d" % isz) & 511).tobytes()
    if len(raw) % isz:
        try:
            ht.replay.fill(t, raw, isz, parts)
        except ValueError:
            return
        raise AssertionError(f"fill took {len(raw)} bytes of {isz}-byte positions")
    n = len(raw) // isz
    got = ht.replay.fill(t, raw, isz, parts)
    singles = [
        ht.replay.fill(t, raw[i * isz : (i + 1) * isz], isz, (b"",) * (narr + 1))
        for i in range(min(n, SINGLES))
    ]
    if got is None:
        assert n > SINGLES or None in singles, raw
        return
    assert None not in singles, raw
    positions = np.frombuffer(raw, "<i%d" % isz)
    for i in range(min(n, PIPELINE)):
        assert singles[i] == ht.pipeline_rows(family, body, int(positions[i])), (raw, i)
    per = len(singles[0]) // narr  # one position's row in one array
    arrays, at = [], 0
    for a in range(narr):
        assert got[at : at + len(parts[a])] == parts[a], raw
        at += len(parts[a])
        arrays.append(got[at : at + n * per])
        at += n * per
    assert got[at:] == parts[narr], raw
    for a, array in enumerate(arrays):
        for i, s in enumerate(singles):
            assert array[i * per : (i + 1) * per] == s[a * per : (a + 1) * per], (raw, a, i)
    views = tuple(bytearray(n * per) for _ in range(narr))
    assert ht.replay.fill_into(t, raw, isz, tuple(memoryview(v) for v in views)) is True
    assert [bytes(v) for v in views] == arrays, raw


if __name__ == "__main__":
    import atheris  # here: tests/fuzz/test_corpus.py replays one_input without it

    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
