"""v2 REST JSON-tensor infers of a real ``posenc serve`` (service/v2/hot_json.py): once learnt, the
lane answers them in one C call, head for head and byte for byte what the server with the lane off
writes (ASGI, the full path), and ``posenc_answer_path_total{route="/v2/models/rope/infer",path="c"}``
(and alibi's) counts them."""

from __future__ import annotations

import orjson
import pytest

from tests.integration.test_lane import both, lane_answers, servers  # noqa: F401  (the fixture)
from tests.integration.test_metrics_paths import OK, Counted, send, srv  # noqa: F401  (the fixture)
from tests.service.hot_helpers import needs_kernels

# T5 blocks, half-precision ALiBi cells and rows past a table: the engine's C kernels (simd backend)
pytestmark = [pytest.mark.slow, needs_kernels]


ALIBI = {"num_heads": 12, "mask_future": True, "dtype": "float16"}  # a configured table: [12, 1, 3] blocks


def json_infer(model: str, spec: dict, **inputs) -> bytes:
    """A v2 REST infer with JSON tensors (no binary data), as loadtest/workloads/mix.py sends it."""
    body = orjson.dumps(
        {
            "parameters": {"spec": orjson.dumps(spec).decode()},
            "inputs": [
                {"name": k, "datatype": "INT64", "shape": [len(v)], "data": v} for k, v in inputs.items()
            ],
        }
    )
    return (
        b"POST /v2/models/%s/infer HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (model.encode(), len(body), body)
    )


def test_json_tensor_infers_take_the_lane_once_learnt_with_asgis_bytes(servers):  # noqa: F811
    spec = {"head_dim": 128, "rope_theta": 30000.0}  # a spec no other test learns
    for s in (40, 41):  # the full path answers, and learns at the second
        both(servers, json_infer("rope", {"head_dim": 64}, positions=list(range(s, s + 16))), 1)
        both(servers, json_infer("t5-buckets", {}, query=[s], key=[0, s, 9000]), 1)
        both(servers, json_infer("alibi", ALIBI, key=[0, s, 9000], query=[s]), 1)
    for s in (0, 2040, 9000):  # inside the table, across its end, past it
        out, _ = both(
            servers, json_infer("rope", {"head_dim": 64}, positions=list(range(s, s + 16))), 1, lane=1
        )
        assert out[0][0] == b"HTTP/1.1 200 OK" and (b"content-type", b"application/json") in out[0][1]
        assert out[0][2].startswith(b'{"model_name":"rope","model_version":"1","outputs":[{"name":"cos"')
        out, _ = both(servers, json_infer("t5-buckets", {}, query=[s], key=[1, 2, s + 5]), 1, lane=1)
        assert out[0][2].startswith(b'{"model_name":"t5-buckets"')
        out, _ = both(servers, json_infer("alibi", ALIBI, key=[1, 2, s + 5], query=[s]), 1, lane=1)
        assert out[0][2].startswith(b'{"model_name":"alibi","model_version":"1","outputs":[{"name":"bias"')
    both(servers, json_infer("rope", spec, positions=[1, 2]), 1, lane=0)  # not learnt: ASGI's


def test_json_tensor_infers_count_as_the_lanes_c_answers(srv):  # noqa: F811
    route = Counted(srv, "/v2/models/rope/infer")
    spec = {"head_dim": 64, "layout": "interleaved"}
    for s in (3, 4):
        assert send(srv, json_infer("rope", spec, positions=list(range(s, s + 16)))) == OK
    route.check(python=2)
    for s in (7, 2040, 50000):
        assert send(srv, json_infer("rope", spec, positions=list(range(s, s + 16)))) == OK
    route.check(c=3)
    lane = lane_answers(srv)
    assert send(srv, json_infer("rope", spec, positions=[1, 2])) == OK  # another shape: the full path's
    route.check(python=1)
    assert lane_answers(srv) == lane


def test_alibi_json_tensor_infers_count_as_the_lanes_c_answers(srv):  # noqa: F811
    route = Counted(srv, "/v2/models/alibi/infer")
    spec = {"num_heads": 12, "mode": "symmetric"}
    for s in (3, 4):
        assert send(srv, json_infer("alibi", spec, query=[s], key=list(range(s, s + 8)))) == OK
    route.check(python=2)
    for s in (7, 70000, 3 * 10**6):  # distances inside the stored table and past it
        assert send(srv, json_infer("alibi", spec, query=[s], key=list(range(s - 7, s + 1)))) == OK
    route.check(c=3)
