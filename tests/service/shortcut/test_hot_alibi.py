"""The C shortcut (service/shortcut/hot_answer.c) for ALiBi blocks against the full path and the library's bytes,
driven in-process.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from posenc.engine.core.errors import PosencError
from posenc.service.core.settings import Settings
from posenc.service.front.service import HOT_BYTES, Service
from tests.independent import assert_c_answer
from tests.procs import wait_for
from tests.service.hot_helpers import ALIBI_SPECS, alibi_bodies, learn_then_answer, needs_native
from tests.service_cases import ACCEPT_HDRS, BIN, orjson_dumps, reference_safetensors


@needs_native
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=alibi_bodies())
def test_native_alibi_answers_like_the_full_path(learnt, drawn):
    """A float32 ALiBi body whose spec has been answered before: the C shortcut gives the full
    path's bytes and the float64 reference's, or leaves the body to the full path."""
    spec, text, probe, plain = drawn
    body = text.encode()
    c, full = learn_then_answer(learnt, "alibi", body, probe.encode())
    if plain:  # no odd token in a valid body of a spec with a mapped table: C must answer it,
        assert full is not None, (
            body
        )  # unless its answer is over HOT_BYTES (test_native_alibi_keeps_the_limits)
        assert c is not None or len(full) > HOT_BYTES, body
    if c is not None:
        assert c == full
        assert c == reference_safetensors("alibi", json.loads(body))


@needs_native
def test_native_alibi_keeps_the_limits(learnt):
    spec = {"num_heads": 12}
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        learnt.execute(
            learnt.prepare("alibi", orjson_dumps({**spec, "query": [1], "key": [1]}), BIN["accept"])
        )
    small = orjson_dumps({**spec, "query": [4095], "key": {"start": 0, "stop": 4096}})
    assert (
        learnt.hot("alibi", small, ACCEPT_HDRS)
        == learnt.execute(learnt.prepare("alibi", small, BIN["accept"]))[0]
    )
    big = orjson_dumps(
        {**spec, "query": [4095], "key": {"start": 0, "stop": 90000}}
    )  # 4.3 MB: over HOT_BYTES
    assert learnt.hot("alibi", big, ACCEPT_HDRS) is None
    f16_probe = orjson_dumps({**spec, "dtype": "float16", "query": [1], "key": [1]})
    wait_for(
        lambda: (
            learnt.execute(learnt.prepare("alibi", f16_probe, BIN["accept"]))
            and learnt.hot("alibi", f16_probe, ACCEPT_HDRS)
        ),
        30,
        0.02,
        "the float16 template learnt",
    )
    f16 = orjson_dumps({**spec, "dtype": "float16", "query": [3], "key": [1, 2]})  # the engine's kernel
    assert (
        learnt.hot("alibi", f16, ACCEPT_HDRS)
        == learnt.execute(learnt.prepare("alibi", f16, BIN["accept"]))[0]
    )
    big16 = orjson_dumps({**spec, "dtype": "float16", "query": [4095], "key": {"start": 0, "stop": 180000}})
    assert learnt.hot("alibi", big16, ACCEPT_HDRS) is None  # 4.3 MB in float16 too: over HOT_BYTES
    tight = Service(Settings(namespace=learnt.settings.namespace, max_positions=100))
    tight.hot("alibi", b"{}", ACCEPT_HDRS)
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        tight.execute(tight.prepare("alibi", orjson_dumps({**spec, "query": [1], "key": [1]}), BIN["accept"]))
    assert (
        tight.hot(
            "alibi", orjson_dumps({**spec, "query": [9], "key": {"start": 0, "stop": 100}}), ACCEPT_HDRS
        )
        is not None
    )
    assert (
        tight.hot(
            "alibi", orjson_dumps({**spec, "query": [9], "key": {"start": 0, "stop": 101}}), ACCEPT_HDRS
        )
        is None
    )  # max_positions: the full path's 413


@needs_native
@pytest.mark.parametrize("spec", ALIBI_SPECS[:3], ids=["all-heads", "heads-masked", "symmetric"])
def test_native_alibi_decode_blocks_at_the_table_edge(learnt, spec):
    """Decode blocks (consecutive keys up to the query) are copied from the engine's distance
    table while every distance is inside it (2048 here) and computed past it: both exact."""
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        learnt.execute(
            learnt.prepare("alibi", orjson_dumps({**spec, "query": [1], "key": [1]}), BIN["accept"])
        )
    for q in (0, 5, 2046, 2047, 2048, 2049, 70000):
        for key in (
            {"start": 0, "stop": q + 1},
            {"start": max(0, q - 5), "stop": q + 1},
            {"start": 0, "stop": q + 2},
            {"start": 0, "stop": q + 1, "step": 2},
        ):
            if key["stop"] - key["start"] > 4096:
                continue
            for query in ([q], [q, q], {"start": q, "stop": q + 2}):
                body = orjson_dumps({**spec, "query": query, "key": key})
                got = learnt.hot("alibi", body, ACCEPT_HDRS)
                want = reference_safetensors("alibi", json.loads(body))
                assert got == want, body
                assert_c_answer("alibi", json.loads(body), got)


@needs_native
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    spec=st.sampled_from(ALIBI_SPECS),
    dtype=st.sampled_from(["float16", "bfloat16"]),
    query=st.lists(st.one_of(st.integers(0, 3000), st.integers(90_000, 300_000)), min_size=1, max_size=8),
    key=st.one_of(
        st.lists(st.one_of(st.integers(0, 3000), st.integers(0, 300_000)), min_size=1, max_size=8),
        st.builds(lambda a, n: {"start": a, "stop": a + n}, st.integers(0, 300_000), st.integers(1, 64)),
    ),
)
def test_native_alibi_half_precision_blocks_are_the_engines(learnt, spec, dtype, query, key):
    """float16 and bfloat16 blocks come from the engine's own block kernel (lent to the shortcut):
    the full path's bytes and the float64 reference's; a block with a cell past float16's range
    (distances of ~100,000 and more) is left to the full path, which refuses it with a 422."""
    spec = {**spec, "dtype": dtype}
    probe = orjson_dumps({**spec, "query": [1], "key": [1]})

    def learnt_it() -> bool:  # the half-precision table is built on demand: learnt once it is mapped
        for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
            learnt.execute(learnt.prepare("alibi", probe, BIN["accept"]))
        return learnt.hot("alibi", probe, ACCEPT_HDRS) is not None

    wait_for(learnt_it, 30, 0.02, "the template learnt")
    body = orjson_dumps({**spec, "query": query, "key": key})
    c = learnt.hot("alibi", body, ACCEPT_HDRS)
    try:
        full = learnt.execute(learnt.prepare("alibi", body, BIN["accept"]))[0]
    except PosencError:
        full = None
    event("answered" if full is not None else "refused (overflow)")
    assert c == full
    if c is not None:
        assert c == reference_safetensors("alibi", json.loads(body))
