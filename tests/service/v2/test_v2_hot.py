"""The v2 shortcut (service/v2/hot.py, service/shortcut/hot_fill.c ``fill``) held to the full path, in process
against the engine: after one request of a shape has been answered, later requests of that shape
with other positions are answered by the shortcut, byte for byte what the full path answers
(gRPC: the serialized ModelInferResponse; REST: status, headers and body), and anything the
shortcut must not take (past the position limit, negative, other keys) still gets the full path's answer."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from posenc.engine.reader.client import Client
from posenc.engine.tables.base import RowPlan
from posenc.service.core.settings import Settings
from posenc.service.shortcut import templates as replay
from posenc.service.shortcut.store import still_mapped
from posenc.service.v2 import rest
from posenc.service.v2.core import V2
from posenc.service.v2.grpc_server import GrpcV2
from posenc.service.v2.proto import grpc_service_pb2 as pb
from tests.service.hot_helpers import wait_learnt
from tests.service_cases import LLAMA3_8K

pytestmark = pytest.mark.skipif(not replay.NATIVE, reason="service._hot is not built")

# (model, spec parameter, extra request parameters); the engine's tables hold 2048 rows of each
CASES = [
    ("rope", {"head_dim": 64}, {}),
    ("rope", {"head_dim": 64, "dtype": "bfloat16", "layout": "interleaved"}, {}),
    ("rope", {"head_dim": 64, "layout": "interleaved"}, {}),  # the table's float32: a gather per column
    ("rope", LLAMA3_8K, {}),
    ("sinusoidal", {"d_model": 33}, {}),
    ("sinusoidal", {"d_model": 33, "layout": "interleaved", "offset": 2}, {}),
]


class Ctx:
    async def abort(self, code, msg):
        raise RuntimeError(code, msg)


@pytest.fixture(scope="module")
def servers(engine):
    """(shortcut on, shortcut off): two gRPC services over one engine client each."""
    out = []
    for shortcut in ("c", "off"):
        s = Settings(namespace=engine.namespace, shortcut=shortcut)
        client = Client(s.shm_dir, s.namespace)
        client.attach_all(True, 30)
        out.append(GrpcV2(V2(s, client, lambda: True)))
    assert out[0].hot.on and not out[1].hot.on
    return out


def grpc_request(model, spec, positions, datatype="INT64", rid="", outputs=(), name="positions") -> bytes:
    r = pb.ModelInferRequest(model_name=model, id=rid)
    r.parameters["spec"].string_param = json.dumps(spec)
    a = np.asarray(positions, np.int32 if datatype == "INT32" else np.int64)
    r.inputs.add(name=name, datatype=datatype, shape=list(a.shape))
    for o in outputs:
        r.outputs.add(name=o)
    r.raw_input_contents.append(a.tobytes())
    return r.SerializeToString()


def call(server, data: bytes):
    try:
        return asyncio.run(server.ModelInfer(data, Ctx()))
    except RuntimeError as e:
        return e.args


@pytest.mark.parametrize(
    "model, spec, params", CASES, ids=lambda c: json.dumps(c) if isinstance(c, dict) else c
)
@pytest.mark.parametrize("datatype", ["INT64", "INT32"])
@pytest.mark.parametrize("shape", [(1,), (5,), (3, 4)])
def test_grpc_shortcut_answers_what_the_full_path_answers(servers, model, spec, params, datatype, shape):
    on, off = servers
    rng = np.random.default_rng(len(shape) * 7 + len(spec))
    for _ in range(2):  # learnt at the full path's second answer
        first = grpc_request(model, spec, rng.integers(0, 2048, shape), datatype, rid="r1")
        assert call(on, first) == call(off, first)
    for _ in range(5):
        data = grpc_request(model, spec, rng.integers(0, 2048, shape), datatype, rid="r1")
        assert on.hot.grpc(data) is not None, "the shortcut should take this request"
        assert call(on, data) == call(off, data)


@pytest.mark.parametrize(
    "spec",
    [
        {"head_dim": 64, "mrope_section": [8, 12, 12], "dtype": "bfloat16"},
        {"head_dim": 64, "mrope_section": [12, 10, 10], "mrope_interleaved": True},
        {"head_dim": 64, "axes_dim": [16, 24, 24], "layout": "interleaved"},
    ],
    ids=["mrope", "mrope-interleaved", "axes"],
)
@pytest.mark.parametrize("datatype", ["INT64", "INT32"])
def test_grpc_shortcut_answers_position_ids_as_the_full_path(servers, spec, datatype):
    """[k, n] per-axis positions (service/shortcut/hot_axes.c via fill): rows inside the table and past it."""
    on, off = servers
    rng = np.random.default_rng(5)
    ids = lambda hi=None: rng.integers(0, hi or rng.choice([2048, 1 << 20]), (3, 5))  # noqa: E731 - inside, or past

    def answer():  # an axes_dim table is built on demand: learnt once it is mapped
        first = grpc_request("rope", spec, ids(2048), datatype, name="position_ids")
        assert call(on, first) == call(off, first)

    req = lambda: on.v2.inferer.pipeline.request("rope", {**spec, "position_ids": [[0]] * 3})  # noqa: E731

    def learn():
        wait_learnt(
            lambda: on.hot.store.seen,
            lambda: on.v2.client.is_mapped(req()),
            answer,
            lambda: on.hot.grpc(grpc_request("rope", spec, ids(), datatype, name="position_ids")) is not None,
            "the shortcut learns the spec",
        )
        return on.hot.store.seen  # the manifest it was learnt under

    learnt_under = learn()
    for _ in range(8):
        data = grpc_request("rope", spec, ids(), datatype, name="position_ids")
        got = on.hot.grpc(data)
        while got is None and not still_mapped(learnt_under, on.hot.store.seen):
            # a far request of this loop grew the on-demand table (a new file; it grows to its cap
            # at most): the manifest that shows it rightly dropped every template; learnt again
            learnt_under = learn()
            got = on.hot.grpc(data)
        assert got is not None, "the shortcut should take this request"
        assert call(on, data) == call(off, data)


@pytest.mark.parametrize(
    "positions, datatype, why",
    [([2047, 2**31], "INT64", "past the position limit"), ([-1, 3], "INT32", "negative")],
)
def test_grpc_what_the_shortcut_declines_gets_the_full_path(servers, positions, datatype, why):
    on, off = servers
    for _ in range(2):
        call(on, grpc_request("rope", {"head_dim": 64}, [1, 2], datatype))
    data = grpc_request("rope", {"head_dim": 64}, positions, datatype)
    assert on.hot.grpc(data) is not None  # the key is known; fill declines, then the full path
    assert call(on, data) == call(off, data)


def test_grpc_outputs_in_another_order_or_a_subset_are_not_templates(servers):
    on, off = servers
    for outs in (("sin", "cos"), ("cos",), ("inv_freq",), ("attention_scaling", "cos", "sin")):
        for p in ([1], [9]):
            data = grpc_request("rope", {"head_dim": 64}, p, outputs=outs)
            assert call(on, data) == call(off, data)


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    case=st.sampled_from(CASES),
    datatype=st.sampled_from(["INT64", "INT32"]),
    positions=st.lists(st.integers(-3, 2100), min_size=1, max_size=6),
    rid=st.sampled_from(["", "x", "é"]),
)
def test_grpc_shortcut_fuzz(servers, case, datatype, positions, rid):
    on, off = servers
    model, spec, _ = case
    data = grpc_request(model, spec, positions, datatype, rid=rid)
    assert call(on, data) == call(off, data)
    assert call(on, data) == call(off, data)  # the second one may be the shortcut's


# -- REST -----------------------------------------------------------------------------------------
def rest_call(server, model, spec, positions, datatype="INT64"):
    a = np.asarray(positions, np.int32 if datatype == "INT32" else np.int64)
    head = json.dumps(
        {
            "parameters": {"spec": json.dumps(spec), "binary_data_output": True},
            "inputs": [
                {
                    "name": "positions",
                    "datatype": datatype,
                    "shape": list(a.shape),
                    "parameters": {"binary_data_size": a.nbytes},
                }
            ],
        }
    ).encode()
    body = head + a.tobytes()
    path = f"/v2/models/{model}/infer"
    headers = [
        (b"content-type", b"application/octet-stream"),
        (b"inference-header-content-length", str(len(head)).encode()),
    ]
    hot = server.hot.rest(path, body, headers)
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(msg):
        sent.append(msg)

    scope = {"type": "http", "method": "POST", "path": path, "headers": headers}
    asyncio.run(rest.handle(server.v2, scope, receive, send, []))
    answer = (sent[0]["status"], sent[0]["headers"], sent[1]["body"])
    return answer, hot


@pytest.mark.parametrize(
    "model, spec, params", CASES, ids=lambda c: json.dumps(c) if isinstance(c, dict) else c
)
@pytest.mark.parametrize("shape", [(1,), (2, 3)])
def test_rest_shortcut_answers_what_the_full_path_answers(servers, model, spec, params, shape):
    on, off = servers
    rng = np.random.default_rng(11)
    answered, m = 0, object()  # answers under the manifest the templates were last checked against
    for _ in range(8):
        if on.hot.store.seen is not m:  # a new one (another test's on-demand table grew) drops every
            m, answered = on.hot.store.seen, 0  # template: learnt again from its next two answers
        p = rng.integers(0, 2048, shape)
        got, hot = rest_call(on, model, spec, p)
        if on.hot.store.seen is not m and hot is None:
            continue  # it changed during this answer
        assert (hot is not None) == (answered > 1), answered
        answered += 1
        if hot is not None:  # C's answer (the Python door's: v2_rest), its head lines after the length
            out, is_json, post, _ = hot
            assert (200, out, is_json) == (got[0], got[2], False)
            assert post == b"\r\n" + b"".join(b"%s: %s\r\n" % h for h in got[1] if h[0] == rest.LENGTH_HEADER)
        assert got == rest_call(off, model, spec, p)[0]
    assert answered > 2  # the shortcut answered under one manifest


def test_grpc_a_message_that_is_not_a_request_is_invalid_argument(servers):
    on, _ = servers
    code, msg = call(on, b"\x0a\xff\xff\xff")  # model_name with a length past the end
    assert code.name == "INVALID_ARGUMENT" and "not a ModelInferRequest" in msg


# -- outputs into the client's shared memory ---------------------------------------------------------
@pytest.fixture
def region(servers, engine):
    import os
    import uuid

    from posenc.service.v2.shm import remove_registry

    key = f"posenc_test_{uuid.uuid4().hex[:8]}"
    path = os.path.join("/dev/shm", key)
    with open(path, "wb") as f:
        f.truncate(1 << 16)
    servers[0].v2.regions.register("r", "/" + key, 0, 1 << 16)
    yield path
    servers[0].v2.regions.unregister(None)
    remove_registry("/dev/shm", engine.namespace)
    os.unlink(path)


def shm_request(positions, half: int, rid: str = "") -> bytes:
    r = pb.ModelInferRequest(model_name="rope", id=rid)
    r.parameters["spec"].string_param = json.dumps({"head_dim": 64})
    a = np.asarray(positions, np.int64)
    r.inputs.add(name="positions", datatype="INT64", shape=list(a.shape))
    for i, name in enumerate(("cos", "sin")):
        o = r.outputs.add(name=name)
        o.parameters["shared_memory_region"].string_param = "r"
        o.parameters["shared_memory_byte_size"].int64_param = half
        o.parameters["shared_memory_offset"].int64_param = 100 + i * half
    r.raw_input_contents.append(a.tobytes())
    return r.SerializeToString()


def test_grpc_shortcut_writes_into_shared_memory_what_the_full_path_writes(servers, region):
    on, off = servers
    rng = np.random.default_rng(5)
    for i in range(5):
        p = rng.integers(0, 2048, (2, 3))
        data = shm_request(p, 6 * 64 * 4)
        assert (on.hot.grpc(data) is not None) == (i > 1)
        got = call(on, data)
        with open(region, "rb") as f:
            written = f.read()
        assert call(off, data) == got
        with open(region, "rb") as f:
            assert f.read() == written
    on.v2.regions.unregister("r")  # now the shortcut declines; the full path refuses
    got = call(on, data)
    assert got == call(off, data) and got[0].name == "INVALID_ARGUMENT"


def test_fill_and_fill_into_check_their_arguments():
    from posenc.service.shortcut.templates import _hot

    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    t = _hot.RowsTemplate(
        plan=RowPlan(arrays=(table, table * 2), colmap=[0, 1, 3], offset=1),
        max_rows=8,
        lists_only=True,
        header_for=lambda n: b"",
        tail=b"",
    )
    pos = np.array([0, 8, 3], np.int64)
    out = _hot.fill(t, pos, 8, parts=(b"a", b"bc", b"d"))
    rows = table[pos + 1][:, [0, 1, 3]]
    assert out == b"a" + rows.tobytes() + b"bc" + (2 * rows).tobytes() + b"d"
    assert _hot.fill(t, pos.astype(np.int32), 4, parts=(b"a", b"bc", b"d")) == out
    for bad in ([9], [-1], [0, 2**40]):  # offset 1: row 9 is past the table
        assert _hot.fill(t, np.array(bad, np.int64), 8, parts=(b"", b"", b"")) is None
    assert _hot.fill(t, np.array([-1], np.int32), 4, parts=(b"", b"", b"")) is None
    a, b = bytearray(36), bytearray(36)
    assert (
        _hot.fill_into(t, pos, 8, buffers=(a, b)) is True
        and bytes(a) + bytes(b) == rows.tobytes() + (2 * rows).tobytes()
    )
    for args, err in [
        ((t, pos, 8, (b"", b"")), ValueError),
        ((t, pos, 8, (b"", "x", b"")), ValueError),
        ((t, pos, 3, (b"", b"", b"")), ValueError),
        ((t, b"", 8, (b"", b"", b"")), ValueError),
        ((t, pos, 8, [b"", b"", b""]), TypeError),
        ((table, pos, 8, (b"", b"", b"")), TypeError),
    ]:
        with pytest.raises(err):
            _hot.fill(*args[:3], parts=args[3])
    for bufs, err in [((a,), ValueError), ((a, bytearray(35)), ValueError), ((a, b"x" * 36), BufferError)]:
        with pytest.raises(err):
            _hot.fill_into(t, pos, 8, buffers=bufs)


def test_grpc_requests_with_a_fresh_id_each_are_never_learnt(servers):
    on, off = servers
    before = len(on.hot.store.known)
    for k in range(20):
        data = grpc_request("rope", {"head_dim": 64}, [k], rid=f"fresh-{k}")
        assert on.hot.grpc(data) is None
        assert call(on, data) == call(off, data)
    assert len(on.hot.store.known) == before


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("colmap", ["zip", "gather", "runs"])
def test_fill_writes_rows_at_any_alignment(dtype, colmap):
    """A v2 binary output starts wherever its header ends: fill() lays the rows after a first part
    of every length mod 8, through each way of copying a row (two interleaved runs, a gather, runs),
    and every byte is the stored rows' through the column map (numpy's fancy indexing)."""
    from posenc.service.shortcut.templates import _hot

    rng = np.random.default_rng(40)
    table = rng.standard_normal((64, 24)).astype(dtype)
    cols = {
        "zip": [c for k in range(12) for c in (k, 12 + k)],  # an interleaved layout: a0 b0 a1 b1 ...
        "gather": [int(c) for c in rng.permutation(24)],
        "runs": list(range(4, 20)),
    }[colmap]
    t = _hot.RowsTemplate(
        plan=RowPlan(arrays=(table,), colmap=cols, offset=0),
        max_rows=64,
        lists_only=True,
        header_for=lambda n: b"",
        tail=b"",
    )
    pos = rng.integers(0, 64, 16).astype(np.int64)
    want = table[pos][:, cols].tobytes()
    for lead in range(8):
        out = _hot.fill(t, pos, 8, parts=(b"h" * lead, b"t"))
        assert out == b"h" * lead + want + b"t", lead
