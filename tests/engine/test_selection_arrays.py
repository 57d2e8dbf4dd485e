"""Selections given as numpy integer arrays (what a KServe v2 binary tensor becomes) are held to
the same rules as JSON lists, and answer the same bits; ``Family.batched`` names exactly the
arrays whose shape follows the selections."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.engine.answer import pipeline
from posenc.engine.core.errors import SpecError
from posenc.engine.core.selection import parse_selection
from posenc.engine.tables import FAMILIES

BODIES = {
    "rope": {"head_dim": 64, "rope_theta": 500000.0},
    "sinusoidal": {"d_model": 33, "layout": "fairseq"},
    "sinusoidal-grid": {"embed_dim": 32, "grid_size": [3, 5], "extra_tokens": 1},
    "alibi": {"num_heads": 6, "mode": "symmetric"},
    "t5-buckets": {"bidirectional": False},
}


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_array_equals_list(dtype):
    values = [7, 0, 131071, 3, 3]
    a = parse_selection(np.array(values, dtype=dtype), ("positions",))
    assert a.values.dtype == np.int64 and a.values.tolist() == values
    assert (a.n, a.max, a.min) == (5, 131071, 0)


def test_unaligned_bytes_become_an_aligned_copy():
    """A binary tensor may start at any byte of a request body."""
    raw = b"x" + np.array([3, 1, 2], np.int64).tobytes()
    a = parse_selection(np.frombuffer(raw, np.int64, 3, 1), ("positions",))
    assert a.values.flags.aligned and a.values.flags.c_contiguous and a.values.tolist() == [3, 1, 2]


@pytest.mark.parametrize(
    "value, loc, words",
    [
        (np.array([1, -2, 3], np.int64), ("positions", 1), "got -2"),
        (np.array([1, 2**31], np.int64), ("positions", 1), "[0, 2**31)"),
        (np.array([2**63 + 5], np.uint64), ("positions", 0), str(2**63 + 5)),
        (np.array([], np.int32), ("positions",), "must not be empty"),
        (np.array([[1, 2]], np.int32), ("positions",), "shape [1, 2]"),
        (np.array([1.0, 2.0]), ("positions",), "float64"),
        (np.array([True]), ("positions",), "bool"),
    ],
)
def test_array_refusals_name_the_element(value, loc, words):
    with pytest.raises(SpecError) as e:
        parse_selection(value, ("positions",))
    assert e.value.loc == loc and words in e.value.msg


@pytest.mark.parametrize("family", list(FAMILIES))
def test_pipeline_answers_arrays_like_lists(family):
    fam = FAMILIES[family]
    sel = {name: [5, 1, 9 + i] for i, name in enumerate(fam.selections)}
    as_lists = pipeline.compute(family, {**BODIES[family], **sel})
    p = pipeline.Pipeline()
    for _ in range(2):  # first sight of the spec, then the cached spec
        req = p.request(family, {**BODIES[family], **{k: np.array(v, np.int32) for k, v in sel.items()}})
        got = pipeline.arrays(req)
        assert got.keys() == as_lists.keys()
        for k, v in as_lists.items():
            np.testing.assert_array_equal(got[k], v)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_batched_names_the_arrays_shaped_by_selections(family):
    fam = FAMILIES[family]
    small = pipeline.compute(family, {**BODIES[family], **{n: [1] for n in fam.selections}})
    big = pipeline.compute(
        family, {**BODIES[family], **{n: [1, 2, 3 + i] for i, n in enumerate(fam.selections)}}
    )
    follows = {k for k, v in small.items() if np.shape(v) != np.shape(big[k])}
    assert follows == set(fam.batched)
