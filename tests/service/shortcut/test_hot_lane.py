"""The hot lane's whole-request call (service/shortcut/hot_lane.c ``lane``) in-process: for a plain
POST it returns the HTTP head the lane is given around the same bytes ``answer`` returns for the
body, whatever the head's length (the arrays land at every alignment); it leaves to httptools
(None) every request that is not whole or not plain, and says False for a plain one it declines.
"""

from __future__ import annotations

import pytest

from posenc.service.core.settings import LANE_OFF_HEADERS, Settings, current
from posenc.service.shortcut import templates as replay
from tests.service.hot_helpers import needs_native
from tests.service_cases import ACCEPT_HDRS, BIN, orjson_dumps

ROUTES = {b"/v1/rope": ("rope", 0), b"/v1/alibi": ("alibi", 1)}
HOT = b"application/x-safetensors"


def request(path: bytes, body: bytes, head: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nhost: t\r\naccept: %s\r\n%scontent-length: %d\r\n\r\n%s" % (
        path,
        HOT,
        head,
        len(body),
        body,
    )


def lane(svc, data: bytes, start: int = 0, pre: bytes = b"PRE:", post: bytes = b"\r\nPOST\r\n", close=False):
    """The request at ``data[start:]`` answered as the lane answers it: ``svc``'s templates checked
    against the manifest as the lane checks them, then one C ``lane`` call."""
    svc.store.fresh()
    pre = (pre, b"JSON:", b"V2:")
    return replay.answer_request(data, start, ROUTES, svc.accepts, svc.templates.native, pre, post, close)


@pytest.fixture(scope="module")
def hot(learnt):
    for fam, body in (
        ("rope", {"head_dim": 64, "positions": [5]}),
        ("alibi", {"num_heads": 12, "query": [1], "key": [0, 1]}),
    ):
        for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
            learnt.execute(learnt.prepare(fam, orjson_dumps(body), BIN["accept"]))
    return learnt


BODIES = [
    (b"/v1/rope", "rope", orjson_dumps({"head_dim": 64, "positions": [7, 1, 2047]})),
    (
        b"/v1/rope",
        "rope",
        orjson_dumps({"head_dim": 64, "layout": "interleaved", "dtype": "bfloat16", "positions": [3]}),
    ),
    (b"/v1/alibi", "alibi", orjson_dumps({"num_heads": 12, "query": [9, 4], "key": [0, 3, 8]})),
]


@needs_native
@pytest.mark.parametrize("path, family, body", BODIES)
def test_the_response_is_the_head_and_the_answer_at_every_alignment(hot, path, family, body):
    want = hot.hot(family, body, ACCEPT_HDRS)
    assert want is not None
    data = b"xx" + request(path, body) + b"rest"
    for k in range(9):
        pre = b"P" * k + b"content-length: "
        for close in (False, True):
            end, route, out, keep_alive = lane(hot, data, 2, pre=pre, close=close)
            assert (end, route, keep_alive) == (len(data) - 4, ROUTES[path], not close)
            assert (
                out
                == pre
                + b"%d" % len(want)
                + b"\r\nPOST\r\n"
                + (b"connection: close\r\n" if close else b"")
                + b"\r\n"
                + want
            )


@needs_native
def test_connection_close_in_the_request_closes(hot):
    body = BODIES[0][2]
    for value in (b"close", b"Close", b"CLOSE"):
        got = lane(hot, request(b"/v1/rope", body, b"connection: %s\r\n" % value))
        assert got[3] is False and got[2].count(b"connection: close\r\n") == 1
    assert lane(hot, request(b"/v1/rope", body, b"Connection: Keep-Alive\r\n"))[3] is True


def direct(svc, data: bytes):
    """templates.answer_request as the lane calls it, with the service's templates."""
    return replay.answer_request(
        data, 0, ROUTES, svc.accepts, svc.templates.native, (b"", b"", b""), b"", False
    )


@needs_native
@pytest.mark.parametrize(
    "change",
    [
        lambda r: r[:-1],  # not whole
        lambda r: r.replace(b"HTTP/1.1", b"HTTP/1.0"),
        lambda r: r.replace(b"POST ", b"PUT "),
        lambda r: r.replace(b"/v1/rope", b"/v1/rope?x=1"),
        lambda r: r.replace(b"/v1/rope", b"/v1/sinusoidal"),  # no such route
        lambda r: r.replace(b"\r\nhost: t", b"\nhost: t"),  # a bare LF
        lambda r: r.replace(b"host: t", b"host : t"),  # not a token before ':'
        lambda r: r.replace(b"host: t", b"host: t "),  # a trailing space
        lambda r: r.replace(b"host: t", b"host: t\r\n folded"),  # obs-fold
        lambda r: r.replace(b"host: t", b"host: caf\xc3\xa9"),  # obs-text
        lambda r: r.replace(b"host: t", b"host: a\x00b"),
        lambda r: r.replace(b"host: t", b"transfer-encoding: chunked"),
        lambda r: r.replace(b"host: t", b"Expect: 100-continue"),
        lambda r: r.replace(b"host: t", b"upgrade: websocket"),
        lambda r: r.replace(b"host: t", b"proxy-connection: close"),
        lambda r: r.replace(b"host: t", b"connection: upgrade"),
        lambda r: r.replace(b"host: t", b"connection: keep-alive, close"),
        lambda r: r.replace(b"host: t", b"connection: close\r\nconnection: close"),
        lambda r: r.replace(b"host: t", b"accept: " + HOT),  # two Accept lines
        lambda r: r.replace(b"content-length: ", b"content-length: +"),
        lambda r: r.replace(b"content-length: ", b"content-length: 00000000000"),
        lambda r: r.replace(b"host: t", b"content-length: 0"),  # two Content-Lengths
        lambda r: r.replace(
            b"host: t", b"x-big: " + b"a" * current().max_header_bytes
        ),  # a head over the limit
    ],
)
def test_anything_unusual_is_left_to_httptools(hot, change):
    plain = request(b"/v1/rope", BODIES[0][2])
    assert direct(hot, plain)
    assert direct(hot, change(plain)) is None
    assert lane(hot, change(plain)) is None


@needs_native
@pytest.mark.parametrize(
    "change",
    [
        lambda r: r.replace(b"accept: " + HOT, b"accept: text/html"),  # not negotiated to safetensors
        lambda r: r.replace(b"accept: " + HOT + b"\r\n", b""),  # none
        lambda r: r.replace(b'"head_dim":64', b'"head_dim":65'),  # no template
        lambda r: r.replace(b'"positions":[7', b'"positions":[-7'),  # a selection the shortcut leaves
    ],
)
def test_a_plain_request_the_shortcut_declines_is_false(hot, change):
    plain = request(b"/v1/rope", BODIES[0][2])
    assert direct(hot, plain)
    assert direct(hot, change(plain)) is False


@needs_native
def test_the_body_and_head_limits_are_the_settings(hot):
    body = BODIES[0][2]
    data = request(b"/v1/rope", body)
    head = len(data) - len(body)
    pad = b"x-pad: " + b"a" * 10 + b"\r\n"
    try:
        replay.configure(Settings(max_body_bytes=len(body), max_header_bytes=head + len(pad)))
        assert direct(hot, data)
        padded = request(b"/v1/rope", body, pad)
        assert direct(hot, padded)  # a head of exactly the limit
        assert direct(hot, padded.replace(b"x-pad: ", b"x-pad:  ")) is None  # one byte more
        replay.configure(Settings(max_body_bytes=len(body) - 1))
        assert direct(hot, data) is False  # a body one byte over
    finally:
        replay.configure(current())


@needs_native
def test_the_off_headers_are_the_configured_ones(hot):
    data = request(b"/v1/rope", BODIES[0][2], b"X-Custom_Hop: 1\r\n")
    assert direct(hot, data)
    try:
        off = LANE_OFF_HEADERS + ("x-custom_hop",)
        replay._hot.configure(**(replay.native_rules(current()) | {"off_headers": off}))
        assert direct(hot, data) is None
    finally:
        replay.configure(current())


@needs_native
@pytest.mark.parametrize("accept", [b"application/json", b"*/*", None])
def test_json_answers_are_the_full_paths_bytes(hot, accept):
    """A learnt rows spec asked in JSON (by Accept, or none): the JSON head and the full path's
    JSON bytes, rows past the table too, and ALiBi blocks."""
    hot.prepare("rope", BODIES[0][2], None if accept is None else accept.decode())  # the negotiator's choice
    for positions in ([7, 1, 2047], [0], list(range(64)), [2047] * 3):
        body = orjson_dumps({"head_dim": 64, "positions": positions})
        data = request(b"/v1/rope", body)
        data = data.replace(
            b"accept: " + HOT + b"\r\n", b"" if accept is None else b"accept: " + accept + b"\r\n"
        )
        end, route, out, keep_alive = lane(hot, data)
        want = hot.execute(hot.prepare("rope", body, None if accept is None else accept.decode()))[0]
        assert out == b"JSON:%d\r\nPOST\r\n\r\n" % len(want) + want
    body = orjson_dumps({"head_dim": 64, "positions": [2048, 60000]})  # past the table: computed
    want = hot.execute(hot.prepare("rope", body, "application/json"))[0]
    assert lane(hot, request(b"/v1/rope", body).replace(HOT, b"application/json"))[2].endswith(want)
    hot.prepare("alibi", BODIES[2][2], "application/json")
    want = hot.execute(hot.prepare("alibi", BODIES[2][2], "application/json"))[0]  # blocks too (hot_alibi.c)
    assert lane(hot, request(b"/v1/alibi", BODIES[2][2]).replace(HOT, b"application/json"))[2].endswith(want)
