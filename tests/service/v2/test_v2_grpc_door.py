"""gRPC's door into the learnt entries (service/shortcut/hot_grpc.c, from service/v2/hot.py): a
learnt ModelInferRequest answered by ``grpc_answer`` (the C lookup, fill and framing the gRPC lane
runs) with the bytes of the full path with the shortcut off (grpcio's handler, its own protobuf),
for the row families and the block families, INT32 and INT64, several lengths; as a unary answer and
as a ModelStreamInfer message (checked against the generated ModelStreamInferResponse class); and
what it must not answer (another raw length, a field after the raw inputs, a truncated message)
declined. ``grpc_cut`` is held to protobuf's own parse of the same bytes."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from posenc.service.v2.hot import FILL_INLINE_BYTES, grpc_answer, grpc_cut
from posenc.service.v2.proto import grpc_service_pb2 as pb
from tests.service.hot_helpers import needs_kernels, wait_learnt
from tests.service.v2.test_v2_blocks import grpc_block
from tests.service.v2.test_v2_hot import call, grpc_request, servers  # noqa: F401  (the fixture)

pytestmark = pytest.mark.skipif(grpc_answer is None, reason="service._hot is not built")

ROWS = [("rope", {"head_dim": 64}), ("sinusoidal", {"d_model": 33})]
BLOCKS = [("alibi", {"num_heads": 4}), ("t5-buckets", {"bidirectional": True, "num_buckets": 16})]


def door(server, data: bytes, stream: bool = False, most: int = FILL_INLINE_BYTES):
    server.hot.fresh()
    return grpc_answer(
        data, server.hot.grpc_entries, framed=False, stream=stream, most=most, counts=None, buckets=b""
    )


def learn(on, data: bytes, model: str, spec: dict, selections: dict) -> None:
    """Answered by the full path until the door answers it (learnt at the second answer once mapped)."""
    req = lambda: on.v2.inferer.pipeline.request(model, {**spec, **selections})  # noqa: E731
    wait_learnt(
        lambda: on.hot.store.seen,
        lambda: on.v2.client.is_mapped(req()),
        lambda: call(on, data),
        lambda: door(on, data) is not None,
        f"the gRPC door learns {model} {spec}",
    )


def expect(off, data: bytes) -> bytes:
    out = call(off, data)
    assert isinstance(out, bytes), out
    return out


def unframe_stream(msg: bytes) -> bytes:
    """The ModelInferResponse inside a gRPC-framed ModelStreamInferResponse message."""
    assert msg[0] == 0 and int.from_bytes(msg[1:5], "big") == len(msg) - 5
    r = pb.ModelStreamInferResponse.FromString(msg[5:])
    assert r.error_message == ""
    return r.infer_response.SerializeToString()


@pytest.mark.parametrize("datatype", ["INT32", "INT64"])
@pytest.mark.parametrize("model, spec", ROWS, ids=[m for m, _ in ROWS])
def test_rows_answered_by_the_door_as_the_full_path(servers, model, spec, datatype):  # noqa: F811
    on, off = servers
    for n in (1, 4, 16):
        learn(on, grpc_request(model, spec, range(n), datatype), model, spec, {"positions": [0]})
        for positions in ([7] * n, list(range(100, 100 + n)), list(range(2 * n, 0, -2))):
            data = grpc_request(model, spec, positions, datatype)
            want = expect(off, data)
            assert door(on, data) == want
            assert unframe_stream(door(on, data, stream=True)) == want
            # over the inline bound: the entry and the positions are handed to Python, which answers alike
            e, pos = door(on, data, most=0)
            assert e.answer(pos) == want


@needs_kernels
@pytest.mark.parametrize("types", [("INT32", "INT64"), ("INT64", "INT32"), ("INT64", "INT64")])
@pytest.mark.parametrize("model, spec", BLOCKS, ids=[m for m, _ in BLOCKS])
def test_blocks_answered_by_the_door_as_the_full_path(servers, model, spec, types):  # noqa: F811
    on, off = servers
    for nq, nk in ((1, 1), (3, 5), (8, 2)):
        sel = {"query": [0] * nq, "key": [0] * nk}
        learn(on, grpc_block(model, spec, range(nq), range(nk), *types), model, spec, sel)
        for q, k in ((range(nq), range(10, 10 + nk)), ([50] * nq, list(range(nk, 0, -1)))):
            data = grpc_block(model, spec, q, k, *types)
            want = expect(off, data)
            assert door(on, data) == want
            assert unframe_stream(door(on, data, stream=True)) == want
            e, pos = door(on, data, most=0)
            assert e.answer(pos) == want


def test_what_the_door_declines(servers):  # noqa: F811
    """Another raw length, a field after the raw input, a truncated message, a second raw field:
    None (the full path answers them)."""
    on, off = servers
    model, spec = ROWS[0]
    learn(on, grpc_request(model, spec, range(4)), model, spec, {"positions": [0]})
    data = grpc_request(model, spec, range(10, 14))
    assert door(on, data) is not None
    assert door(on, grpc_request(model, spec, range(5))) is None  # another length
    assert door(on, data + b"\x1a\x01x") is None  # id after the raw input (protobuf takes it)
    assert pb.ModelInferRequest.FromString(data + b"\x1a\x01x").id == "x"
    assert door(on, data + b"\x3a\x00") is None  # a second raw field
    for k in range(1, len(data)):
        assert door(on, data[:k]) is None, k
    assert door(on, data[:-1] + b"\x80") is None  # a truncated varint at the end
    # framed: one uncompressed whole message after the 5-byte prefix
    framed = lambda flag, n: bytes([flag]) + n.to_bytes(4, "big") + data  # noqa: E731
    entries = on.hot.grpc_entries
    kw = {"stream": False, "most": FILL_INLINE_BYTES, "counts": None, "buckets": b""}
    assert grpc_answer(framed(0, len(data)), entries, framed=True, **kw) == door(on, data)
    assert grpc_answer(framed(1, len(data)), entries, framed=True, **kw) is None  # compressed
    assert grpc_answer(framed(0, len(data) + 1), entries, framed=True, **kw) is None  # not whole


FIELDS = st.fixed_dictionaries(
    {
        "model_name": st.text(max_size=8),
        "model_version": st.text(max_size=3),
        "id": st.text(max_size=200),
    }
)


@hsettings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fields=FIELDS,
    raws=st.lists(st.binary(max_size=300), min_size=0, max_size=3),
    extra=st.binary(max_size=6),
)
def test_grpc_cut_is_protobufs_parse(fields, raws, extra):
    """grpc_cut against protobuf: where it cuts, the bytes before are the message without its raw
    inputs as protobuf writes it and each length is a raw input's; 1 or 2 trailing raw fields are
    cut; any bytes appended (a field after them, or garbage) are cut only where protobuf reads them
    as more raw inputs."""
    r = pb.ModelInferRequest(**fields)
    r.inputs.add(name="positions", datatype="INT64", shape=[1])
    key = r.SerializeToString()
    r.raw_input_contents.extend(raws)
    data = r.SerializeToString()
    got = grpc_cut(data)
    if 1 <= len(raws) <= 2:
        assert got == (len(key), tuple(map(len, raws)))
        assert data[: got[0]] == key
    else:
        assert got is None
    got = grpc_cut(data + extra)
    if got is not None:
        parsed = pb.ModelInferRequest.FromString(data + extra)
        tail = list(parsed.raw_input_contents)
        parsed.ClearField("raw_input_contents")
        assert (data + extra)[: got[0]] == parsed.SerializeToString()
        assert got[1] == tuple(map(len, tail))
