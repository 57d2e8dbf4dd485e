"""The gRPC lane's one door into the learnt entries (service/shortcut/hot_grpc.c ``grpc_answer``,
from service/grpclane/lane.py and streams.py): two ``posenc serve`` of one config, with the lane and
without it (grpcio alone, ``--grpc-lane off``), sent the same raw messages by grpcio's own client.

A learnt ModelInfer call and a learnt ModelStreamInfer message are answered by the lane (counted
on their route's "shortcut" path in /metrics) with the bytes grpcio alone answers, for the row
families and the block families, INT32 and INT64, several lengths; a learnt answer over the inline
bound (filled in a thread) too. A message whose raw field has another length, one with a field after
its raw inputs and one with a truncated varint take the full path: grpcio's answer (or its refusal,
word for word), and no "shortcut" count; the learnt message compressed (gzip, deflate) is the
lane's, looked up uncompressed. Where the shortcut does not run (the numpy
backend) every answer is still held to grpcio's."""

from __future__ import annotations

import json

import grpc
import httpx
import numpy as np
import pytest

from posenc.service import grpclane
from posenc.service.v2.proto import grpc_service_pb2 as pb
from tests.integration import test_grpc_lane
from tests.integration.test_grpc_lane import AUTH, INFER, STREAM, shortcut_answers
from tests.procs import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        grpclane._h2 is None, reason="service/grpclane/_h2 is not built (no libnghttp2 headers)"
    ),
]
MD = tuple(AUTH.items())
pair = test_grpc_lane.pair  # the fixture: a server with the lane and one without, one config
ROWS = [("rope", {"head_dim": 64}), ("sinusoidal", {"d_model": 32})]
BLOCKS = [("alibi", {"num_heads": 4}), ("t5-buckets", {"bidirectional": True, "num_buckets": 16})]


@pytest.fixture(scope="module")
def shortcut(pair) -> bool:
    """Whether the lane's server runs the C shortcut (the simd backend)."""
    return httpx.get(pair[0].url + "/v1/tables", headers=AUTH, timeout=10).json()["shortcut"] == "c"


def _dtype(datatype: str):
    return np.int32 if datatype == "INT32" else np.int64


def rows(model: str, spec: dict, positions, datatype: str = "INT64") -> bytes:
    r = pb.ModelInferRequest(model_name=model)
    r.parameters["spec"].string_param = json.dumps(spec)
    a = np.asarray(positions, _dtype(datatype))
    r.inputs.add(name="positions", datatype=datatype, shape=[len(a)])
    r.raw_input_contents.append(a.tobytes())
    return r.SerializeToString()


def block(model: str, spec: dict, q, k, types=("INT64", "INT64")) -> bytes:
    r = pb.ModelInferRequest(model_name=model)
    r.parameters["spec"].string_param = json.dumps(spec)
    for name, v, dt in zip(("query", "key"), (q, k), types):
        a = np.asarray(v, _dtype(dt))
        r.inputs.add(name=name, datatype=dt, shape=[len(a)])
        r.raw_input_contents.append(a.tobytes())
    return r.SerializeToString()


def unary(server, message: bytes, compression=None):
    """grpcio's raw answer, or (status code, details) of its refusal."""
    with grpc.insecure_channel(server.grpc_url, options=[("grpc.max_receive_message_length", -1)]) as ch:
        try:
            return ch.unary_unary(INFER)(message, timeout=30, metadata=MD, compression=compression)
        except grpc.RpcError as e:
            return e.code(), e.details()


def stream(server, messages: list) -> list:
    with grpc.insecure_channel(server.grpc_url, options=[("grpc.max_receive_message_length", -1)]) as ch:
        return list(ch.stream_stream(STREAM)(iter(messages), timeout=30, metadata=MD))


def counted(server, model: str) -> tuple:
    """The lane server's "shortcut" answers of ``model``'s unary and stream routes."""
    return (
        shortcut_answers(server, f"grpc ModelInfer {model}"),
        shortcut_answers(server, f"grpc ModelStreamInfer {model}"),
    )


def _live_count(server) -> float:
    """Route "grpc"'s 200s in /metrics (ServerLive among them)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(server.url + "/metrics", headers=AUTH, timeout=10).text
    return sum(
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "posenc_request_duration_seconds_count"
        and s.labels == {"route": "grpc", "status": "200"}
    )


def barrier(server) -> None:
    """Every call made before it is in /metrics: a gRPC process writes its counts whole, every
    FLUSH_S, so once one ServerLive call made now is there, so is every call before it (each
    barrier waits for its own; the servers' readiness calls are long written at the first)."""
    n = _live_count(server)
    with grpc.insecure_channel(server.grpc_url) as ch:
        live = ch.unary_unary(
            "/inference.GRPCInferenceService/ServerLive",
            request_serializer=pb.ServerLiveRequest.SerializeToString,
            response_deserializer=pb.ServerLiveResponse.FromString,
        )
        assert live(pb.ServerLiveRequest(), timeout=30, metadata=MD).live
    wait_for(lambda: _live_count(server) > n, 30, 0.02, "a ServerLive call in /metrics")


def learn(pair, shortcut: bool, model: str, message: bytes) -> None:
    """Asked of the lane's server until its lane answers it (the full path learns a key at its
    second answer, once the spec's table is mapped), each answer held to grpcio's."""
    want = unary(pair[1], message)
    assert isinstance(want, bytes), want
    if not shortcut:
        assert unary(pair[0], message) == want
        return
    before = counted(pair[0], model)[0]

    def answered() -> bool:
        assert unary(pair[0], message) == want
        return counted(pair[0], model)[0] > before

    wait_for(answered, 60, 0.1, f"the lane answers a learnt {model} call")


def check(pair, shortcut: bool, model: str, learnt: list, declined: list = ()) -> None:
    """Each of ``learnt`` asked as a unary call and in one stream, each of ``declined`` ((message,
    compression) pairs) as a unary call: every answer grpcio's; the lane's "shortcut" counts grow by
    the learnt ones only (read after a barrier() each side)."""
    barrier(pair[0])
    before = counted(pair[0], model)
    for m, compression in declined:
        assert unary(pair[0], m, compression) == unary(pair[1], m, compression)
    want = [unary(pair[1], m) for m in learnt]
    assert all(isinstance(w, bytes) for w in want), want
    assert [unary(pair[0], m) for m in learnt] == want
    streamed = stream(pair[0], learnt)
    assert [
        pb.ModelStreamInferResponse.FromString(s).infer_response.SerializeToString() for s in streamed
    ] == want
    assert streamed == stream(pair[1], learnt)
    if not shortcut:
        return
    barrier(pair[0])
    assert counted(pair[0], model) == (before[0] + len(learnt), before[1] + len(learnt))


@pytest.mark.parametrize("datatype", ["INT32", "INT64"])
@pytest.mark.parametrize("model, spec", ROWS, ids=[m for m, _ in ROWS])
def test_learnt_rows_are_the_lanes_with_grpcios_bytes(pair, shortcut, model, spec, datatype):
    for n in (1, 5, 16):
        learn(pair, shortcut, model, rows(model, spec, range(n), datatype))
        learnt = [rows(model, spec, p, datatype) for p in ([9] * n, range(200, 200 + n), range(3 * n, 0, -3))]
        check(pair, shortcut, model, learnt)


@pytest.mark.parametrize("types", [("INT32", "INT64"), ("INT64", "INT32")])
@pytest.mark.parametrize("model, spec", BLOCKS, ids=[m for m, _ in BLOCKS])
def test_learnt_blocks_are_the_lanes_with_grpcios_bytes(pair, shortcut, model, spec, types):
    for nq, nk in ((1, 1), (3, 7)):
        learn(pair, shortcut, model, block(model, spec, range(nq), range(nk), types))
        learnt = [
            block(model, spec, q, k, types)
            for q, k in ((range(nq), range(5, 5 + nk)), ([40] * nq, range(nk)))
        ]
        check(pair, shortcut, model, learnt)


def test_what_the_lane_declines_is_grpcios(pair, shortcut):
    """Another raw length, a field after the raw input, a truncated varint, a field cut short: the
    full path's answer (or refusal) on both servers, none counted as the lane's. (A compressed
    message grpcio refuses is among test_grpc_lane.py's edges, answered as grpcio answers it.)"""
    model, spec = ROWS[0]
    message = rows(model, spec, range(4))
    learn(pair, shortcut, model, message)
    declined = [
        (rows(model, spec, range(7)), None),  # another length (its first time: not learnt)
        (message + b"\x1a\x02id", None),  # ModelInferRequest.id after the raw input
        (message[:-1] + b"\x80", None),  # its last byte a varint's continuation: truncated
        (message[:20], None),  # cut inside a field
    ]
    assert isinstance(unary(pair[1], *declined[1]), bytes)
    assert unary(pair[1], *declined[2])[0] == grpc.StatusCode.INVALID_ARGUMENT
    check(pair, shortcut, model, [rows(model, spec, range(10, 14))], declined)


def test_a_learnt_message_compressed_is_the_lanes(pair, shortcut):
    """The learnt message sent gzip- or deflate-compressed (grpcio's client compresses it): the
    lane looks it up uncompressed and answers it, uncompressed, with grpcio's bytes; counted as the
    lane's answers."""
    model, spec = ROWS[0]
    learnt = [rows(model, spec, p) for p in (range(4), [9, 9, 9, 9], range(40, 0, -10))]
    learn(pair, shortcut, model, learnt[0])
    barrier(pair[0])
    before = counted(pair[0], model)[0]
    for compression in (grpc.Compression.Gzip, grpc.Compression.Deflate):
        for m in learnt:
            want = unary(pair[1], m, compression)
            assert want == unary(pair[1], m) and isinstance(want, bytes)
            assert unary(pair[0], m, compression) == want
    if shortcut:
        barrier(pair[0])
        assert counted(pair[0], model)[0] == before + 2 * len(learnt)


def test_a_learnt_answer_over_the_inline_bound_is_the_lanes(pair, shortcut):
    """9,000 rows of RoPE head_dim 128 (over 8 MiB): filled in a thread, answered by the lane once
    (looked up once), grpcio's bytes."""
    model, spec = "rope", {"head_dim": 128}
    learn(pair, shortcut, model, rows(model, spec, range(9000)))
    check(pair, shortcut, model, [rows(model, spec, range(1, 9001))])
