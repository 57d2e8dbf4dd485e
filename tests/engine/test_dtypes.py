"""The single rounding from float64 (engine/core/dtypes.py), checked against an independent
nearest-candidate search over every finite bfloat16 value, and the overflow refusal."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.engine.core.dtypes import bf16_bits_to_f32, f64_to_bf16_bits, mask_value, round_f64
from posenc.engine.core.errors import SpecError
from tests.numeric import BF16_MAX, nearest_bf16_bits, to_f64


def _check(x):
    got = f64_to_bf16_bits(np.asarray(x, dtype=np.float64))
    want = nearest_bf16_bits(x)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(float(np.asarray(x)[i]), hex(int(got[i])), hex(int(want[i]))) for i in bad[:5]]


def test_random_values_across_all_exponents(rng):
    e = rng.uniform(-140, 129, 20000)
    x = np.exp2(e) * rng.choice([-1.0, 1.0], e.size)
    _check(x)


def test_exact_ties_and_their_neighbours(rng):
    bits = rng.integers(0, 0x7F7F, 5000)
    v, w = to_f64(bits.astype(np.uint16), "bfloat16"), to_f64((bits + 1).astype(np.uint16), "bfloat16")
    mid = (v + w) / 2  # exact in float64
    x = np.concatenate([mid, np.nextafter(mid, 0), np.nextafter(mid, np.inf), v, -mid, -v])
    _check(x)


def test_subnormals_and_underflow():
    q = 2.0**-133  # bfloat16 subnormal quantum
    k = np.arange(0, 400)
    x = np.concatenate([k * q / 2, k * q / 2 + q / 8, -(k * q / 2)])
    _check(x)
    got = f64_to_bf16_bits(
        np.array([q / 2, 3 * q / 2, q / 2 * (1 + 2**-40), 5e-324, -5e-324, -0.0, 0.0, 2.0**-126 - q / 2])
    )
    # q/2 ties to even 0; 3q/2 ties to even 2q; just over q/2 rounds up; float64 subnormals -> ±0;
    # the tie just under the smallest normal goes to the (even) smallest normal 0x0080.
    assert [hex(int(b)) for b in got] == ["0x0", "0x2", "0x1", "0x0", "0x8000", "0x8000", "0x0", "0x80"]


def test_overflow_and_specials():
    half_ulp = 2.0**127 * 2.0**-8
    x = np.array([BF16_MAX, BF16_MAX + half_ulp / 2, BF16_MAX + half_ulp, 1e300, np.inf, -np.inf, -BF16_MAX])
    _check(x[:-1])
    got = f64_to_bf16_bits(x)
    assert [hex(int(b)) for b in got] == [
        "0x7f7f",
        "0x7f7f",
        "0x7f80",
        "0x7f80",
        "0x7f80",
        "0xff80",
        "0xff7f",
    ]
    nan = f64_to_bf16_bits(np.array([np.nan]))[0]
    assert (nan & 0x7F80) == 0x7F80 and (nan & 0x007F) != 0


def test_no_double_rounding_through_float32():
    # 1 + 2^-8 + 2^-40: float32 would drop 2^-40 and then tie to even (1.0); direct is 1 + 2^-7
    assert int(f64_to_bf16_bits(np.array([1 + 2**-8 + 2**-40]))[0]) == 0x3F81
    # float16: 1 + 2^-11 + 2^-30 -> 1 + 2^-10 directly (1.0 via float32)
    assert float(round_f64(np.array([1 + 2**-11 + 2**-30]), "float16")[0]) == 1 + 2**-10
    b = round_f64(np.array([1 + 2**-8 + 2**-40, -3.0]), "bfloat16")
    assert b.dtype == np.uint16 and [int(v) for v in b] == [0x3F81, 0xC040]


def test_bf16_bits_to_f32_roundtrip_every_pattern():
    bits = np.arange(0, 0x10000, dtype=np.uint32).astype(np.uint16)
    f = bf16_bits_to_f32(bits)
    assert f.dtype == np.float32
    back = (f.view(np.uint32) >> 16).astype(np.uint16)
    finite = (bits & 0x7F80) != 0x7F80
    np.testing.assert_array_equal(back[finite], bits[finite])
    np.testing.assert_array_equal(f64_to_bf16_bits(f[finite].astype(np.float64)), bits[finite])


@pytest.mark.parametrize(
    "dtype,value",
    [
        ("float32", 1e39),
        ("float32", -1e39),
        ("float32", 2.0**128 - 2.0**103),  # float32 tie to inf
        ("float16", 65520.0),
        ("float16", -70000.0),
        ("bfloat16", 2.0**128 - 2.0**119),
        ("bfloat16", -1e39),
    ],
)
def test_round_f64_refuses_overflow_on_dtype(dtype, value):
    with pytest.raises(SpecError) as e:
        round_f64(np.array([0.5, value]), dtype)
    assert tuple(e.value.loc) == ("dtype",)


@pytest.mark.parametrize(
    "dtype,value,want",
    [
        ("float32", 2.0**128 - 2.0**103 - 2.0**80, 3.4028234663852886e38),
        ("float16", 65519.99, 65504.0),
        ("float16", -65519.0, -65504.0),
        ("bfloat16", 2.0**128 - 2.0**119 - 2.0**100, BF16_MAX),
    ],
)
def test_round_f64_keeps_values_that_round_to_the_largest_finite(dtype, value, want):
    out = round_f64(np.array([value]), dtype)
    got = float(bf16_bits_to_f32(out)[0]) if dtype == "bfloat16" else float(out[0])
    assert got == want


def test_mask_values():
    assert int(mask_value("bfloat16")) == 0xFF7F
    assert float(mask_value("float16")) == -65504.0 and mask_value("float16").dtype == np.float16
    assert float(mask_value("float32")) == float(np.finfo(np.float32).min)
