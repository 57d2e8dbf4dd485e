"""The C shortcut (service/shortcut/hot_answer.c) for ALiBi blocks against the full path and the library's bytes,
driven in-process.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings

from posenc.service.front.service import Service
from posenc.engine.settings import Settings
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
    if plain:   # no odd token in a valid body of a spec with a mapped table: C must answer it
        assert full is not None and c is not None, body
    if c is not None:
        assert c == full
        assert c == reference_safetensors("alibi", json.loads(body))


@needs_native
def test_native_alibi_keeps_the_limits(learnt):
    spec = {"num_heads": 12}
    learnt.execute(learnt.prepare("alibi", orjson_dumps({**spec, "query": [1], "key": [1]}), BIN["accept"]))
    small = orjson_dumps({**spec, "query": [4095], "key": {"start": 0, "stop": 4096}})
    assert learnt.hot("alibi", small, ACCEPT_HDRS) == learnt.execute(learnt.prepare("alibi", small, BIN["accept"]))[0]
    big = orjson_dumps({**spec, "query": [4095], "key": {"start": 0, "stop": 90000}})   # 4.3 MB: over HOT_BYTES
    assert learnt.hot("alibi", big, ACCEPT_HDRS) is None
    learnt.execute(learnt.prepare("alibi", orjson_dumps({**spec, "dtype": "float16", "query": [1], "key": [1]}),
                                  BIN["accept"]))
    f16 = orjson_dumps({**spec, "dtype": "float16", "query": [3], "key": [1, 2]})
    assert learnt.hot("alibi", f16, ACCEPT_HDRS) is None                                 # float32 only
    tight = Service(Settings(namespace=learnt.settings.namespace, max_positions=100))
    tight.hot("alibi", b"{}", ACCEPT_HDRS)
    tight.execute(tight.prepare("alibi", orjson_dumps({**spec, "query": [1], "key": [1]}), BIN["accept"]))
    assert tight.hot("alibi", orjson_dumps({**spec, "query": [9], "key": {"start": 0, "stop": 100}}),
                     ACCEPT_HDRS) is not None
    assert tight.hot("alibi", orjson_dumps({**spec, "query": [9], "key": {"start": 0, "stop": 101}}),
                     ACCEPT_HDRS) is None                                               # max_positions: the full path's 413


@needs_native
@pytest.mark.parametrize("spec", ALIBI_SPECS[:3], ids=["all-heads", "heads-masked", "symmetric"])
def test_native_alibi_decode_blocks_at_the_table_edge(learnt, spec):
    """Decode blocks (consecutive keys up to the query) are copied from the engine's distance
    table while every distance is inside it (2048 here) and computed past it: both exact."""
    learnt.execute(learnt.prepare("alibi", orjson_dumps({**spec, "query": [1], "key": [1]}), BIN["accept"]))
    for q in (0, 5, 2046, 2047, 2048, 2049, 70000):
        for key in ({"start": 0, "stop": q + 1}, {"start": max(0, q - 5), "stop": q + 1},
                    {"start": 0, "stop": q + 2}, {"start": 0, "stop": q + 1, "step": 2}):
            if key["stop"] - key["start"] > 4096:
                continue
            for query in ([q], [q, q], {"start": q, "stop": q + 2}):
                body = orjson_dumps({**spec, "query": query, "key": key})
                got = learnt.hot("alibi", body, ACCEPT_HDRS)
                want = reference_safetensors("alibi", json.loads(body))
                assert got == want, body
