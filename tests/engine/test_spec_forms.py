"""Valid edge values are accepted, and an explicit null equals an absent field, for every family."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.engine.answer.pipeline import compute
from tests.engine.specs import LLAMA3, LONG, YARN, A, R, S, T, plus, rs, w, without


@pytest.mark.parametrize(
    "family,request_",
    [
        ("rope", w(R, rope_theta=10000)),  # a float field takes an integer
        ("rope", w(R, partial_rotary_factor=1)),
        ("rope", rs({"rope_type": "linear", "factor": 1})),  # factor 1 is allowed
        ("rope", rs({"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=4096, seq_len=1)),
        ("rope", rs(plus(LONG, factor=1.0))),  # factor present: M not needed
        ("rope", w(R, head_dim=2)),
        ("sinusoidal", w(S, d_model=2)),
        ("sinusoidal", w(S, d_model=3, layout="interleaved")),
        ("sinusoidal", w(S, d_model=4, layout="fairseq")),
        ("sinusoidal", w(S, base=1.0001, offset=0)),
        ("alibi", w(A, heads=[7, 7, 0], max_bias=1)),
        ("alibi", w(A, num_heads=1, query=[2**31 - 1], key=[0, 2**31 - 1])),
        ("t5-buckets", w(T, num_buckets=4, max_distance=2)),
        ("t5-buckets", w(T, num_buckets=2, max_distance=2, bidirectional=False)),
        ("t5-buckets", w(T, num_buckets=32, max_distance=9)),
        ("rope", w(R, positions={"start": 2**31 - 2, "stop": 2**31})),
        ("rope", w(R, positions=[2**31 - 1, 0, 0])),
    ],
)
def test_valid_edge_values_are_accepted(family, request_):
    compute(family, request_)


# --------------------------------------------------------------------------- null == absent


def _equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert a[k].dtype == b[k].dtype
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        else:
            assert a[k] == b[k], k


@pytest.mark.parametrize(
    "family,base,nulls",
    [
        (
            "rope",
            R,
            dict(
                rope_theta=None,
                partial_rotary_factor=None,
                max_position_embeddings=None,
                rope_scaling=None,
                original_max_position_embeddings=None,
                seq_len=None,
                layout=None,
                dtype=None,
            ),
        ),
        ("rope", w(R, rope_theta=None), dict(rope_parameters=None)),
        (
            "rope",
            rs(YARN),
            dict(
                rope_scaling=plus(
                    YARN,
                    attention_factor=None,
                    beta_fast=None,
                    beta_slow=None,
                    mscale=None,
                    mscale_all_dim=None,
                    truncate=None,
                )
            ),
        ),
        (
            "rope",
            rs(without(LLAMA3, "original_max_position_embeddings"), max_position_embeddings=131072),
            dict(rope_scaling=plus(LLAMA3, original_max_position_embeddings=None)),
        ),
        ("sinusoidal", S, dict(base=None, layout=None, offset=None, dtype=None)),
        ("alibi", A, dict(heads=None, max_bias=None, mode=None, mask_future=None, dtype=None)),
        ("t5-buckets", T, dict(bidirectional=None, num_buckets=None, max_distance=None)),
    ],
    ids=["rope-top", "rope-parameters", "yarn-inner", "llama3-inner", "sinusoidal", "alibi", "t5"],
)
def test_explicit_null_equals_absent(family, base, nulls):
    want = compute(family, base)
    _equal(compute(family, w(base, **nulls)), want)
