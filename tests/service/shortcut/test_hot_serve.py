"""The lane's per-read loop in C (service/shortcut/hot_serve.c ``Reader``, made by
``Service.lane_reader`` and bound to a connection): every whole request of a read answered with
the bytes the one-request call (``templates.answer_request``) gives for it, each written, counted
as ``Metrics.observe_at`` counts it, one that needs a text computed first answered inside the loop
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
    reader = svc.lane_reader(ROUTES, POST, counts).bind(
        write or out.append, flow or types.SimpleNamespace(write_paused=False)
    )
    reader.closing = close
    return reader(data, PRE, 0.0), out


def worker(svc, again=None, fresh=None, every=1.0):
    """A worker's Reader over svc's templates, its routes ROUTES, counting nothing."""
    return replay.Reader(
        routes=ROUTES,
        accepts=svc.accepts,
        native=svc.templates.native,
        post=POST,
        counts=None,
        buckets=b"",
        again=again,
        fresh=fresh or svc.store.fresh,
        every=every,
    )


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


@pytest.mark.skipif(replay.Reader is None, reason="service._hot is not built")
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
    bad = hot.lane_reader({b"/v1/rope": "rope"}, POST, (None, b"")).bind(
        calls.append, types.SimpleNamespace(write_paused=False)
    )(rope(1), PRE, 0.0)
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
    flow, out = types.SimpleNamespace(write_paused=False), []

    got = worker(hot, again=None).bind(out.append, flow)(data, PRE, 0.0)
    assert got == (len(rope(1)), 1, replay.SERVE_AGAIN, None) and len(out) == 1

    def boom(*a, **kw):
        raise RuntimeError("again failed")

    at, done, state, error = worker(hot, again=boom).bind(out.append, flow)(data, PRE, 0.0)
    assert (at, done, state, type(error)) == (len(rope(1)), 1, replay.SERVE_FAILED, RuntimeError)


@needs_native
def test_a_workers_connections_share_one_look_at_the_manifest_per_interval(hot):
    """fresh() (the store's check against the manifest) runs before a read's answers when the
    loop's clock has reached the worker's next look, once per ``every`` over all its connections;
    one that raises comes back as the read's exception, nothing answered."""
    looks = []

    def fresh():
        looks.append(True)
        if len(looks) == 4:
            raise RuntimeError("manifest gone")
        return hot.store.fresh()

    one_by_one(hot, rope(1))
    reads = worker(hot, fresh=fresh, every=0.5)
    flow, out = types.SimpleNamespace(write_paused=False), []
    a, b = reads.bind(out.append, flow), reads.bind(out.append, flow)
    for reader, now, n in ((a, 10.0, 1), (b, 10.2, 1), (a, 10.49, 1), (b, 10.5, 2), (a, 11.0, 3)):
        assert reader(rope(1), PRE, now)[:3] == (len(rope(1)), 1, replay.SERVE_DONE)
        assert len(looks) == n, (now, looks)
    at, done, state, error = b(rope(1), PRE, 11.5)
    assert (at, done, state, type(error)) == (0, 0, replay.SERVE_FAILED, RuntimeError)
    assert len(out) == 5


@needs_native
def test_a_draining_connections_answers_close_it(hot):
    one_by_one(hot, rope(1))
    out = []
    reader = hot.lane_reader(ROUTES, POST, (None, b"")).bind(
        out.append, types.SimpleNamespace(write_paused=False)
    )
    assert reader.closing is False
    reader.closing = True
    assert reader(rope(1) + rope(2), PRE, 0.0)[:3] == (len(rope(1)), 1, replay.SERVE_CLOSED)
    assert out[0].split(b"\r\n\r\n", 1)[0].endswith(b"connection: close")


@pytest.mark.skipif(replay.Reader is None, reason="service._hot is not built")
def test_a_reader_refuses_what_it_cannot_use(hot):
    """Arguments are checked when a Reader is made or bound, a read's when it is called: a
    TypeError, never a crash."""
    good = dict(
        routes=ROUTES,
        accepts={},
        native={},
        post=POST,
        counts=None,
        buckets=b"",
        again=None,
        fresh=lambda: True,
        every=1.0,
    )
    for bad in (
        {"routes": [1]},
        {"accepts": None},
        {"post": "text"},
        {"fresh": None},
        {"again": 3},
        {"every": "soon"},
        {"counts": b"read only", "buckets": b"\0" * 8},
    ):
        with pytest.raises((TypeError, BufferError)):
            replay.Reader(**{**good, **bad})
    with pytest.raises(TypeError):
        replay.Reader(*good.values())
    with pytest.raises(TypeError):
        replay.Reader(**{k: v for k, v in good.items() if k != "every"})
    worker = replay.Reader(**good)
    with pytest.raises(TypeError):
        worker(rope(1), PRE, 0.0)  # the worker's own: bound to no connection
    with pytest.raises(TypeError):
        worker.bind("not callable", None)
    conn = worker.bind(list().append, types.SimpleNamespace(write_paused=False))
    with pytest.raises(TypeError):
        conn.bind(print, None)  # a connection's is bound already
    for args in (
        (rope(1).decode(), PRE, 0.0),
        (rope(1), PRE[:2], 0.0),
        (rope(1), (b"", b"", ""), 0.0),
        (rope(1), PRE, "now"),
        (rope(1), PRE),
    ):
        with pytest.raises(TypeError):
            conn(*args)
