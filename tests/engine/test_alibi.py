"""ALiBi slopes and bias blocks (formulas: docs/reference.md, alibi).

References: BLOOM ``_get_alibi_slopes`` / ``build_alibi_tensor`` (slope × key position, which
softmax cannot tell from the canonical −m·(i−j): they differ by m·i per query row), MPT
``build_mpt_alibi_tensor`` (its ``alibi_bias_max`` is our ``max_bias``), and the paper's formula
in float64 written here: slopes 2^(−b·j/c), j = 1..c, c = 2^floor(log2 H), then 2^(−b·j/(2c)) for
odd j, as many as H − c.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.models.bloom.modeling_bloom import _get_alibi_slopes, build_alibi_tensor
from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from tests.engine.float64_refs import bias64, slopes64
from tests.numeric import FLOAT_DTYPES, assert_close, assert_rounded_once, assert_within_ulp, to_f64

MASK = {"float32": -3.4028234663852886e38, "float16": -65504.0}


def alibi_req(num_heads, query, key, **extra):
    return {"num_heads": num_heads, "query": query, "key": key, **extra}


def _sel(s):
    return list(range(s["start"], s["stop"], s.get("step", 1))) if isinstance(s, dict) else s


# --------------------------------------------------------------------------- slopes


@pytest.mark.parametrize("n", range(1, 65))
def test_slopes_vs_bloom_mpt_and_float64(n):
    out = compute("alibi", alibi_req(n, [0], [0]))
    s = out["slopes"]
    assert s.dtype == np.float32 and s.shape == (n,)
    assert_within_ulp(s, slopes64(n), "float32", what=f"slopes64 n={n}")
    mpt = -build_mpt_alibi_tensor(n, 2)[:, 0, 0].double().numpy()
    # MPT's float32 slopes are themselves rounded: two roundings may sit one ulp apart.
    assert_within_ulp(s, mpt, "float32", n_ulp=1.0, what=f"mpt n={n}")
    # BLOOM raises a float32 base to the j-th power in float32: its own error grows like j·2^-24
    # (3 ulps at n = 16), so it is checked at that tolerance, not at 1 ulp.
    bloom = _get_alibi_slopes(n, torch.device("cpu")).double().numpy()
    c = 2 ** math.floor(math.log2(n))
    power = np.array(list(range(1, c + 1)) + list(range(1, 2 * (n - c), 2)))[:n]
    assert_close(s, bloom, atol=0.0, rtol=(power + 2) * 2.0**-24, what=f"bloom n={n}")


def test_slope_values_from_the_paper():
    s12 = compute("alibi", alibi_req(12, [0], [0]))["slopes"]
    want12 = [2.0**-e for e in (1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5)]
    np.testing.assert_array_equal(s12, np.array(want12, dtype=np.float32))
    s6 = compute("alibi", alibi_req(6, [0], [0]))["slopes"]
    np.testing.assert_array_equal(s6, np.array([2.0**-e for e in (2, 4, 6, 8, 1, 3)], dtype=np.float32))
    s8 = compute("alibi", alibi_req(8, [0], [0]))["slopes"]
    np.testing.assert_array_equal(s8, np.array([2.0**-e for e in range(1, 9)], dtype=np.float32))


@pytest.mark.parametrize("max_bias", [4.0, 16.0, 5])
@pytest.mark.parametrize("n", [1, 7, 12, 32])
def test_max_bias_vs_mpt(n, max_bias):
    s = compute("alibi", alibi_req(n, [0], [0], max_bias=max_bias))["slopes"]
    mpt = -build_mpt_alibi_tensor(n, 2, alibi_bias_max=max_bias)[:, 0, 0].double().numpy()
    assert_within_ulp(s, mpt, "float32", n_ulp=1.0, what=f"mpt max_bias={max_bias}")  # MPT's own rounding
    assert_within_ulp(s, slopes64(n, float(max_bias)), "float32", what="slopes64 max_bias")


# --------------------------------------------------------------------------- bias blocks


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("mode", ["causal", "symmetric"])
def test_bias_block_against_float64(mode, dtype):
    q, k = {"start": 0, "stop": 48}, {"start": 0, "stop": 64}
    out = compute("alibi", alibi_req(12, q, k, mode=mode, dtype=dtype))
    want = bias64(slopes64(12), _sel(q), _sel(k), mode)
    assert out["bias"].shape == (12, 48, 64)
    assert_rounded_once(out["bias"], want, dtype, what=f"{mode}")
    assert out["slopes"].dtype == np.float32


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_decode_rows_past_131072(dtype):
    # one new token at a time, against a long key range, far past any precomputed table
    q = [131072 + 5, 200000, 2**31 - 1]
    k = {"start": 131072, "stop": 131072 + 4096}
    out = compute("alibi", alibi_req(32, q, k, dtype=dtype))
    want = bias64(slopes64(32), q, _sel(k))
    assert out["bias"].shape == (32, 3, 4096)
    assert_rounded_once(out["bias"], want, dtype, what="decode")


def test_rectangles_any_order_and_heads_subset():
    q, k = [3, 0, 7, 3], [10, 2, 2, 0, 131072]
    heads = [5, 0, 5, 11]
    out = compute("alibi", alibi_req(12, q, k, heads=heads))
    s = slopes64(12)[heads]
    assert out["bias"].shape == (4, 4, 5)
    assert_within_ulp(out["slopes"], s, "float32", what="subset slopes")
    assert_rounded_once(out["bias"], bias64(s, q, k), "float32", what="subset bias")
    full = compute("alibi", alibi_req(12, q, k))
    np.testing.assert_array_equal(out["bias"], full["bias"][heads])
    np.testing.assert_array_equal(out["slopes"], full["slopes"][heads])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_mask_future(dtype):
    q, k = [0, 5, 9, 200000], [0, 1, 5, 6, 9, 10, 200001]
    out = compute("alibi", alibi_req(4, q, k, mask_future=True, dtype=dtype))
    i, j = np.asarray(q)[:, None], np.asarray(k)[None, :]
    future = np.broadcast_to(j > i, (4, len(q), len(k)))
    b = out["bias"]
    if dtype == "bfloat16":
        assert (b[future] == 0xFF7F).all()
    else:
        assert (b[future] == np.asarray(MASK[dtype], dtype=dtype)).all()
        assert MASK[dtype] == float(np.finfo(dtype).min)
    want = bias64(slopes64(4), q, k)
    assert_rounded_once(b[~future], want[~future], dtype, what="unmasked")
    plain = compute("alibi", alibi_req(4, q, k, dtype=dtype))["bias"]
    np.testing.assert_array_equal(b[~future], plain[~future])
    assert (to_f64(plain, dtype)[future] > 0).all(), "without the mask, future cells are −m·(i−j) > 0"


def test_bias_equals_bloom_up_to_a_row_constant():
    L, H = 300, 12
    mask = torch.ones(1, L, dtype=torch.int64)
    bloom = build_alibi_tensor(mask, H, torch.float32).double().numpy()  # [H, 1, L]: m·j
    q = [0, 1, 17, 150, 299]
    out = compute("alibi", alibi_req(H, q, {"start": 0, "stop": L}))
    ours = out["bias"].astype(np.float64)
    m = slopes64(H)[:, None, None]
    shifted = ours + m * np.asarray(q, dtype=np.float64)[None, :, None]  # −m(i−j) + m·i = m·j
    want = np.broadcast_to(bloom, ours.shape)
    assert_close(shifted, want, atol=1e-6 * (1 + m * L), what="bias vs bloom + m·i")
    # and softmax over the visible keys j <= i is the same distribution
    for r, i in enumerate(q):
        a = torch.softmax(torch.from_numpy(ours[:, r, : i + 1]), -1).numpy()
        b = torch.softmax(torch.from_numpy(bloom[:, 0, : i + 1]), -1).numpy()
        assert_close(a, b, atol=1e-6, what=f"softmax row {i}")


def test_last_row_equals_mpt():
    L, H = 257, 16
    mpt = build_mpt_alibi_tensor(H, L).double().numpy()[:, 0, :]  # m·(j − (L−1))
    out = compute("alibi", alibi_req(H, [L - 1], {"start": 0, "stop": L}))
    assert_close(out["bias"][:, 0, :], mpt, atol=1e-30, rtol=2.5e-7, what="mpt last row")


# --------------------------------------------------------------------------- dtype overflow


def test_float16_overflow_refused_on_dtype():
    # slope 2^-8 for one head: 65520 = halfway to 65536 rounds to inf in float16 -> refused
    with pytest.raises(SpecError) as e:
        compute("alibi", alibi_req(1, [65520 * 256], [0], dtype="float16"))
    assert tuple(e.value.loc)[0] == "dtype"
    with pytest.raises(SpecError) as e:
        compute("alibi", alibi_req(1, [0], [20_000_000], mode="symmetric", dtype="float16"))
    assert tuple(e.value.loc)[0] == "dtype"
    # mask_future does not hide past cells (j <= i) that overflow
    with pytest.raises(SpecError) as e:
        compute("alibi", alibi_req(1, [20_000_000], [0, 20_000_001], mask_future=True, dtype="float16"))
    assert tuple(e.value.loc)[0] == "dtype"
    # the same distances fit in float32 and bfloat16
    for dt in ("float32", "bfloat16"):
        b = compute("alibi", alibi_req(1, [65520 * 256], [0], dtype=dt))["bias"]
        assert float(to_f64(b, dt)[0, 0, 0]) == pytest.approx(-65520.0, rel=2**-7)


def test_float16_value_that_rounds_to_max_finite_is_served():
    # −65512 rounds (to nearest) to −65504, a finite float16: nothing overflows, so it is served
    ok = compute("alibi", alibi_req(1, [65512 * 256], [0], dtype="float16"))["bias"]
    assert ok.dtype == np.float16 and float(ok[0, 0, 0]) == -65504.0


def test_masked_cells_do_not_count_as_overflow():
    # j > i is masked to −65504; its unmasked value (+78125) never reaches the output
    b = compute("alibi", alibi_req(1, [0], [0, 20_000_000], mask_future=True, dtype="float16"))["bias"]
    assert float(b[0, 0, 1]) == -65504.0 and float(b[0, 0, 0]) == 0.0


# --------------------------------------------------------------------------- properties


@settings(max_examples=60, deadline=None, print_blob=True)
@given(
    num_heads=st.integers(1, 40),
    a=st.integers(0, 2**31 - 17),
    b=st.integers(0, 2**31 - 17),
    nq=st.integers(2, 16),
    nk=st.integers(2, 16),
    mode=st.sampled_from(["causal", "symmetric"]),
    mask=st.booleans(),
    dtype=st.sampled_from(["float32", "bfloat16"]),
)
def test_blocks_are_toeplitz(num_heads, a, b, nq, nk, mode, mask, dtype):
    extra = {"mask_future": True} if (mask and mode == "causal") else {}
    out = compute(
        "alibi",
        alibi_req(
            num_heads,
            {"start": a, "stop": a + nq},
            {"start": b, "stop": b + nk},
            mode=mode,
            dtype=dtype,
            **extra,
        ),
    )
    B = out["bias"]
    assert B.shape == (num_heads, nq, nk)
    # B[h, i, j] depends on i − j only
    np.testing.assert_array_equal(B[:, 1:, 1:], B[:, :-1, :-1])
