"""The HTTP protocol (service/protocol/uvicorn_api.py) in the style of uvicorn's own tests: a
protocol object on a fake transport, request bytes in, response bytes out, with the worker's real
front (attached to a test engine) behind it. The real-server tests (tests/integration/test_lane.py)
hold the same behaviour on sockets."""

from __future__ import annotations

import asyncio
import logging
import re
import struct

import orjson
import pytest
import uvicorn
from uvicorn.server import ServerState

from posenc.service.front.app import create_app
from posenc.service.protocol import limits as limits_mod
from posenc.service.protocol import uvicorn_api
from posenc.service.protocol.lane import STATE_KEY, WRITE_AT_ONCE
from posenc.service.shortcut import templates as replay
from tests.independent import assert_answer
from tests.service.hot_helpers import needs_native
from tests.service_cases import BIN
from tests.waits import wait_for

HOT = b"application/x-safetensors"
BODY = orjson.dumps({"head_dim": 64, "positions": [3, 1]})


class Transport:
    def __init__(self):
        self.buffer, self.closed = b"", False

    def write(self, data):
        self.buffer += bytes(data)

    def writelines(self, parts):
        for p in parts:
            self.write(p)

    def is_closing(self):
        return self.closed

    def close(self):
        self.closed = True

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def set_write_buffer_limits(self, high=None, low=None):
        self.limits = (high, low)

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass

    def set_protocol(self, p):
        pass


def request(body: bytes = BODY, accept: bytes = HOT, path: bytes = b"/v1/rope", extra: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nhost: t\r\naccept: %s\r\n%scontent-length: %d\r\n\r\n%s" % (
        path,
        accept,
        extra,
        len(body),
        body,
    )


@pytest.fixture
def world(settings, monkeypatch):
    """(a protocol factory over the worker's front, the front, the event loop)."""
    # no access log (as posenc serve runs by default): pytest's root handlers would turn it on
    access = logging.getLogger("uvicorn.access")
    monkeypatch.setattr(access, "propagate", False)
    monkeypatch.setattr(access, "handlers", [])
    monkeypatch.setattr(limits_mod, "_limits", limits_mod.Limits(settings.override(header_timeout_s=0.2)))
    front = create_app(settings)
    front.svc.attach_all()
    loop = asyncio.new_event_loop()
    cfg = uvicorn.Config(
        app=front, loop="none", lifespan="off", log_config=None, server_header=False, ws="none"
    )
    cfg.load()
    offers = []
    real = front.svc.hot  # every offer to the C shortcut, counted: the front's door ...
    monkeypatch.setattr(front.svc, "hot", lambda *a, **k: offers.append("hot") or real(*a, **k))
    if front.lane is not None:  # ... and each read a connection's Reader is handed
        worker = front.lane.reader()

        class Counted:
            def bind(self, write, flow):
                conn = worker.bind(write, flow)
                return lambda *a: offers.append("reader") or conn(*a)

        monkeypatch.setattr(front.lane, "reader", Counted)

    def make(lane: bool = True):
        monkeypatch.setattr(access, "handlers", [])  # pytest adds its capture handlers per phase
        state = ServerState()
        state.default_headers = [(b"date", b"Thu, 01 Jan 2026 00:00:00 GMT")]
        p = uvicorn_api.Protocol(
            config=cfg, server_state=state, app_state={STATE_KEY: front.lane} if lane else {}, _loop=loop
        )
        t = Transport()
        p.connection_made(t)
        return p, t

    yield make, front, loop, offers
    loop.close()


def answers(buf: bytes) -> int:
    """The whole responses in ``buf`` (each head and its content-length's body)."""
    n = 0
    while (end := buf.find(b"\r\n\r\n")) >= 0:
        m = re.search(rb"(?im)^content-length: *(\d+)\r$", buf[: end + 2])
        length = int(m.group(1)) if m else 0
        if len(buf) < end + 4 + length:
            break
        n, buf = n + 1, buf[end + 4 + length :]
    return n


def settle(loop, t: Transport, done, what: str) -> None:
    """Turn the event loop (its threads' work, its timers) until ``done(t)``: tests.waits' deadline."""

    def turned():
        loop.call_soon(loop.stop)
        loop.run_forever()  # one turn of the loop
        return done(t)

    wait_for(turned, 30, 0.005, what, seen=lambda: (t.buffer[:300], t.closed))


def answered(t: Transport) -> bool:
    return answers(t.buffer) >= 1


def status_and_body(raw: bytes) -> tuple[int, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


@needs_native
def test_a_learnt_request_is_answered_in_the_data_callback_with_the_shortcuts_bytes(world):
    make, front, loop, offers = world
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py); learnt by the full path
        front.svc.execute(front.svc.prepare("rope", BODY, BIN["accept"]))
    p, t = make()
    p.data_received(request())
    assert status_and_body(t.buffer) == (200, front.svc.hot("rope", BODY, [(b"accept", HOT)]))
    assert front.lane.answered == 1 and not t.closed and b"date: Thu" in t.buffer
    assert t.limits[0] == WRITE_AT_ONCE  # a large answer is sent at once, not at the loop's turn


@needs_native
def test_a_json_answer_whose_rows_text_is_not_kept_is_answered_in_the_same_call(world):
    """Rows whose JSON text the template does not hold yet: the C loop has it rendered
    (templates.lane_again) and answers it with the full path's bytes, still in the one offer per
    read, as are the requests after it."""
    make, front, loop, offers = world
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py); a JSON template learnt
        front.svc.execute(front.svc.prepare("rope", BODY, "application/json"))
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py); and the binary one
        front.svc.execute(front.svc.prepare("rope", BODY, BIN["accept"]))
    body = orjson.dumps({"head_dim": 64, "positions": [2998, 2999]})  # rows with no text kept
    data = request(body=body, accept=b"application/json") + request()
    native = front.svc.templates.native
    assert (
        replay._hot.lane(
            data,
            0,
            routes=front.lane.urls,
            accepts=front.svc.accepts,
            native=native,
            pre=(b"", b"", b""),
            post=b"",
            close=False,
        )
        is NotImplemented
    )
    p, t = make()
    p.data_received(data)
    assert offers == ["reader"] and front.lane.answered == 2, offers
    heads = t.buffer.split(b"HTTP/1.1 ")[1:]
    want = front.svc.execute(front.svc.prepare("rope", body, "application/json"))[0]
    assert len(heads) == 2 and heads[0].split(b"\r\n\r\n", 1)[1] == want
    assert status_and_body(b"HTTP/1.1 " + heads[1]) == (200, front.svc.hot("rope", BODY, [(b"accept", HOT)]))


@needs_native
def test_a_declined_request_is_answered_by_the_full_path(world):
    make, front, loop, offers = world
    p, t = make()
    p.data_received(request(accept=b"application/json"))  # a template not learnt: the C call declines
    settle(loop, t, answered, "ASGI's answer")
    status, body = status_and_body(t.buffer)
    assert status == 200 and offers[0] == "reader", offers
    assert_answer("rope", orjson.loads(BODY), orjson.loads(body), what="the full path's JSON")


@needs_native
def test_a_whole_request_call_that_raises_is_logged_and_the_request_still_answered(
    world, monkeypatch, caplog
):
    make, front, loop, offers = world
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        front.svc.execute(front.svc.prepare("rope", BODY, BIN["accept"]))

    def boom():
        raise RuntimeError("boom")

    # a Reader whose look at the manifest raises, inside the C call (the exception comes back)
    svc = front.svc
    worker = replay.Reader(
        routes=front.lane.urls,
        accepts=svc.accepts,
        native=svc.templates.native,
        post=front.lane.post,
        counts=None,
        buckets=b"",
        again=replay.lane_again,
        fresh=boom,
        every=1.0,
    )
    monkeypatch.setattr(front.lane, "reader", lambda: worker)
    p, t = make()
    with caplog.at_level(logging.ERROR, logger="posenc.service"):
        p.data_received(request())
        settle(loop, t, answered, "the answer after the shortcut raised")
    assert status_and_body(t.buffer) == (200, front.svc.hot("rope", BODY, [(b"accept", HOT)]))
    assert "template shortcut failed" in caplog.text and "boom" in caplog.text  # (then httptools read it)


@needs_native
def test_without_a_lane_the_front_offers_the_request_itself(world):
    make, front, loop, offers = world
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        front.svc.execute(front.svc.prepare("rope", BODY, BIN["accept"]))
    p, t = make(lane=False)
    p.data_received(request())
    settle(loop, t, answered, "the front's answer")
    assert status_and_body(t.buffer) == (200, front.svc.hot("rope", BODY, [(b"accept", HOT)]))
    assert offers.count("hot") == 2 and "reader" not in offers  # the front's, and ours above


def v2_request(positions, extra: bytes = b"") -> bytes:
    """A v2 REST binary infer of RoPE (KServe's binary tensor extension: a JSON header, then the
    positions' int64 bytes)."""
    raw = struct.pack(f"<{len(positions)}q", *positions)
    head = orjson.dumps(
        {
            "parameters": {"binary_data_output": True, "spec": orjson.dumps({"head_dim": 64}).decode()},
            "inputs": [
                {
                    "name": "positions",
                    "datatype": "INT64",
                    "shape": [len(positions)],
                    "parameters": {"binary_data_size": len(raw)},
                }
            ],
        }
    )
    return b"POST /v2/models/rope/infer HTTP/1.1\r\nhost: t\r\n%sinference-header-content-length: %d\r\n" % (
        extra,
        len(head),
    ) + b"content-length: %d\r\n\r\n%s" % (len(head) + len(raw), head + raw)


def v2_json_request(positions, extra: bytes = b"") -> bytes:
    """A v2 REST JSON-tensor infer of RoPE: its positions a JSON ``data`` list, its outputs in JSON."""
    body = orjson.dumps(
        {
            "parameters": {"spec": orjson.dumps({"head_dim": 64}).decode()},
            "inputs": [
                {"name": "positions", "datatype": "INT64", "shape": [len(positions)], "data": positions}
            ],
        }
    )
    return b"POST /v2/models/rope/infer HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n%s" % (
        extra
    ) + b"content-length: %d\r\n\r\n%s" % (len(body), body)


def responses(buf: bytes) -> list[bytes]:
    """The whole responses in ``buf``, each head and body."""
    out = []
    while (end := buf.find(b"\r\n\r\n")) >= 0:
        m = re.search(rb"(?im)^content-length: *(\d+)\r$", buf[: end + 2])
        n = end + 4 + (int(m.group(1)) if m else 0)
        if len(buf) < n:
            break
        out.append(buf[:n])
        buf = buf[n:]
    return out


HEALTH = b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n"


@needs_native
@pytest.mark.parametrize("shape", ["head then body", "7-byte reads", "pipelined"])
@pytest.mark.parametrize("close", [False, True], ids=["keep-alive", "close"])
@pytest.mark.parametrize("kind", ["/v1 binary", "/v1 JSON", "v2 binary", "v2 JSON"])
def test_split_and_pipelined_requests_get_the_full_paths_bytes(world, shape, close, kind):
    """A request httptools reads (its head and body in separate reads, or behind one the C call
    does not take, in the same read) is answered by the learnt template (the full path is not
    asked: JSON too) with the bytes the full path answered it with before: head (the date fixed)
    and body, and the connection kept or closed as the full path did."""
    make, front, loop, offers = world
    extra = b"connection: close\r\n" if close else b""
    if kind.startswith("v2"):
        assert front.v2_hot is not None, "the v2 shortcut is on"
        data = (v2_request if kind == "v2 binary" else v2_json_request)([5, 9], extra)
    else:
        data = request(accept=HOT if kind == "/v1 binary" else b"application/json", extra=extra)
    full = []
    for _ in range(2):  # the full path answers (and learns at the second time)
        p, t = make()
        p.data_received(data)
        settle(loop, t, answered, "the full path's answer")
        full.append((t.buffer, t.closed))
    assert full[0] == full[1] and full[0][0].startswith(b"HTTP/1.1 200 OK\r\n"), full
    asked = []  # the full paths, /v1's and v2's, asked from here on
    prepare, v2 = front.svc.prepare, front.v2
    front.svc.prepare = lambda *a: asked.append(a) or prepare(*a)
    front.v2 = lambda *a: asked.append(a) or v2(*a)
    cut = data.index(b"\r\n\r\n") + 4
    reads = {
        "head then body": [data[:cut], data[cut:]],
        "7-byte reads": [data[i : i + 7] for i in range(0, len(data), 7)],
        "pipelined": [HEALTH + data],
    }[shape]
    p, t = make()
    for r in reads:
        p.data_received(r)
    n = 1 + (shape == "pipelined")
    settle(loop, t, lambda t: answers(t.buffer) >= n, f"{n} answers")
    got = responses(t.buffer)
    assert len(got) == n and got[-1] == full[0][0] and t.closed == close, (got, t.closed)
    assert not asked, "the learnt template answers it, not the full path"


@needs_native
@pytest.mark.parametrize("positions", [[2998, 2999], [7], list(range(64))])
def test_a_split_json_request_for_other_rows_is_the_templates_answer(world, positions):
    """A JSON request of a learnt spec, head and body in two reads, asking rows whose texts the
    template has not rendered yet (its miss is computed and the request asked again, as the C
    loop's): answered by the template with the bytes the full path answers it with, which hold the
    float64 reference's values."""
    make, front, loop, offers = world
    for _ in range(2):  # the full path answers the learnt body (and learns at the second time)
        p, t = make()
        p.data_received(request(accept=b"application/json"))
        settle(loop, t, answered, "the full path's answer")
    body = orjson.dumps({"head_dim": 64, "positions": positions})
    want = front.svc.execute(front.svc.prepare("rope", body, "application/json"))[0]
    asked, prepare = [], front.svc.prepare
    front.svc.prepare = lambda *a: asked.append(a) or prepare(*a)
    data = request(body=body, accept=b"application/json")
    cut = data.index(b"\r\n\r\n") + 4
    p, t = make()
    p.data_received(data[:cut])
    p.data_received(data[cut:])
    settle(loop, t, answered, "the answer")
    (got,) = responses(t.buffer)
    head, _, answer = got.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head and answer == want and not asked
    assert_answer("rope", {"head_dim": 64, "positions": positions}, orjson.loads(answer))


def test_a_head_that_never_ends_gets_408_and_a_closed_connection(world):
    make, front, loop, offers = world
    p, t = make()
    p.data_received(b"POST /v1/rope HTTP/1.1\r\nhost: t\r\n")
    settle(loop, t, lambda t: t.closed, "the connection closed at the header timeout (0.2 s)")
    assert t.buffer.startswith(b"HTTP/1.1 408 ") and t.closed


def test_a_head_over_the_limit_arriving_in_pieces_gets_431(world):
    make, front, loop, offers = world
    p, t = make()
    p.data_received(b"POST /v1/rope HTTP/1.1\r\n")
    for _ in range(70):
        p.data_received(b"x-pad: " + b"a" * 1017 + b"\r\n")
        if t.closed:
            break
    assert t.buffer.startswith(b"HTTP/1.1 431 ") and t.closed


def test_the_protocol_checks_pass_on_this_uvicorn_even_inside_a_running_loop():
    async def inside():
        return uvicorn_api.problems()

    assert uvicorn_api.problems() == [] and asyncio.run(inside()) == []
    assert uvicorn_api.SUPPORTED and uvicorn_api.WHY_OFF is None


def test_a_whole_head_over_the_limit_in_one_read_gets_431_and_nothing_else(world):
    make, front, loop, offers = world
    p, t = make()
    body = b'{"head_dim": 64, "positions": [1]}'
    p.data_received(
        b"POST /v1/rope HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"x-pad: %s\r\n\r\n%s" % (len(body), b"a" * (70 * 1024), body)
    )
    settle(loop, t, lambda t: t.closed, "the connection closed")
    assert t.buffer.startswith(b"HTTP/1.1 431 ") and t.buffer.count(b"HTTP/1.1") == 1 and t.closed


def asgi(front, loop, data: bytes) -> list:
    """``data`` (one request's bytes) sent to the raw front as uvicorn sends it, its body one ASGI
    message: the messages the front sends back."""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = [tuple(x.split(b": ", 1)) for x in lines[1:]]
    scope = {
        "type": "http",
        "method": "POST",
        "path": lines[0].split(b" ")[1].decode(),
        "headers": [(k.lower(), v) for k, v in headers],
        "query_string": b"",
        "http_version": "1.1",
        "scheme": "http",
        "root_path": "",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 5000),
    }
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(msg):
        sent.append(msg)

    loop.run_until_complete(front(scope, receive, send))
    return sent


def learnt_v2(front, loop, data: bytes) -> list:
    """The full path's messages for ``data`` (answered twice: learnt at its second answer), the
    second time's, which must be the first's."""
    full = [asgi(front, loop, data) for _ in range(2)]
    assert full[0] == full[1] and full[0][0]["status"] == 200, full
    return full[0]


def count_full(front) -> list:
    """The v2 full path's calls from here on."""
    asked, v2 = [], front.v2
    front.v2 = lambda *a: asked.append(a) or v2(*a)
    return asked


@needs_native
@pytest.mark.parametrize("kind", ["v2 binary", "v2 JSON"])
def test_the_raw_front_answers_a_learnt_v2_request_with_the_full_paths_messages(world, kind):
    """A learnt v2 REST infer the raw front reads (one ASGI message) is answered by the door, C's
    lookup, with the messages the full path sent: status, headers (in order) and body."""
    make, front, loop, offers = world
    data = (v2_request if kind == "v2 binary" else v2_json_request)([5, 9])
    want = learnt_v2(front, loop, data)
    asked = count_full(front)
    got = asgi(front, loop, data)
    assert got == want and not asked, (got, want, asked)
    ctype = dict(want[0]["headers"])[b"content-type"]
    assert ctype == (b"application/octet-stream" if kind == "v2 binary" else b"application/json"), ctype


def _declined(data: bytes, how: str) -> bytes:
    """A learnt v2 binary request (``v2_request``) made one the door must decline."""
    head, _, body = data.partition(b"\r\n\r\n")
    hl = re.search(rb"inference-header-content-length: (\d+)\r\n", head)
    n = int(hl.group(1))
    if how == "compressed":
        return head + b"\r\ncontent-encoding: gzip\r\n\r\n" + body
    if how == "repeated length header":
        return head + b"\r\n" + hl.group(0)[:-2] + b"\r\n\r\n" + body
    if how == "length past the body":
        return (
            head.replace(hl.group(0), b"inference-header-content-length: %d\r\n" % (len(body) + 1))
            + b"\r\n\r\n"
            + body
        )
    assert how == "another length"
    return (
        head.replace(hl.group(0), b"inference-header-content-length: %d\r\n" % (n - 1)) + b"\r\n\r\n" + body
    )


@needs_native
@pytest.mark.parametrize(
    "how", ["compressed", "repeated length header", "length past the body", "another length"]
)
def test_the_door_declines_what_the_lane_declines_and_the_full_path_answers_it(world, how):
    """The door's length and refused-header rules are the lane's: a compressed body, the length
    header twice, a header length past the body or another one than the learnt header's go to the
    full path (never a 500), while the learnt request itself is the door's."""
    make, front, loop, offers = world
    data = v2_request([5, 9])
    learnt_v2(front, loop, data)
    odd = _declined(data, how)

    def door(raw: bytes):
        head, _, body = raw.partition(b"\r\n\r\n")
        headers = [tuple(x.lower().split(b": ", 1)) for x in head.split(b"\r\n")[1:]]
        return front.shortcut("/v2/models/rope/infer", body, headers)

    assert door(data) is not None and door(odd) is None, how
    asked = count_full(front)
    got = asgi(front, loop, odd)
    assert len(asked) == 1 and got[0]["status"] < 500, (asked, got[0])
