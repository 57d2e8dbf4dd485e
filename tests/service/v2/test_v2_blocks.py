"""v2 infers of the block families (alibi, t5-buckets: raw ``query`` and ``key`` inputs) on the
shortcut (service/v2/hot_blocks.py, service/shortcut/hot_blocks.c): over generated specs (ALiBi
heads including non-powers of two, head subsets, both modes, mask_future, max_bias, every dtype;
T5 bidirectional or not, buckets, max_distance) and query/key sets on both sides of the stored
table's end, INT32 and INT64 in either input order, the gRPC shortcut's answer, the REST
shortcut's and the C lane's whole response are byte for byte what the full path answers with the
shortcut off (the gRPC message, the REST status, headers and body). What the shortcut must not
take (negative positions, past the position limit, a cell that overflows float16) gets the full
path's answer."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from posenc.service.v2 import rest
from posenc.service.v2.proto import grpc_service_pb2 as pb
from tests.service.hot_helpers import needs_kernels, wait_learnt
from tests.service.v2.test_v2_hot import call, servers  # noqa: F401  (the fixture)
from tests.service.v2.test_v2_lane import PRE, lane
from tests.waits import wait_for

pytestmark = needs_kernels  # T5 blocks and half-precision ALiBi cells: the engine's C kernels
TABLE = 2048  # the engine's configured tables (tests/service_cases.CONFIG); on-demand ones hold 4096 and more

ALIBI = st.builds(
    lambda h, sub, bias, mode, mask, dtype: {
        "num_heads": h,
        **({"heads": [x % h for x in sub]} if sub else {}),  # any order, repeats too
        **({"max_bias": bias} if bias else {}),
        "mode": mode,
        **({"mask_future": True} if mask and mode == "causal" else {}),
        "dtype": dtype,
    },
    st.sampled_from([1, 3, 5, 8, 12, 16, 20]),
    st.lists(st.integers(0, 40), max_size=4),
    st.sampled_from([None, 8.0, 4.5, 0.5]),
    st.sampled_from(["causal", "symmetric"]),
    st.booleans(),
    st.sampled_from(["float32", "float16", "bfloat16"]),
)
T5 = st.builds(
    lambda bi, nb, md: {"bidirectional": bi, "num_buckets": nb, "max_distance": md},
    st.booleans(),
    st.sampled_from([8, 16, 32]),
    st.sampled_from([20, 128, 1000]),
)
SPECS = st.one_of(st.tuples(st.just("alibi"), ALIBI), st.tuples(st.just("t5-buckets"), T5))


def arrays(q, k, qtype: str, ktype: str) -> tuple:
    return (
        np.asarray(q, np.int32 if qtype == "INT32" else np.int64),
        np.asarray(k, np.int32 if ktype == "INT32" else np.int64),
    )


def grpc_block(model: str, spec: dict, q, k, qtype="INT64", ktype="INT64", key_first=False, rid="") -> bytes:
    r = pb.ModelInferRequest(model_name=model, id=rid)
    r.parameters["spec"].string_param = json.dumps(spec)
    inputs = list(zip(("query", "key"), arrays(q, k, qtype, ktype), (qtype, ktype)))
    for name, a, dt in inputs[::-1] if key_first else inputs:
        r.inputs.add(name=name, datatype=dt, shape=list(a.shape))
        r.raw_input_contents.append(a.tobytes())
    return r.SerializeToString()


def rest_block(
    model: str, spec: dict, q, k, qtype="INT64", ktype="INT64", key_first=False
) -> tuple[bytes, bytes]:
    """(inference header, body)."""
    inputs = list(zip(("query", "key"), arrays(q, k, qtype, ktype), (qtype, ktype)))
    inputs = inputs[::-1] if key_first else inputs
    head = json.dumps(
        {
            "parameters": {"spec": json.dumps(spec), "binary_data_output": True},
            "inputs": [
                {
                    "name": n,
                    "datatype": dt,
                    "shape": list(a.shape),
                    "parameters": {"binary_data_size": a.nbytes},
                }
                for n, a, dt in inputs
            ],
        }
    ).encode()
    return head, head + b"".join(a.tobytes() for _, a, _ in inputs)


def rest_answer(server, model: str, head: bytes, body: bytes):
    """(status, headers, body) of the full path (rest.handle through ASGI, the raw front's shortcut not taken)."""
    path = f"/v2/models/{model}/infer"
    headers = [(b"content-type", b"application/octet-stream"), (rest.LENGTH_HEADER, str(len(head)).encode())]
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(msg):
        sent.append(msg)

    asyncio.run(
        rest.handle(
            server.v2, {"type": "http", "method": "POST", "path": path, "headers": headers}, receive, send, []
        )
    )
    return sent[0]["status"], sent[0]["headers"], sent[1]["body"]


def raw_http(model: str, head: bytes, body: bytes) -> bytes:
    return (
        b"POST /v2/models/%s/infer HTTP/1.1\r\nhost: t\r\ncontent-type: application/octet-stream\r\n"
        b"inference-header-content-length: %d\r\ncontent-length: %d\r\n\r\n%s"
        % (model.encode(), len(head), len(body), body)
    )


def positions(rng, n: int, reach: int) -> np.ndarray:
    """n positions: inside the stored table, just past its end, or far past it."""
    where = rng.choice(["in", "edge", "far"])
    lo, hi = {"in": (0, TABLE), "edge": (TABLE - 8, 4 * TABLE + 8), "far": (0, reach)}[where]
    if rng.random() < 0.3:  # consecutive: a decode block's keys (the stored table's copy when inside)
        start = int(rng.integers(lo, max(lo + 1, hi - n)))
        return np.arange(start, start + n)
    return rng.integers(lo, hi, n)


def learn(on, off, model: str, spec: dict, nq: int, nk: int, types: tuple, key_first: bool) -> None:
    """The full path answers until both transports have learnt the shape (an on-demand table is
    mapped a moment after its first request)."""
    data = grpc_block(model, spec, [0] * nq, [0] * nk, *types, key_first)
    head, body = rest_block(model, spec, [0] * nq, [0] * nk, *types, key_first)

    def answer():
        assert call(on, data) == call(off, data)
        assert rest_answer(on, model, head, body) == rest_answer(off, model, head, body)

    def taken() -> bool:
        return (
            on.hot.grpc(data) is not None
            and on.hot.rest(
                f"/v2/models/{model}/infer", body, [(rest.LENGTH_HEADER, str(len(head)).encode())]
            )
            is not None
        )

    req = lambda: on.v2.inferer.pipeline.request(model, {**spec, "query": [0] * nq, "key": [0] * nk})  # noqa: E731
    wait_learnt(
        lambda: on.hot.store.seen,
        lambda: on.v2.client.is_mapped(req()),
        answer,
        taken,
        f"the shortcut learns {model} {spec}",
    )


def check(on, off, model, spec, q, k, types, key_first) -> bool:
    """Both transports and the lane against the full path; whether the shortcut answered."""
    data = grpc_block(model, spec, q, k, *types, key_first)
    head, body = rest_block(model, spec, q, k, *types, key_first)
    path, hl = f"/v2/models/{model}/infer", [(rest.LENGTH_HEADER, str(len(head)).encode())]
    want_grpc = call(off, data)
    status, headers, want = rest_answer(
        off, model, head, body
    )  # (a far position grows a table: a new manifest)

    def found():
        """The gRPC entry, the REST lookup and the lane's answer, in one pass; None (learnt again)
        when a new manifest (the engine publishing a grown table, at any moment) dropped the
        templates before or between them: a taken block must be found by all three."""
        e = on.hot.grpc(data)
        if e is not None:
            taken = e[0].answer(e[1]) is not None
            got = on.hot.rest(path, body, hl)  # the raw front's and the protocol lane's: C's, or the Entry's
            answered = lane(on, raw_http(model, head, body))
            if not taken or (got is not None and answered is not False):
                return taken, got, answered
        return learn(on, off, model, spec, len(q), len(k), types, key_first)

    taken, got, answered = wait_for(found, 60, 0.01, what="the gRPC, REST and lane lookups found in one pass")
    assert (got if got is None else got[0] if len(got) == 4 else got[0].answer(got[1])) == (
        want if taken else None
    )
    assert call(on, data) == want_grpc
    assert rest_answer(on, model, head, body) == (status, headers, want)
    if not taken:
        assert answered is False and status != 200
        return False
    extra = b"".join(b"%s: %s\r\n" % (n, v) for n, v in headers if n == rest.LENGTH_HEADER)
    assert answered[2] == PRE[2] + b"%d\r\n%s\r\n%s" % (len(want), extra, want)
    return True


@hsettings(
    max_examples=80,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: slow
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    case=SPECS,
    nq=st.integers(1, 4),
    nk=st.integers(1, 24),
    types=st.sampled_from([("INT64", "INT64"), ("INT32", "INT32"), ("INT32", "INT64"), ("INT64", "INT32")]),
    key_first=st.booleans(),
    seed=st.integers(0, 1 << 30),
)
def test_block_infers_answer_what_the_full_path_answers(servers, case, nq, nk, types, key_first, seed):  # noqa: F811
    on, off = servers
    model, spec = case
    learn(on, off, model, spec, nq, nk, types, key_first)
    rng = np.random.default_rng(seed)
    reach = (
        (1 << 31)
        if model == "t5-buckets" or spec["dtype"] == "float32" or spec.get("mask_future")
        else 1 << 17
    )
    for _ in range(4):
        q, k = positions(rng, nq, reach), positions(rng, nk, reach)
        taken = check(on, off, model, spec, q, k, types, key_first)
        assert taken or (model == "alibi" and spec["dtype"] != "float32"), (q, k)  # only an overflow declines


@pytest.mark.parametrize(
    "model, spec",
    [("alibi", {"num_heads": 12}), ("alibi", {"num_heads": 12, "dtype": "float16"}), ("t5-buckets", {})],
)
def test_what_the_block_shortcut_declines_gets_the_full_path(servers, model, spec):  # noqa: F811
    on, off = servers
    learn(on, off, model, spec, 1, 3, ("INT64", "INT32"), False)
    declined = [([5], [-1, 0, 1]), ([-5], [0, 1, 2]), ([2**31], [0, 1, 2]), ([2**31 - 1], [0, 1, 2])]
    if spec.get("dtype") == "float16":
        declined.append(([200000], [0, 1, 2]))  # -0.5 * 200000 overflows float16: the full path's 400
    for q, k in declined:
        taken = check(on, off, model, spec, q, k, ("INT64", "INT32"), False)
        assert not taken or (q == [2**31 - 1] and spec.get("dtype") != "float16"), (q, k)


def test_block_outputs_into_shared_memory_or_as_json_stay_on_the_full_path(servers):  # noqa: F811
    on, off = servers
    spec = {"num_heads": 12}
    head = json.dumps(
        {
            "parameters": {"spec": json.dumps(spec)},
            "outputs": [{"name": "bias"}],
            "inputs": [
                {"name": "query", "datatype": "INT64", "shape": [1], "parameters": {"binary_data_size": 8}},
                {"name": "key", "datatype": "INT64", "shape": [1], "parameters": {"binary_data_size": 8}},
            ],
        }
    ).encode()
    body = head + np.array([3, 1], np.int64).tobytes()
    for _ in range(3):  # a JSON answer: nothing learnt
        assert rest_answer(on, "alibi", head, body) == rest_answer(off, "alibi", head, body)
    assert (
        on.hot.rest("/v2/models/alibi/infer", body, [(rest.LENGTH_HEADER, str(len(head)).encode())]) is None
    )
