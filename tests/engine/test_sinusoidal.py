"""Sinusoidal absolute encodings, docs/reference.md, every layout at odd and even d_model.

References: DistilBERT ``_create_sinusoidal_embeddings`` (interleaved, float64 then float32),
Marian ``MarianSinusoidalPositionalEmbedding.create_weight`` (concat, float64 then float32) and
M2M100 ``get_embedding`` (fairseq, float32 throughout: its error grows ~8e-8·row, so that
comparison allows 1e-6 + 2.5e-7·row), plus float64 formulas written here for the half-ulp checks (rounded once).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.distilbert.modeling_distilbert import _create_sinusoidal_embeddings
from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding
from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

from posenc.engine.answer.pipeline import compute
from tests.engine.float64_refs import sinusoidal64
from tests.numeric import FLOAT_DTYPES, assert_close, assert_same_rounding, assert_within_ulp

POSITIONS = [0, 1, 2, 3, 100, 511, 4095, 65535, 131071, 131072, 131073, 200000]
HIGH = [2**24 + 3, 10**9, 2**31 - 1]


def sin_req(d_model, positions, **extra):
    return {"d_model": d_model, "positions": positions, **extra}


# --------------------------------------------------------------------------- vs transformers


@pytest.mark.parametrize("d", [2, 5, 16, 17])
def test_interleaved_vs_distilbert(d):
    n_pos = 600
    table = _create_sinusoidal_embeddings(n_pos, d, torch.empty(n_pos, d)).double().numpy()
    pos = list(range(0, n_pos, 3)) + [n_pos - 1]
    out = compute("sinusoidal", sin_req(d, pos))  # layout defaults to interleaved
    assert out["encoding"].shape == (len(pos), d) and out["encoding"].dtype == np.float32
    # both round float64 values of the same formula once to float32: equal, but at ties
    want, slack = sinusoidal64(d, pos, "interleaved")
    assert_same_rounding(out["encoding"], table[pos], want, "float32", slack, what="distilbert")
    # offset shifts rows: offset 100 at position p is DistilBERT's row p + 100
    out2 = compute("sinusoidal", sin_req(d, list(range(0, 400, 7)), layout="interleaved", offset=100))
    want, slack = sinusoidal64(d, list(range(100, 500, 7)), "interleaved")
    assert_same_rounding(
        out2["encoding"], table[np.arange(0, 400, 7) + 100], want, "float32", slack, what="distilbert+off"
    )


@pytest.mark.parametrize("d", [2, 3, 16, 17])
def test_concat_vs_marian(d):
    n_pos = 600
    table = MarianSinusoidalPositionalEmbedding(n_pos, d).create_weight().double().numpy()
    pos = [0, 1, 2, 77, 256, 599, 598, 5]
    out = compute("sinusoidal", sin_req(d, pos, layout="concat"))
    assert out["encoding"].shape == (len(pos), d)
    want, slack = sinusoidal64(d, pos, "concat")
    assert_same_rounding(out["encoding"], table[pos], want, "float32", slack, what="marian")


@pytest.mark.parametrize("d", [4, 5, 16, 17])
def test_fairseq_vs_m2m100_past_131072(d):
    # M2M100: padding_idx = 1, so position p is row p + 2 -> offset 2.
    pos = [0, 1, 2, 1000, 65535, 131071, 131072, 150000, 200000]
    rows = np.asarray(pos) + 2
    table = M2M100SinusoidalPositionalEmbedding.get_embedding(int(rows.max()) + 1, d).double().numpy()[rows]
    out = compute("sinusoidal", sin_req(d, pos, layout="fairseq", offset=2))
    assert out["encoding"].shape == (len(pos), d)
    tol = 1e-6 + 2.5e-7 * rows[:, None].astype(np.float64)
    assert_close(out["encoding"], table, atol=tol, what="m2m100")
    if d % 2:
        assert (out["encoding"][:, -1] == 0).all(), "odd d: fairseq appends a zero column"


def test_fairseq_rows_are_never_zeroed():
    # transformers zeroes row padding_idx; the table does not (docs/reference.md).
    d = 8
    table = M2M100SinusoidalPositionalEmbedding.get_embedding(4, d, padding_idx=None).double().numpy()
    out = compute("sinusoidal", sin_req(d, [0, 1, 2, 3], layout="fairseq"))
    assert_close(out["encoding"], table, atol=1e-6, what="m2m100 rows 0..3")
    assert np.abs(out["encoding"][1]).sum() > 1


def test_layouts_have_different_exponents_d512():
    # docs/reference.md: d=512, k=255 has frequency 1.0366e-4 in interleaved/concat and exactly 1e-4 in fairseq.
    pos = [10000]
    fair = compute("sinusoidal", sin_req(512, pos, layout="fairseq"))["encoding"][0]
    inter = compute("sinusoidal", sin_req(512, pos, layout="interleaved"))["encoding"][0]
    concat = compute("sinusoidal", sin_req(512, pos, layout="concat"))["encoding"][0]
    assert fair[255] == np.float32(np.sin(1.0)) and fair[511] == np.float32(np.cos(1.0))
    w = 10000.0 ** (-510 / 512)
    assert abs(w - 1.0366e-4) < 1e-8
    assert inter[510] == np.float32(np.sin(10000 * w)) and inter[511] == np.float32(np.cos(10000 * w))
    assert concat[255] == np.float32(np.sin(10000 * w)) and concat[511] == np.float32(np.cos(10000 * w))


# --------------------------------------------------------------------------- vs float64


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("d", [4, 7, 64, 65])
@pytest.mark.parametrize("layout", ["interleaved", "concat", "fairseq", "fairseq_cos_first"])
def test_against_float64_rounded_once(layout, d, dtype):
    pos = POSITIONS + HIGH[:2]
    out = compute("sinusoidal", sin_req(d, pos, layout=layout, dtype=dtype))
    want, slack = sinusoidal64(d, pos, layout)
    assert_within_ulp(out["encoding"], want, dtype, slack=slack, what=f"{layout} d={d}")


@pytest.mark.parametrize("layout", ["interleaved", "concat", "fairseq", "fairseq_cos_first"])
def test_base_and_offset_against_float64(layout):
    pos = [0, 5, 131072, 2**31 - 1 - 7]
    out = compute("sinusoidal", sin_req(33, pos, layout=layout, base=500.0, offset=7))
    want, slack = sinusoidal64(33, pos, layout, base=500.0, offset=7)
    assert_within_ulp(out["encoding"], want, "float32", slack=slack, what=f"{layout} base/offset")
    # offset k at position p is offset 0 at position p + k, bit for bit
    shifted = compute("sinusoidal", sin_req(33, [p + 7 for p in pos], layout=layout, base=500))
    np.testing.assert_array_equal(out["encoding"], shifted["encoding"])


def test_selection_order_repeats_and_range():
    a = compute("sinusoidal", sin_req(10, [9, 0, 9, 131072]))["encoding"]
    b = compute("sinusoidal", sin_req(10, [0, 9, 131072]))["encoding"]
    np.testing.assert_array_equal(a, b[[1, 0, 1, 2]])
    r = compute("sinusoidal", sin_req(10, {"start": 131070, "stop": 131080, "step": 3}))["encoding"]
    np.testing.assert_array_equal(
        r, compute("sinusoidal", sin_req(10, [131070, 131073, 131076, 131079]))["encoding"]
    )


def test_dtype_storage():
    assert compute("sinusoidal", sin_req(6, [1], dtype="float16"))["encoding"].dtype == np.float16
    assert compute("sinusoidal", sin_req(6, [1], dtype="bfloat16"))["encoding"].dtype == np.uint16
