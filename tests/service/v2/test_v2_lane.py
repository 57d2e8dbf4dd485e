"""v2 REST binary infers on the whole-request C path (service/shortcut/hot_lane.c, a route of
service/v2/hot.py ``lane_routes``): the raw request's bytes to the whole response in one call,
byte for byte the head and body the full path (service/v2/rest.py through ASGI) writes, for
family and table models, positions inside and past the table; anything the REST shortcut would not
take is declined (False) and left to the full path."""

from __future__ import annotations

import json

import numpy as np
import pytest

from posenc.engine import kernels
from posenc.service.shortcut import templates as replay
from posenc.service.v2 import rest
from tests.service.v2.test_v2_hot import CASES, rest_call, servers  # noqa: F401  (the fixture)

pytestmark = pytest.mark.skipif(not replay.NATIVE, reason="service._hot is not built")
PAST_IN_C = kernels.c_api() is not None  # rows past a table computed in C: the simd backend's kernels
PRE = (b"ST:", b"JS:", b"V2:")  # the lane's heads by format: a v2 answer's is the third


def raw_request(
    model: str, spec: dict, positions, datatype: str = "INT64", extra: bytes = b""
) -> tuple[bytes, int]:
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
    return (
        b"POST /v2/models/%s/infer HTTP/1.1\r\nhost: t\r\ncontent-type: application/octet-stream\r\n"
        b"inference-header-content-length: %d\r\n%scontent-length: %d\r\n\r\n%s"
        % (model.encode(), len(head), extra, len(body), body)
    ), len(head)


def lane(server, data: bytes):
    return replay.answer_request(data, 0, ({}, server.hot.lane_routes), {}, {}, PRE, b"|", False)


@pytest.mark.parametrize(
    "model, spec, params", CASES, ids=lambda c: json.dumps(c) if isinstance(c, dict) else c
)
@pytest.mark.parametrize("shape", [(1,), (2, 3)])
def test_the_lane_answers_what_the_full_path_answers(servers, model, spec, params, shape):  # noqa: F811
    on, off = servers
    rng = np.random.default_rng(3)
    for _ in range(2):  # the full path answers, and learns at the second
        rest_call(on, model, spec, rng.integers(0, 2048, shape))
    for past in (False, True):
        p = rng.integers(0, 2048, shape)
        if past:
            p.flat[0] = 5000  # past the table's 2048 rows: computed in C
        (status, headers, body), _ = rest_call(off, model, spec, p)
        data, _ = raw_request(model, spec, p)
        got = lane(on, data)
        if past and not PAST_IN_C:  # with the numpy backend's kernels: the full path answers
            assert got is False
            continue
        end, route, out, keep_alive = got
        extra = b"".join(b"%s: %s\r\n" % (k, v) for k, v in headers if k == rest.LENGTH_HEADER)
        assert (end, keep_alive, status) == (len(data), True, 200)
        assert out == b"V2:%d\r\n%s\r\n%s" % (len(body), extra, body)
        assert route == on.hot.lane_routes[b"/v2/models/%s/infer" % model.encode()]


def test_what_the_rest_shortcut_would_not_take_is_declined(servers):  # noqa: F811
    on, _ = servers
    spec = {"head_dim": 64}
    for _ in range(2):
        rest_call(on, "rope", spec, [1, 2])
    assert lane(on, raw_request("rope", spec, [3, 4])[0])[2].startswith(b"V2:")
    declined = [
        raw_request("rope", spec, [3, -1])[0],  # negative
        raw_request("rope", spec, [3, 2**31])[0],  # past the position limit
        raw_request("rope", spec, [3, 4, 5])[0],  # another header (its shape)
        raw_request("rope", spec, [3, 4], extra=b"content-encoding: identity\r\n")[0],
        raw_request("rope", spec, [3, 4], extra=b"Inference-Header-Content-Length: 1\r\n")[0],
    ]
    data, n = raw_request("rope", spec, [3, 4])
    declined.append(
        data.replace(b"inference-header-content-length: %d" % n, b"inference-header-content-length: +%d" % n)
    )
    for d in declined:
        assert lane(on, d) is False, d
    assert lane(on, data.replace(b"/v2/models/rope/infer", b"/v2/models/other/infer")) is None  # no route
