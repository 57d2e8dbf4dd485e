"""v2 REST JSON-tensor infers on the whole-request C path (service/v2/hot_json.py,
service/shortcut/hot_v2json.c, a branch of the lane's v2 routes): a body whose inputs carry JSON
``data`` lists, answered in one C call from the request's bytes, byte for byte the body the full
path (service/v2/rest.py with the shortcut off) writes, for rope types whose rows do not follow the
positions in both layouts, partial rotary, every sinusoidal layout, T5 variants, float32 and
float16 (BF16 travels only binary in v2), INT32 and INT64 inputs, positions on both sides of each
table's end, ALiBi blocks of every mode with query and key in either order; anything else is
declined (False) and left to the full path."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from posenc.engine import kernels
from posenc.service.shortcut import templates as replay
from posenc.service.shortcut.store import still_mapped
from posenc.service.v2 import rest
from posenc.service.v2.hot_json import DATA, controls
from tests.independent import assert_answer
from tests.procs import wait_for
from tests.service.hot_helpers import wait_learnt
from tests.service.shortcut.test_past_table import ROPE_SCALINGS
from tests.service.v2.test_v2_hot import servers  # noqa: F401  (the fixture)
from tests.service_cases import LLAMA3_8K

pytestmark = pytest.mark.skipif(not replay.NATIVE, reason="service._hot is not built")
PAST_IN_C = kernels.c_api() is not None  # rows past a table computed in C: the simd backend's kernels
PRE = (b"ST:", b"JS:", b"V2:")  # the lane's heads by format: a JSON answer's is the second
GROWN = replay._hot.GROWN_ROWS  # JSON rows past a table have texts this far

ROWS = [
    ("rope", {"head_dim": 64}),
    ("rope", {"head_dim": 64, "layout": "interleaved", "dtype": "float16"}),
    ("rope", LLAMA3_8K),
    (
        "rope",
        {
            "head_dim": 96,
            "partial_rotary_factor": 0.5,
            "max_position_embeddings": 4096,
            "rope_scaling": {"type": "yarn", "factor": 4.0},
        },
    ),
    ("rope", {"head_dim": 36, "partial_rotary_factor": 0.5, "layout": "interleaved", "rope_theta": 500.0}),
    ("sinusoidal", {"d_model": 33}),
    ("sinusoidal", {"d_model": 33, "layout": "interleaved", "offset": 2, "dtype": "float16"}),
    ("sinusoidal", {"d_model": 32, "layout": "fairseq", "offset": 2}),
]
T5 = [{}, {"bidirectional": False, "num_buckets": 16, "max_distance": 64}]


def body_of(spec: dict, inputs: list, rid: str | None = None, params: dict | None = None) -> bytes:
    head = {
        "parameters": {"spec": json.dumps(spec), **(params or {})},
        "inputs": [
            {"name": n, "datatype": dt, "shape": list(np.shape(v)), "data": np.ravel(v).tolist()}
            for n, dt, v in inputs
        ],
    }
    if rid is not None:
        head = {"id": rid, **head}
    return json.dumps(head, separators=(",", ":")).encode()


def full_path(server, model: str, body: bytes, headers=((b"content-type", b"application/json"),)):
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(msg):
        sent.append(msg)

    path = f"/v2/models/{model}/infer"
    scope = {"type": "http", "method": "POST", "path": path, "headers": list(headers)}
    asyncio.run(rest.handle(server.v2, scope, receive, send, []))
    return sent[0]["status"], sent[0]["headers"], sent[1]["body"]


def lane(server, model: str, body: bytes, extra: bytes = b""):
    data = (
        b"POST /v2/models/%s/infer HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n%s"
        b"content-length: %d\r\n\r\n%s" % (model.encode(), extra, len(body), body)
    )
    return replay.answer_request(data, 0, ({}, server.hot.lane_routes), {}, {}, PRE, b"|", False)


def check(servers, model: str, body: bytes, answered: bool) -> None:  # noqa: F811
    on, off = servers
    status, headers, want = full_path(off, model, body)
    got = lane(on, model, body)
    if not answered:
        assert got is False, body
        return
    assert isinstance(got, tuple), body
    assert status == 200 and [k for k, _ in headers] == [b"content-type", b"content-length"]
    assert got[2] == b"JS:%d\r\n\r\n%s" % (len(want), want)
    assert full_path(on, model, body)[2] == want  # and the full path with the shortcut on
    assert_v2_answer(model, body, want)  # and the float64 reference, not only the full path's


def assert_v2_answer(model: str, body: bytes, answer: bytes) -> None:
    """A v2 JSON answer held to tests/independent.py's float64 reference of its request: the spec
    parameter and the inputs' data (flattened: one block or one row per position) as a /v1 body,
    each output's data as an array of its shape (rows: [positions, width])."""
    req = json.loads(body)
    v1 = {**json.loads(req["parameters"]["spec"]), **{x["name"]: list(x["data"]) for x in req["inputs"]}}
    arrays = {}
    for o in json.loads(answer)["outputs"]:
        a = np.asarray(o["data"]).reshape(o["shape"])
        if o["name"] in ("cos", "sin", "encoding"):
            a = a.reshape(-1, a.shape[-1])
        arrays[o["name"]] = a.reshape(()) if o["name"] == "attention_scaling" else a
    assert_answer(model, v1, arrays, f"v2 JSON {model} {v1}")


PROBE = {
    "rope": {"positions": [0]},
    "sinusoidal": {"positions": [0]},  # the selections of a table's request
    "alibi": {"query": [0], "key": [0]},
    "t5-buckets": {"query": [0], "key": [0]},
}


def learn(on, model: str, spec: dict, inputs, **kw) -> int | None:
    """Until the lane answers: the full path learns at its second answer, once the spec's table is
    mapped (a spec no configured table holds is built on demand). Returns the length of the table
    the learnt entry reads: read under the manifest the lane's entries were last checked against, so
    an on-demand table rebuilt longer meanwhile (another file: its entries dropped, learnt again)
    never lends the test a length the lane's entry does not have."""
    req = lambda: on.v2.inferer.pipeline.request(model, {**spec, **PROBE[model]})  # noqa: E731
    got = {}

    def answer():
        on.hot.fresh()  # as the lane does every few ms
        full_path(on, model, body_of(spec, inputs(), **kw))

    def taken() -> bool:
        view = on.v2.client.view(req())
        on.hot.fresh()  # after the length is read: a table grown since drops the entry
        got["length"] = None if view is None else view.length
        return isinstance(lane(on, model, body_of(spec, inputs(), **kw)), tuple)

    wait_learnt(
        lambda: on.hot.store.seen,
        lambda: on.v2.client.is_mapped(req()),
        answer,
        taken,
        f"the lane learns {model} {spec}",
    )
    return got["length"]


@pytest.mark.parametrize("model, spec", ROWS, ids=lambda c: json.dumps(c) if isinstance(c, dict) else c)
@pytest.mark.parametrize("datatype", ["INT64", "INT32"])
@pytest.mark.parametrize("shape", [(1,), (16,), (2, 3)])
def test_rows_json_infers_are_the_full_paths(servers, model, spec, datatype, shape):  # noqa: F811
    on, _ = servers
    rng = np.random.default_rng(len(shape) * 31 + len(spec))
    length = learn(on, model, spec, lambda: [("positions", datatype, rng.integers(0, 2048, shape))])
    for lo, hi in [
        (0, 2048),
        (length - 3, length + 3),
        (length, length + 5000),
        (length + GROWN - 2, length + GROWN + 2),
        (2**31 - 3, 2**31 + 1),
    ]:
        p = rng.integers(lo, hi, shape)
        top = int(p.max()) + spec.get("offset", 0)  # the row it reads
        inside = top < length or (PAST_IN_C and top < length + GROWN)
        if p.max() >= 2**31:  # past the position limit: refused by the full path, declined here
            assert lane(on, model, body_of(spec, [("positions", datatype, p)])) is False
            continue
        check(servers, model, body_of(spec, [("positions", datatype, p)]), inside)


@pytest.mark.parametrize("spec", T5, ids=json.dumps)
@pytest.mark.parametrize("datatype", ["INT64", "INT32"])
@pytest.mark.parametrize("key_first", [False, True])
def test_t5_json_infers_are_the_full_paths(servers, spec, datatype, key_first):  # noqa: F811
    if kernels.c_api() is None:
        pytest.skip("T5 blocks come from the simd backend's kernel")
    on, _ = servers
    rng = np.random.default_rng(7)

    def inputs(hi: int = 2048):
        q, k = ("query", datatype, rng.integers(0, hi, 1)), ("key", datatype, rng.integers(0, hi, 16))
        return [k, q] if key_first else [q, k]

    learn(on, "t5-buckets", spec, inputs, rid="step")
    for hi in (2048, 10**6):
        for _ in range(4):
            check(servers, "t5-buckets", body_of(spec, inputs(hi), rid="step"), True)


ALIBI = [
    {"num_heads": 12},
    {"num_heads": 5, "mode": "symmetric", "dtype": "float16"},
    {"num_heads": 6, "mask_future": True},
    {"num_heads": 3, "heads": [0, 2], "max_bias": 4.0, "mask_future": True, "dtype": "float16"},
    {"num_heads": 7, "mode": "symmetric"},
    {"num_heads": 10, "max_bias": 0.5, "dtype": "float16"},
]


def alibi_inputs(datatype: str, key_first: bool, q, k) -> list:
    q, k = ("query", datatype, np.asarray(q)), ("key", datatype, np.asarray(k))
    return [k, q] if key_first else [q, k]


@pytest.mark.parametrize("spec", ALIBI, ids=json.dumps)
@pytest.mark.parametrize("datatype", ["INT64", "INT32"])
@pytest.mark.parametrize("key_first", [False, True])
def test_alibi_json_infers_are_the_full_paths(servers, spec, datatype, key_first):  # noqa: F811
    """Blocks [heads, nq, nk] as one flat list from the template's kept cell texts: every mode and
    dtype, distances on both sides of the stored table's end and far past it (float16 cells that
    overflow there: the full path's 422, declined here)."""
    if spec.get("dtype") == "float16" and kernels.c_api() is None:
        pytest.skip("float16 ALiBi blocks come from the simd backend's kernel")
    on, off = servers
    rng = np.random.default_rng(len(spec) * 7 + key_first)
    length = learn(on, "alibi", spec, lambda: alibi_inputs(datatype, key_first, [20], rng.integers(0, 64, 3)))
    outcomes = set()
    for q0 in (30, length - 2, length + 2, 3 * length, 10**6, 2**31 - 40):
        q = [q0]
        for k in (
            q0 - 2 - np.arange(3),
            q0 + np.arange(3) - 1,
            np.maximum(0, q0 - length + rng.integers(-3, 3, 3)),
            [0, q0 // 2, q0],
        ):  # distances: small, negative, across the table's end, far
            body = body_of(spec, alibi_inputs(datatype, key_first, q, k))
            ok = full_path(off, "alibi", body)[0] == 200  # a float16 cell that overflows: 422
            outcomes.add(ok)
            check(servers, "alibi", body, ok)
    assert True in outcomes and (spec.get("dtype") != "float16" or False in outcomes)
    prefill = alibi_inputs(
        datatype, key_first, length + np.arange(4), length - 5 + np.arange(6)
    )  # 4 x 6 cells
    learn(on, "alibi", spec, lambda: prefill)
    check(
        servers,
        "alibi",
        body_of(spec, alibi_inputs(datatype, key_first, np.arange(4) + 9, np.arange(6) * 3)),
        True,
    )


def test_alibi_blocks_spread_far_apart_are_the_lanes(servers):  # noqa: F811
    """A block whose distances spread far apart (every cell at a distance of its own, far past the
    table) is the lane's too, as on /v1: C formats each cell, nothing is rendered or kept per distance."""
    on, off = servers
    spec, n = {"num_heads": 4, "max_bias": 2.0}, 18
    keys = lambda step: np.arange(n) * step  # noqa: E731
    learn(on, "alibi", spec, lambda: alibi_inputs("INT64", False, [5], keys(1)))
    check(servers, "alibi", body_of(spec, alibi_inputs("INT64", False, [5], keys(1))), True)
    far = body_of(spec, alibi_inputs("INT64", False, [2**30], keys(256 * 1001)))
    assert full_path(off, "alibi", far)[0] == 200
    check(servers, "alibi", far, True)


def test_a_key_learnt_as_its_table_is_replaced_is_learnt_again(servers, monkeypatch):  # noqa: F811
    """The engine replaces an on-demand table (grown longer: a new file) between the full path's
    answer and its learning: the manifest refreshed at learn time drops the table's mapping, so the
    learn finds it unmapped. The key is learnt again at its next answer (as the binary forms are),
    not remembered as no template until the manifest changes again (CI's ALiBi JSON learn race:
    the main loop's far distances grow the table while the prefill body is learnt)."""
    on, _ = servers
    client, spec = on.v2.client, {"num_heads": 9, "max_bias": 3.0}  # a table no other test builds
    learn(on, "alibi", spec, lambda: alibi_inputs("INT64", False, [20], [3, 5, 7]))  # mapped, 4096 long
    req = on.v2.inferer.pipeline.request("alibi", {**spec, **PROBE["alibi"]})
    view = client.view(req)
    assert view is not None and view.growable, "an on-demand table that grows"
    body = body_of(spec, alibi_inputs("INT64", False, [9, 10], [4, 8]))  # a key of its own
    recheck = client.recheck_s
    monkeypatch.setattr(client, "recheck_s", 3600.0)  # this client reads no new manifest by itself
    assert full_path(on, "alibi", body)[0] == 200  # its first answer
    far = body_of(spec, alibi_inputs("INT64", False, [view.length + 1000], [0]))
    assert full_path(on, "alibi", far)[0] == 200  # past the table: asks the engine for a longer one
    engine_file = lambda: client.call({"op": "manifest"})["manifest"]["tables"][req.table.digest]["file"]  # noqa: E731
    wait_for(
        lambda: engine_file() != view.segment.entry["file"],
        what="the engine's longer table",
        seen=engine_file,
    )
    store = on.hot.store
    fresh = store.fresh

    def refreshed_at_learn():  # the manifest read at learn time is the one with the new file
        monkeypatch.setattr(store, "fresh", fresh)
        client.manifest(force=True)
        return fresh()

    monkeypatch.setattr(store, "fresh", refreshed_at_learn)
    assert full_path(on, "alibi", body)[0] == 200  # answered from the old mapping, learnt unmapped
    assert store.fresh == fresh and not client.is_mapped(req), "the learn read the new manifest"
    monkeypatch.setattr(client, "recheck_s", recheck)
    learn(on, "alibi", spec, lambda: alibi_inputs("INT64", False, [9, 10], [4, 8]))
    check(servers, "alibi", body_of(spec, alibi_inputs("INT64", False, [30, 7], [1, 2])), True)


def test_a_view_lost_at_learning_is_no_error_and_learnt_again(servers, monkeypatch):  # noqa: F811
    """The table probe() saw mapped is gone when the template is made (view() read a manifest that
    dropped it, or its attach found no descriptor left: view() says None): the answer is the full
    path's all the same, no template is made from no table (it was an AttributeError: a 500), and the
    key is learnt again at its next answer."""
    on, off = servers
    spec = {"head_dim": 48, "rope_theta": 1234.0}  # a table no other test builds
    pos = lambda *p: [("positions", "INT64", np.array(p))]  # noqa: E731
    learn(on, "rope", spec, lambda: pos(1, 2))  # its table built and mapped; this key learnt
    body = body_of(spec, pos(3, 4), rid="lost")  # a key of its own
    client, view = on.v2.client, on.v2.client.view
    assert full_path(on, "rope", body)[0] == 200  # its first answer: seen once
    monkeypatch.setattr(client, "view", lambda req: None)  # the mapping lost as the template is made
    assert full_path(on, "rope", body) == full_path(off, "rope", body)
    monkeypatch.setattr(client, "view", view)
    assert lane(on, "rope", body) is False  # no template from no table
    assert full_path(on, "rope", body)[0] == 200  # its next answer learns it
    assert isinstance(lane(on, "rope", body), tuple), "the key learnt again once its table is there"


def test_what_the_json_lane_does_not_take_is_declined(servers):  # noqa: F811
    on, off = servers
    spec = {"head_dim": 64}
    pos = lambda *p: [("positions", "INT64", np.array(p))]  # noqa: E731
    learn(on, "rope", spec, lambda: pos(3, 4))
    assert lane(on, "rope", body_of(spec, pos(5, 6)))[2].startswith(b"JS:")
    declined = [
        body_of(spec, pos(5, 6, 7)),  # another shape
        body_of(spec, pos(5)),
        body_of(spec, pos(5, 6)).replace(b"[5,6]", b"[5,-0]"),  # the strict parser
        body_of(spec, pos(5, 6)).replace(b"[5,6]", b"[5,6.0]"),
        body_of(spec, pos(5, 6)).replace(b"[5,6]", b"[[5,6]]"),  # nested
        body_of(spec, pos(5, 6), rid="other"),  # another key
        body_of(spec, pos(5, 6), params={"binary_data_output": True}),
    ]  # binary outputs: Python's
    for b in declined:
        assert lane(on, "rope", b) is False, b
        assert full_path(on, "rope", b) == full_path(off, "rope", b)
    bf16 = {"head_dim": 64, "dtype": "bfloat16"}  # BF16 travels only binary: refused (400), never learnt
    for p in (1, 2, 3):
        got = full_path(on, "rope", body_of(bf16, pos(p, p)))
        assert got == full_path(off, "rope", body_of(bf16, pos(p, p))) and got[0] == 400
    assert lane(on, "rope", body_of(bf16, pos(5, 6))) is False
    b = body_of(spec, pos(5, 6))
    assert lane(on, "rope", b, b"content-encoding: identity\r\n") is False
    assert lane(on, "rope", b, b"inference-header-content-length: %d\r\n" % len(b)) is False


def test_a_repeated_data_field_is_never_learnt(servers):  # noqa: F811
    """A list that is not the input's data (JSON's last duplicate key wins) fails the learn-time
    check: the key is remembered as not a template, and the full path keeps answering."""
    on, off = servers
    spec = {"head_dim": 64}
    body = lambda p: body_of(spec, [("positions", "INT64", np.array([p, p]))]).replace(  # noqa: E731
        b'"data":', b'"data":[9,9],"data":', 1
    )
    learn(on, "rope", spec, lambda: [("positions", "INT64", np.array([5, 6]))])  # the lane's rope route
    for p in (1, 2, 3):
        assert full_path(on, "rope", body(p)) == full_path(off, "rope", body(p))
    assert lane(on, "rope", body(4)) is False  # a whole request to the route, declined
    for raw in (
        b'{"inputs":[{"name":"p","data":[1],"data":[2]}]}',  # one input, two lists
        b'{"parameters":{"x":{"data":[1]}},"inputs":[{"name":"p"}]}',  # not an input's
        b'{"inputs":[{"data":[1]}],"inputs":[{"data":[2]}]}',
    ):  # the last "inputs" wins
        key, spans = replay.v2_cut(raw, DATA)
        assert not controls(raw, spans), raw
    raw = b'{"inputs":[{"name":"q","data":[1, 2]},{"data" : [3],"name":"k"}]}'
    assert controls(raw, replay.v2_cut(raw, DATA)[1])
    for raw in (
        b'{"id":"data","inputs":[{"data":[1]}]}',
        b'{"inputs":[{"data":[1]},{"data":[2]},{"data":[3]}]}',
        b'{"inputs":[{"data":{"start":1}}]}',
        b'{"inputs":[{"data":[1}]}'[:-3],
    ):
        assert replay.v2_cut(raw, DATA) is None, raw  # not a list at each "data", more than two, none closed


def test_entries_are_dropped_with_the_manifest(servers):  # noqa: F811
    on, _ = servers
    spec = {"d_model": 33}
    pos = lambda: [("positions", "INT64", np.array([1, 2]))]  # noqa: E731
    learn(on, "sinusoidal", spec, pos)
    on.hot.store.clear()
    assert not on.hot.lane_routes and lane(on, "sinusoidal", body_of(spec, pos())) is None


def test_entries_stay_while_the_manifest_only_gains_tables(servers):  # noqa: F811
    """A fleet sends new specs every second: each builds a table, and the manifest that gains it
    keeps every learnt entry (the /v1 templates' rule, store.still_mapped)."""
    on, off = servers
    spec = {"d_model": 33}
    pos = lambda: [("positions", "INT64", np.array([1, 2]))]  # noqa: E731
    learn(on, "sinusoidal", spec, pos)
    seen = on.v2.client.manifest()
    fresh = {"d_model": 31, "base": 2000.0 + time.monotonic_ns() % 7919}  # no table holds it yet
    assert full_path(on, "sinusoidal", body_of(fresh, pos()))[0] == 200
    wait_for(
        lambda: (
            on.v2.client.manifest() is not seen
            and len(on.v2.client.manifest()["tables"]) > len(seen["tables"])
        ),
        what="the manifest with the new table",
    )
    on.hot.fresh()
    assert on.hot.lane_routes and lane(on, "sinusoidal", body_of(spec, pos())) not in (None, False)


def test_still_mapped():
    """Which manifest changes keep templates: only gaining tables in the same engine generation."""
    old = {"generation": 3, "tables": {"a": {"file": "f1"}, "b": {"file": "f2"}}}
    assert still_mapped(old, {"generation": 3, "tables": {**old["tables"], "c": {"file": "f3"}}})
    assert still_mapped(old, old)
    assert not still_mapped(old, {"generation": 3, "tables": {"a": {"file": "f1"}}})  # evicted
    assert not still_mapped(old, {"generation": 3, "tables": {**old["tables"], "b": {"file": "f9"}}})
    assert not still_mapped(old, {"generation": 4, "tables": old["tables"]})  # a new engine
    assert not still_mapped(None, old) and not still_mapped(old, None)


@hsettings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rope=st.fixed_dictionaries(
        {
            "head_dim": st.sampled_from([8, 36, 64]),
            "partial_rotary_factor": st.sampled_from([1.0, 0.5]),
            "layout": st.sampled_from(["half_split", "interleaved"]),
            "dtype": st.sampled_from(["float32", "float16"]),
            "rope_scaling": st.sampled_from(ROPE_SCALINGS),
        }
    ),
    sin=st.fixed_dictionaries(
        {
            "d_model": st.sampled_from([7, 8, 33]),
            "offset": st.sampled_from([0, 3]),
            "layout": st.sampled_from(["interleaved", "concat", "fairseq"]),
            "dtype": st.sampled_from(["float32", "float16"]),
        }
    ),
    family=st.sampled_from(["rope", "sinusoidal"]),
    datatype=st.sampled_from(["INT64", "INT32"]),
    positions=st.lists(
        st.lists(
            st.one_of(st.integers(0, 4095), st.integers(4093, 4099), st.integers(4096, 70000)),
            min_size=3,
            max_size=3,
        ),
        min_size=3,
        max_size=3,
    ),
)
def test_generated_specs_and_positions(servers, rope, sin, family, datatype, positions):  # noqa: F811
    """Generated rope specs (types whose rows do not follow the positions) and sinusoidal ones, learnt
    from a first body; later bodies of generated positions (inside the table, across the end of an
    on-demand table of 4096 rows, past it) answered as the full path answers them."""
    spec = (
        {k: v for k, v in rope.items() if v is not None} | {"max_position_embeddings": 1024}
        if family == "rope"
        else sin
    )
    on, off = servers
    if full_path(off, family, body_of(spec, [("positions", datatype, np.array([1]))]))[0] != 200:
        event("a spec the full path refuses")
        return  # (an odd rotary width ...)
    event(f"{family} learnt")
    length = learn(on, family, spec, lambda: [("positions", datatype, np.array([1, 2, 3]))])
    for p in positions:
        top = max(p) + spec.get("offset", 0)
        check(
            servers,
            family,
            body_of(spec, [("positions", datatype, np.array(p))]),
            top < length or (PAST_IN_C and top < length + GROWN),
        )
