"""Response size limits: exactly at the limit is served, one byte over raises TooLarge (413), and
huge requests are refused before anything is allocated.
"""

from __future__ import annotations

import tracemalloc

import pytest

from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import TooLarge
from tests.engine.specs import A, R, S, T, w

# --------------------------------------------------------------------------- size limit


def _too_large(family, request_, max_bytes):
    with pytest.raises(TooLarge) as e:
        compute(family, request_, max_bytes=max_bytes)
    return e.value


@pytest.mark.parametrize(
    "family,request_,nbytes",
    [
        ("sinusoidal", w(S, positions={"start": 0, "stop": 1000}), 1000 * 16 * 4),
        ("sinusoidal", w(S, positions={"start": 0, "stop": 1000}, dtype="float16"), 1000 * 16 * 2),
        ("sinusoidal", w(S, positions={"start": 0, "stop": 1000}, dtype="bfloat16"), 1000 * 16 * 2),
        (
            "alibi",
            w(A, num_heads=4, query={"start": 0, "stop": 10}, key={"start": 0, "stop": 20}),
            4 * 10 * 20 * 4 + 16,
        ),
        (
            "alibi",
            w(A, heads=[1, 1, 1], query=[0] * 10, key={"start": 0, "stop": 20}, dtype="float16"),
            3 * 10 * 20 * 2 + 12,
        ),
        ("t5-buckets", w(T, query={"start": 0, "stop": 10}, key={"start": 0, "stop": 20}), 10 * 20 * 4),
        # cos + sin, inv_freq float32, and attention_scaling: an array of the answer too (a 0-d
        # float64 in the files posenc compute writes, docs/reference.md), so its 8 bytes count
        ("rope", w(R, positions={"start": 0, "stop": 100}), 2 * 100 * 64 * 4 + 32 * 4 + 8),
    ],
)
def test_size_limit_boundary(family, request_, nbytes):
    compute(family, request_, max_bytes=nbytes)  # exactly at the limit: served
    err = _too_large(family, request_, nbytes - 1)  # one byte over: refused
    assert err.nbytes == nbytes and err.limit == nbytes - 1
    assert err.status == 413


def test_default_limit_is_64_mib():
    err = _too_large("rope", w(R, head_dim=128, positions={"start": 0, "stop": 70000}), 64 * 2**20)
    assert err.limit == 64 * 2**20
    with pytest.raises(TooLarge):
        compute("rope", w(R, head_dim=128, positions={"start": 0, "stop": 70000}))
    compute("rope", w(R, head_dim=128, positions={"start": 0, "stop": 60000}))


@pytest.mark.parametrize(
    "family,request_",
    [
        ("rope", w(R, head_dim=128, positions={"start": 0, "stop": 2**31 - 1})),
        ("sinusoidal", w(S, d_model=1024, positions={"start": 0, "stop": 2**31})),
        ("alibi", w(A, num_heads=64, query={"start": 0, "stop": 2**31}, key={"start": 0, "stop": 2**31})),
        ("t5-buckets", w(T, query={"start": 0, "stop": 2**31}, key={"start": 0, "stop": 2**31})),
    ],
)
def test_huge_requests_refused_before_allocating(family, request_):
    """Refused from the sizes alone: nothing near the response's size is ever allocated (how long
    the refusal takes is not asserted; the peak of traced memory shows the behaviour)."""
    tracemalloc.start()
    try:
        with pytest.raises(TooLarge):
            compute(family, request_)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak
