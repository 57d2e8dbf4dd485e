"""The shortcut's float32 JSON text (hot_f32text.c, exposed as _hot.f32_json) against the full
path's writer, orjson: 2 million random bit patterns and the edge cases. All 2^32 patterns:
tests/tools/f32_text_exhaustive.py (run by hand: minutes)."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

_hot = pytest.importorskip("posenc.service.shortcut._hot")


def orjson_text(values: np.ndarray) -> bytes:
    return orjson.dumps(values.astype(np.float32), option=orjson.OPT_SERIALIZE_NUMPY)[1:-1]


def check(values: np.ndarray) -> None:
    values = np.ascontiguousarray(values, np.float32)
    ours, theirs = _hot.f32_json(values), orjson_text(values)
    if ours != theirs:  # name the first value that differs
        for v in values:
            one = np.array([v], np.float32)
            assert (hex(int(one.view(np.uint32)[0])), _hot.f32_json(one)) == (
                hex(int(one.view(np.uint32)[0])),
                orjson_text(one),
            )
    assert ours == theirs


def test_random_bit_patterns():
    bits = np.random.default_rng(20261201).integers(0, 1 << 32, 2_000_000, dtype=np.uint64).astype(np.uint32)
    check(bits.view(np.float32))


def test_edge_cases():
    f = np.float32
    info = np.finfo(np.float32)
    tiny = np.arange(0, 4096, dtype=np.uint32).view(np.float32)  # the smallest subnormals
    top_sub = (np.uint32(0x00800000) - np.arange(1, 4097, dtype=np.uint32)).view(np.float32)
    powers = np.array([10.0**e for e in range(-45, 39)], np.float64).astype(np.float32)
    near = np.concatenate([np.nextafter(powers, f(np.inf)), np.nextafter(powers, f(0)), powers])
    # the fixed range's ends: k = -7 .. -6 and 12 .. 13, and integral values of 9 digits and more
    bounds = np.array(
        [
            1e-7,
            9.999999e-7,
            1e-6,
            1.2345e-6,
            9.99e-7,
            1e12,
            9.999999e12,
            1e13,
            1.2345e13,
            123456789,
            1e8,
            16777216,
            16777217,
            0.1,
            0.5,
            1.5,
            100.0,
        ],
        np.float64,
    ).astype(np.float32)
    special = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            info.max,
            -info.max,
            info.tiny,
            info.smallest_subnormal,
            info.eps,
        ],
        np.float32,
    )
    allbits = np.concatenate([tiny, top_sub, near, bounds, special])
    check(np.concatenate([allbits, -allbits]))
    assert _hot.f32_json(np.array([-0.0, np.nan, 1e-7, 1e13], np.float32)) == b"-0.0,null,1e-7,1e+13"


def test_empty_and_one():
    assert _hot.f32_json(np.zeros(0, np.float32)) == b""
    assert _hot.f32_json(np.array([123456789], np.float32)) == b"123456790.0"
