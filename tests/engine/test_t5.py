"""T5 relative-position buckets, docs/reference.md, against transformers'
``T5Attention._relative_position_bucket`` (relative position = key − query)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.models.t5.modeling_t5 import T5Attention

from posenc.engine.answer.pipeline import compute

TOP = 2**31 - 1
CONFIGS = [
    (True, 32, 128),
    (False, 32, 128),
    (True, 64, 256),
    (False, 16, 64),
    (True, 4, 2),
    (False, 2, 2),
    (True, 320, 2**20),
    (False, 100, 1000),
]


def t5_req(query, key, **extra):
    return {"query": query, "key": key, **extra}


def hf_buckets(query, key, bidirectional, num_buckets, max_distance):
    q = torch.tensor(query, dtype=torch.int64)[:, None]
    k = torch.tensor(key, dtype=torch.int64)[None, :]
    return T5Attention._relative_position_bucket(
        k - q, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    ).numpy()


def _sel(s):
    return list(range(s["start"], s["stop"], s.get("step", 1))) if isinstance(s, dict) else s


BLOCKS = [
    ({"start": 0, "stop": 80}, {"start": 0, "stop": 80}),  # prefill square
    ([TOP], [0, 1, 2, 3, 1000, 2**30, TOP - 300, TOP - 129, TOP - 128, TOP - 127, TOP - 1, TOP]),
    ([0, 1, 2**30], [TOP, TOP - 1, 0, 2**30 + 128, 2**30 - 128, 2**30 + 129]),  # rel up to +(2^31 − 1)
    ([131072 + 7], {"start": 131072 - 300, "stop": 131072 + 300}),  # decode past 131072
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"bi={c[0]},nb={c[1]},md={c[2]}")
@pytest.mark.parametrize("block", range(len(BLOCKS)))
def test_buckets_vs_transformers(cfg, block):
    bidirectional, nb, md = cfg
    q, k = BLOCKS[block]
    out = compute("t5-buckets", t5_req(q, k, bidirectional=bidirectional, num_buckets=nb, max_distance=md))
    b = out["buckets"]
    assert b.dtype == np.int32
    want = hf_buckets(_sel(q), _sel(k), bidirectional, nb, md)
    assert b.shape == want.shape
    bad = np.argwhere(b != want)
    assert bad.size == 0, [
        (int(_sel(k)[j]) - int(_sel(q)[i]), int(b[i, j]), int(want[i, j])) for i, j in bad[:5]
    ]


def test_every_distance_up_to_3e5_vs_transformers():
    # dense sweep of rel in [−300000, 300000] for the common configs (one query row each)
    for bidirectional, nb, md in [(True, 32, 128), (False, 32, 128), (True, 64, 256)]:
        q = [300000]
        k = {"start": 0, "stop": 600001}
        got = compute(
            "t5-buckets", t5_req(q, k, bidirectional=bidirectional, num_buckets=nb, max_distance=md)
        )
        want = hf_buckets(q, list(range(600001)), bidirectional, nb, md)
        np.testing.assert_array_equal(got["buckets"], want)


def test_hand_values_from_semantics():
    def bucket(rel, bidirectional):
        q, k = (0, rel) if rel >= 0 else (-rel, 0)
        return int(compute("t5-buckets", t5_req([q], [k], bidirectional=bidirectional))["buckets"][0, 0])

    # defaults: bidirectional, 32 buckets, max_distance 128
    assert [bucket(r, True) for r in (0, -1, 1, -16, -128, -5000, 128, 5000)] == [
        0,
        1,
        17,
        10,
        15,
        15,
        31,
        31,
    ]
    assert [bucket(r, False) for r in (0, 5, 5000, -1, -16, -128, -5000)] == [0, 0, 0, 1, 16, 31, 31]
    d = compute("t5-buckets", t5_req([3], [0, 3, 4]))
    e = compute("t5-buckets", t5_req([3], [0, 3, 4], bidirectional=True, num_buckets=32, max_distance=128))
    np.testing.assert_array_equal(d["buckets"], e["buckets"])


def test_order_and_repeats():
    a = compute("t5-buckets", t5_req([5, 0, 5], [9, 0, 9, 1]))["buckets"]
    b = compute("t5-buckets", t5_req([0, 5], [0, 1, 9]))["buckets"]
    np.testing.assert_array_equal(a, b[[1, 0, 1]][:, [2, 0, 2, 1]])


@settings(max_examples=60, deadline=None, print_blob=True)
@given(
    q=st.integers(0, TOP),
    bidirectional=st.booleans(),
    nb=st.integers(4, 200),
    extra=st.integers(1, 5000),
    dists=st.lists(st.integers(0, TOP), min_size=2, max_size=40, unique=True),
)
def test_buckets_monotone_in_distance(q, bidirectional, nb, extra, dists):
    exact = nb // 4 if bidirectional else nb // 2
    md = exact + extra
    dists = sorted(dists)
    for sign in (-1, 1):
        keys = [q + sign * d for d in dists if 0 <= q + sign * d <= TOP]
        if len(keys) < 2:
            continue
        b = compute(
            "t5-buckets", t5_req([q], keys, bidirectional=bidirectional, num_buckets=nb, max_distance=md)
        )["buckets"][0]
        assert (np.diff(b.astype(np.int64)) >= 0).all(), (sign, list(zip(keys, b.tolist())))
        assert ((b >= 0) & (b < nb)).all()
        rel = np.asarray(keys) - q
        if bidirectional:
            assert ((b >= nb // 2) == (rel > 0)).all()
        else:
            assert (b[rel >= 0] == 0).all()
