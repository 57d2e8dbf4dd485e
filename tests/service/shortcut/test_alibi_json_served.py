"""/v1/alibi in JSON on a real ``posenc serve`` (one worker, the lane on): once the full path has
answered a spec, its JSON blocks are answered by the lane's one C call (counted ``c`` in
``posenc_answer_path_total``), inside the stored table (2048 distances) and past it, in every
dtype the config stores and one it does not; each is byte for byte what the full path writes for
the same bytes kept off the lane (a LANE_OFF_HEADERS header: the raw ASGI front) with an Accept
value the full path has not negotiated yet, which only the full path answers (counted ``python``)."""

from __future__ import annotations

import uuid

import orjson
import pytest

from posenc.service.shortcut import templates as replay
from tests.integration.test_lane import lane_answers, read_responses, request
from tests.integration.test_metrics_paths import OFF, Counted
from tests.procs import Procs, child_env, wait_for
from tests.service.hot_helpers import needs_kernels
from tests.service_cases import CONFIG

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not replay.NATIVE, reason="the lane's C answers need the C shortcut (service._hot)"),
]

JSON = b"application/json"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    reg = Procs(tmp_path_factory.mktemp("alibi-json"))
    s = reg.serve(CONFIG, workers=1, args=["--lane", "on"], env=child_env({"POSENC_SHORTCUT": "c"}))
    try:
        yield s
    finally:
        assert s.stop() == 0, s.output()
        reg.cleanup()


def body_of(srv, data: bytes) -> bytes:
    """One request in one write on a fresh connection: its 200 answer's JSON body."""
    import socket

    with socket.create_connection(("127.0.0.1", srv.port)) as s:
        s.sendall(data)
        ((status, headers, body),) = read_responses(s, 1)[0]
    assert status == b"HTTP/1.1 200 OK" and (b"content-type", JSON) in headers, (status, body[:200])
    return body


def answered_by_the_lane(srv, data: bytes) -> bool:
    before = lane_answers(srv)
    body_of(srv, data)
    return lane_answers(srv) > before


@pytest.mark.parametrize(
    "spec",
    [
        {"num_heads": 12},  # half-precision cells: the engine's C kernel (simd)
        pytest.param({"num_heads": 12, "dtype": "float16", "mask_future": True}, marks=needs_kernels),
        pytest.param({"num_heads": 7, "mode": "symmetric", "dtype": "bfloat16"}, marks=needs_kernels),
    ],
    ids=["float32", "float16-masked", "bfloat16-symmetric"],
)
def test_alibi_json_answers_come_from_c_with_the_full_paths_bytes(srv, spec):
    first = request("/v1/alibi", orjson.dumps({**spec, "query": [1], "key": [0]}), accept=JSON)
    # the full path answers, the shortcut learns (a spec whose table is built on demand: once it is)
    wait_for(lambda: answered_by_the_lane(srv, first), 30, 0.05, "the template learnt")
    route = Counted(srv, "/v1/alibi")
    blocks = [
        ([9], [0, 3, 8]),
        ([2047], {"start": 0, "stop": 2048}),
        ([2047, 2048], [0, 1, 2049]),
        ([70000], [5, 1000, 69999, 70000]),
        ({"start": 4000, "stop": 4004}, {"start": 3990, "stop": 4010}),
    ]
    lane = [
        body_of(srv, request("/v1/alibi", orjson.dumps({**spec, "query": q, "key": k}), accept=JSON))
        for q, k in blocks
    ]
    route.check(c=len(blocks))
    # the full path's bytes: off the lane, each with an Accept value not seen yet (negotiated to JSON:
    # the Python door answers only the Accept values the full path has negotiated before)
    full = [
        body_of(
            srv,
            request(
                "/v1/alibi",
                orjson.dumps({**spec, "query": q, "key": k}),
                accept=JSON + b", text/x-unseen-%s;q=0.1" % uuid.uuid4().hex.encode(),
                extra=OFF,
            ),
        )
        for q, k in blocks
    ]
    route.check(python=len(blocks))
    assert lane == full
