"""T5 bucket blocks answered by the C shortcut (service/shortcut/hot_t5.c, the engine's own block
kernel over the mapped table): byte for byte the pipeline's answer from the same table and its
exact compute, over generated specs and selections (lists and ranges, positions up to the limit);
JSON answers through the lane (C writes the integers) too; blocks over the byte limit are the full
path's."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posenc.engine import kernels
from posenc.engine.answer import pipeline
from posenc.engine.core.encode import encode
from posenc.engine.core.selection import POSITION_LIMIT
from posenc.service.shortcut import templates as replay
from tests.independent import assert_c_answer
from tests.procs import wait_for
from tests.service.shortcut.test_templates_in_memory import HEADERS, LENGTH, answer_both, view_of
from tests.service_cases import ACCEPT_HDRS, BIN, orjson_dumps, reference_safetensors

pytestmark = pytest.mark.skipif(
    not replay.NATIVE or kernels.c_api() is None, reason="service._hot or the simd kernels are not built"
)

SPECS = [
    {},
    {"bidirectional": False},
    {"num_buckets": 64, "max_distance": 1000},
    {"bidirectional": False, "num_buckets": 7, "max_distance": 9},
]
POSITION = st.one_of(
    st.integers(0, 300), st.integers(0, 1 << 20), st.integers(POSITION_LIMIT - 3, POSITION_LIMIT - 1)
)
SELECTION = st.one_of(
    st.lists(POSITION, min_size=1, max_size=40),
    st.builds(
        lambda a, n, s: {"start": a, "stop": min(POSITION_LIMIT, a + n), "step": s},
        POSITION,
        st.integers(1, 40),
        st.integers(1, 3),
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.sampled_from(SPECS), query=SELECTION, key=SELECTION)
def test_t5_blocks_match_the_pipeline(spec, query, key):
    c, served, computed = answer_both(
        "t5-buckets", {**spec, "query": [1], "key": [1]}, {**spec, "query": query, "key": key}
    )
    assert c is not None
    assert c == served == computed


def test_blocks_over_the_byte_limit_and_json_take_the_full_path():
    templates = replay.Templates(max_n=1 << 20, max_bytes=4096)
    req = pipeline.parse("t5-buckets", {"query": [1], "key": [1]}, LENGTH)
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        templates.learn("safetensors", orjson.dumps({"query": [1], "key": [1]}), req, view_of(req.table))
    native = templates.native["t5-buckets"]

    def answer(body: dict):
        return replay.answer(
            orjson.dumps(body), HEADERS, {b"application/x-safetensors": 0}, native, "t5-buckets"
        )

    assert answer({"query": [0], "key": {"start": 0, "stop": 1024}}) is not None  # 4096 bytes: the limit
    assert answer({"query": [0], "key": {"start": 0, "stop": 1025}}) is None
    assert answer({"query": {"start": 0, "stop": 33}, "key": {"start": 0, "stop": 32}}) is None
    assert (
        replay.answer(
            orjson.dumps({"query": [0], "key": [1]}),
            HEADERS,
            {b"application/x-safetensors": 1},
            native,
            "t5-buckets",
        )
        is None
    )  # the ASGI front answers safetensors only (JSON: the lane, below)


@pytest.mark.parametrize("spec", SPECS[:3])
def test_t5_from_the_engines_table(learnt, spec):
    """Against the engine (its mapped table, built on demand): C answers as the full path does."""
    probe = orjson_dumps({**spec, "query": [1], "key": [1]})

    def learnt_it() -> bool:
        for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
            learnt.execute(learnt.prepare("t5-buckets", probe, BIN["accept"]))
        return learnt.hot("t5-buckets", probe, ACCEPT_HDRS) is not None

    wait_for(learnt_it, 30, 0.02, "the template learnt")
    for q, k in (([7], {"start": 0, "stop": 8}), ([0, 500, 70000], [3, 69000, 2**31 - 1])):
        body = orjson_dumps({**spec, "query": q, "key": k})
        c = learnt.hot("t5-buckets", body, ACCEPT_HDRS)
        full = learnt.execute(learnt.prepare("t5-buckets", body, BIN["accept"]))[0]
        assert c is not None and c == full == reference_safetensors("t5-buckets", json.loads(body))
        assert_c_answer("t5-buckets", json.loads(body), c)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.sampled_from(SPECS), query=SELECTION, key=SELECTION)
def test_t5_json_through_the_lane_is_the_full_paths(spec, query, key):
    """JSON answers (the lane's; C writes the integers) are the full path's bytes."""
    first = {**spec, "query": [1], "key": [1]}
    templates = replay.Templates(max_n=1 << 20, max_bytes=4 << 20)
    req = pipeline.parse("t5-buckets", first, LENGTH)
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        templates.learn("json", orjson.dumps(first), req, view_of(req.table))
    (t,) = templates.native["t5-buckets"].values()
    body = orjson.dumps({**spec, "query": query, "key": key})
    got = replay.answer_request(
        b"POST / HTTP/1.1\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body),
        0,
        {b"/": ("t5-buckets",)},
        {None: replay.FORMATS["json"]},
        templates.native,
        (b"", b"", b""),
        b"",
        False,
    )
    req2 = pipeline.parse("t5-buckets", orjson.loads(body), LENGTH)
    want = encode(req2.family, pipeline.arrays(req2), req2.dtype, "json")[0]
    assert got and got[2].partition(b"\r\n")[2] == want


@pytest.mark.parametrize("family, body", [("t5-buckets", {}), ("alibi", {"num_heads": 12})])
def test_enable_json_reads_its_arguments_alike_on_both_block_templates(family, body):
    # one reader of (parts, flat) for AlibiTemplate and T5Template (hot_templates.c hot_json_parts)
    req = pipeline.parse(family, {**body, "query": [3], "key": [1, 2]}, LENGTH)
    t = replay.block_template(req, view_of(req.table), 1 << 20, 1 << 20)
    assert t is not None
    for bad in [(b"[",), (b"[", "]"), [b"[", b"]"], b"[]", 7]:
        with pytest.raises(TypeError, match=r"enable_json\(parts: \(bytes, bytes\) \| None"):
            t.enable_json(bad)
    with pytest.raises(TypeError):
        t.enable_json((b"[", b"]"), True, 3)
    assert t.enable_json((b"[", b"]"), True) is None and t.enable_json(None) is None
    assert t.enable_json(None, False) is None and t.enable_json((b"[", b"]")) is None
