"""The lane's per-read loop in C (service/shortcut/hot_serve.c ``serve``, through
``Service.hot_requests``): every whole request of a read answered with the bytes the one-request
call (``templates.answer_request``) gives for it, each written, counted as ``Metrics.observe_at``
counts it, one that needs a text computed first answered inside the loop
(``templates.lane_again``), and the loop stopping where the Python loop stopped (paused writes, a
request it does not read, one it declines, a close, a failure).
"""

from __future__ import annotations

import random
import types

import numpy as np
import pytest

from posenc.service.metrics.counters import Metrics
from posenc.service.metrics.layout import BUCKETS_S, SHAPE
from posenc.service.shortcut import templates as replay
from tests.service.hot_helpers import needs_native
from tests.service.shortcut import test_hot_lane as _hot_lane
from tests.service_cases import orjson_dumps

hot = _hot_lane.hot  # the fixture (rope and alibi learnt), registered here by its name

ROUTES = {b"/v1/rope": ("rope", 0), b"/v1/alibi": ("alibi", 2 * SHAPE[2] * SHAPE[1])}
PRE = (b"PRE:", b"JSON:", b"V2:")
POST = b"\r\nPOST\r\n"
HOT, JSON = b"application/x-safetensors", b"application/json"


def request(path: bytes, body: bytes, accept: bytes = HOT, head: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nhost: t\r\naccept: %s\r\n%scontent-length: %d\r\n\r\n%s" % (
        path,
        accept,
        head,
        len(body),
        body,
    )


def rope(*positions: int) -> bytes:
    return request(b"/v1/rope", orjson_dumps({"head_dim": 64, "positions": list(positions)}))


@pytest.fixture
def metrics(tmp_path):
    m = Metrics(str(tmp_path), "serve-test")
    yield m
    m.close()


def serve(svc, data: bytes, counts, write=None, flow=None, close=False):
    out = []
    got = svc.hot_requests(
        data,
        ROUTES,
        PRE,
        POST,
        close,
        0.0,
        write or out.append,
        flow or types.SimpleNamespace(write_paused=False),
        counts,
    )
    return got, out


def one_by_one(svc, data: bytes) -> list[bytes]:
    """What the one-request call answers, request after request (the Python loop's answers)."""
    outs, at = [], 0
    svc.store.fresh()
    while at < len(data):
        got = replay.answer_request(data, at, ROUTES, svc.accepts, svc.templates.native, PRE, POST, False)
        if not got:
            break
        at, _, out, _ = got
        outs.append(out)
    return outs


@pytest.mark.skipif(replay.serve is None, reason="service._hot is not built")
def test_an_answer_is_counted_in_the_bucket_observe_at_counts_it_in(tmp_path):
    a, b = Metrics(str(tmp_path), "a"), Metrics(str(tmp_path), "b")
    try:
        rng = random.Random(5)
        seconds = [
            *BUCKETS_S,
            *(x * (1 + 1e-15) for x in BUCKETS_S),
            *(x * (1 - 1e-15) for x in BUCKETS_S),
            0.0,
            5e-324,
            1e-9,
            2.0,
            1e6,
            *(10 ** rng.uniform(-7, 1) for _ in range(2000)),
        ]
        for s in seconds:
            base = Metrics.index(
                rng.choice(["/v1/rope", "/v2/models/alibi/infer", "other"]), rng.choice([200, 422])
            )
            nbytes = rng.randrange(1 << 20)
            a.observe_at(base, s, nbytes)
            replay._hot.observe(*b.native, base=base, seconds=s, nbytes=nbytes)
        assert np.array_equal(a.counts[:-1], b.counts[:-1])  # (the last row: each file's own token)
        before = b.counts.copy()
        replay._hot.observe(
            *b.native, base=a.counts.size, seconds=1e-5, nbytes=1
        )  # a base past the counts: nothing counted
        assert np.array_equal(before, b.counts)
    finally:
        a.close()
        b.close()


@needs_native
def test_every_pipelined_request_is_answered_written_and_counted(hot, metrics):
    data = (
        rope(7)
        + rope(1, 2, 2047)
        + request(b"/v1/alibi", orjson_dumps({"num_heads": 12, "query": [4], "key": [0, 3]}))
        + rope(9)
    )
    want = one_by_one(hot, data)  # (and every answer's header computed)
    (at, done, state, error), out = serve(hot, data, metrics.native)
    assert (at, done, state, error) == (len(data), 4, replay.SERVE_DONE, None)
    assert out == want
    flat = metrics.counts.reshape(-1)
    cells = SHAPE[2]
    for base, answers in ((0, [out[0], out[1], out[3]]), (ROUTES[b"/v1/alibi"][1], [out[2]])):
        assert flat[base : base + cells - 2].sum() == len(answers)
        assert flat[base + cells - 1] == sum(map(len, answers))  # the bytes, as observe_at adds them
        assert 0 < flat[base + cells - 2] < 1  # the seconds


@needs_native
def test_the_loop_stops_where_the_python_loop_stopped(hot):
    first = rope(3)
    unlearnt = request(b"/v1/rope", orjson_dumps({"head_dim": 48, "positions": [1]}))
    cases = {
        "not a request": (first + b"GET / HTTP/1.1\r\nhost: t\r\n\r\n", replay.SERVE_NOT_REQUEST),
        "declined": (first + unlearnt, replay.SERVE_DECLINED),
        "incomplete": (first + rope(4)[:-3], replay.SERVE_NOT_REQUEST),
        "closed": (
            request(
                b"/v1/rope", orjson_dumps({"head_dim": 64, "positions": [3]}), head=b"connection: close\r\n"
            )
            + rope(4),
            replay.SERVE_CLOSED,
        ),
    }
    for name, (data, why) in cases.items():
        want = one_by_one(hot, data)
        (at, done, state, error), out = serve(hot, data, (None, b""))
        assert (at, done, state, error) == (len(first) + 19 * (name == "closed"), 1, why, None), name
        assert out == want[:1], name


@needs_native
def test_a_paused_transport_stops_the_loop_after_its_write(hot):
    flow = types.SimpleNamespace(write_paused=False)
    out = []

    def write(b):
        out.append(b)
        flow.write_paused = True

    data = rope(1) + rope(2)
    want = one_by_one(hot, data)
    (at, done, state, error), _ = serve(hot, data, (None, b""), write=write, flow=flow)
    assert (at, done, state, error) == (len(rope(1)), 1, replay.SERVE_PAUSED, None)
    assert out == want[:1]


@needs_native
def test_a_failing_write_or_lane_comes_back_as_the_exception_with_the_answers_before_it_counted(hot, metrics):
    calls = []
    one_by_one(hot, rope(1))

    def write(b):
        calls.append(b)
        if len(calls) == 2:
            raise ConnectionError("gone")

    (at, done, state, error), _ = serve(hot, rope(1) + rope(2) + rope(3), metrics.native, write=write)
    assert (at, done, state, type(error)) == (len(rope(1)), 1, replay.SERVE_FAILED, ConnectionError)
    assert metrics.counts.reshape(-1)[: SHAPE[2] - 2].sum() == 1
    bad = hot.hot_requests(
        rope(1),
        {b"/v1/rope": "rope"},
        PRE,
        POST,
        False,
        0.0,
        calls.append,
        types.SimpleNamespace(write_paused=False),
        (None, b""),
    )
    assert bad[:3] == (0, 0, replay.SERVE_FAILED) and isinstance(bad[3], TypeError)


@needs_native
def test_a_json_answer_missing_a_rows_text_is_rendered_and_answered_inside_the_loop(hot, metrics):
    """lane() cannot answer rows whose JSON text is not kept yet (NotImplemented); the loop hands that
    request to replay.lane_again, which renders the texts, and goes on: every request of the read
    answered in the one call, with the full path's bytes, and counted."""
    body = {"head_dim": 64, "positions": [11]}
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py); a JSON template
        hot.execute(hot.prepare("rope", orjson_dumps(body), "application/json"))
    unrendered = {**body, "positions": [1999, 2000]}
    data = rope(1) + request(b"/v1/rope", orjson_dumps(unrendered), accept=JSON) + rope(2)
    one_by_one(hot, rope(1))
    (at, done, state, error), out = serve(hot, data, metrics.native)
    assert (at, done, state, error) == (len(data), 3, replay.SERVE_DONE, None)
    full, _ = hot.execute(hot.prepare("rope", orjson_dumps(unrendered), "application/json"))
    assert out[1] == PRE[1] + b"%d" % len(full) + POST + b"\r\n" + full
    assert out == one_by_one(hot, data)  # (now kept: lane() itself gives the same bytes)
    assert metrics.counts.reshape(-1)[: SHAPE[2] - 2].sum() == 3


@needs_native
def test_without_again_the_c_loop_stops_at_a_missing_text_and_a_failing_again_comes_back(hot):
    body = {"head_dim": 64, "positions": [11]}
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        hot.execute(hot.prepare("rope", orjson_dumps(body), "application/json"))
    data = rope(1) + request(b"/v1/rope", orjson_dumps({**body, "positions": [2999, 3000]}), accept=JSON)
    one_by_one(hot, rope(1))
    lane = dict(
        routes=ROUTES, accepts=hot.accepts, native=hot.templates.native, pre=PRE, post=POST, close=False
    )
    flow, out = types.SimpleNamespace(write_paused=False), []
    loop = dict(write=out.append, flow=flow, counts=None, buckets=b"")
    got = replay.serve(data, **lane, **loop, again=None)
    assert got == (len(rope(1)), 1, replay.SERVE_AGAIN, None) and len(out) == 1

    def boom(*a, **kw):
        raise RuntimeError("again failed")

    at, done, state, error = replay.serve(data, **lane, **loop, again=boom)
    assert (at, done, state, type(error)) == (len(rope(1)), 1, replay.SERVE_FAILED, RuntimeError)
