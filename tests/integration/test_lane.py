"""The hot lane below ASGI (service/protocol/lane.py) on real servers: the same raw bytes sent to a
`posenc serve` with the lane on and to one with it off get the same statuses, headers and bodies
(the date header and the worker's pid aside), whatever the mix: pipelined hot and ASGI requests,
Connection: close, HTTP/1.0, chunked bodies, oversized bodies, a client leaving mid-body, and
whole requests of every shape the whole-request lane (service/shortcut/_hot.c ``lane``) takes or leaves to
httptools. The connection guard's header and body timeouts and the keep-alive timeout still hold
on a connection the lane has answered."""

from __future__ import annotations

import re
import socket
import time

import httpx
import orjson
import pytest

from posenc.engine import kernels
from posenc.service.shortcut import templates as replay
from tests.procs import Procs, child_env, wait_for
from tests.service_cases import CONFIG

# The lane answers what the C shortcut answers: both servers run it (POSENC_SHORTCUT=c), also
# under the numpy kernel backend, where "auto" would leave it off. Rows past a stored table are
# computed in C with the simd backend's kernels only (with numpy's they take the full path).
PAST_IN_C = kernels.c_api() is not None
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not replay.NATIVE, reason="the hot lane needs the C shortcut (service._hot)"),
]

HOT = b"application/x-safetensors"
KEEPALIVE_S = 2
WAIT = 60  # seconds a test waits for the server to close a connection (a bound on a hang, not a timing)
LIMITS = ["--header-timeout", "1", "--body-timeout", "1"]


def request(
    path: str, body: bytes, accept: bytes = HOT, version: bytes = b"1.1", extra: bytes = b""
) -> bytes:
    return (
        b"POST %s HTTP/%s\r\nhost: t\r\ncontent-type: application/json\r\naccept: %s\r\n"
        b"content-length: %d\r\n%s\r\n%s" % (path.encode(), version, accept, len(body), extra, body)
    )


def rope(positions, **spec) -> bytes:
    return orjson.dumps({"head_dim": 64, **spec, "positions": positions})


# asked after the responses read, to learn whether the server kept the connection: answered on an
# open one; a closed one (or one the server is closing) answers nothing
PROBE = b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n"


def read_responses(
    sock: socket.socket, n: int, timeout: float = 60.0, probe: bool = False
) -> tuple[list[tuple], bool | None]:
    """n responses as (status line, headers without date and with the worker pid masked, body),
    and (``probe``) whether the server then closed the connection: it answers PROBE, or closes
    (None without ``probe``: nothing more is sent)."""
    sock.settimeout(timeout)
    buf, out = b"", []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            head = buf[:end].split(b"\r\n")
            headers = [tuple(h.split(b": ", 1)) for h in head[1:]]
            length = int(dict(headers)[b"content-length"])
            if len(buf) >= end + 4 + length:
                norm = [
                    (k, re.sub(rb"\d+", b"PID", v) if k == b"x-posenc-worker" else v)
                    for k, v in headers
                    if k != b"date"
                ]
                out.append((head[0], norm, buf[end + 4 : end + 4 + length]))
                buf = buf[end + 4 + length :]
                continue
        assert time.monotonic() < deadline, f"only {len(out)} of {n} responses"
        chunk = sock.recv(1 << 20)
        assert chunk, f"connection closed after {len(out)} of {n} responses"
        buf += chunk
    if not probe:
        return out, None
    try:
        sock.sendall(PROBE)
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(1 << 16)
            if not chunk:
                return out, True
            buf += chunk
    except (BrokenPipeError, ConnectionResetError):
        return out, True
    assert buf.startswith(b"HTTP/1.1 200 OK"), buf[:200]  # /healthz's answer: the connection was kept
    return out, False


def exchange(server, data: bytes, n: int, split_at: int | None = None) -> tuple[list[tuple], bool]:
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        if split_at is None:
            s.sendall(data)
        else:  # the body arrives in two packets: a pause between them, on purpose
            s.sendall(data[:split_at])
            time.sleep(0.05)
            s.sendall(data[split_at:])
        return read_responses(s, n, probe=True)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """One worker each (a template learnt on a connection is the worker's), lane on and off."""
    reg = Procs(tmp_path_factory.mktemp("lane"))
    env = child_env({"POSENC_SHORTCUT": "c", "POSENC_KEEPALIVE_S": str(KEEPALIVE_S)})
    on = reg.serve(CONFIG, workers=1, args=["--lane", "on", *LIMITS], env=env)
    off = reg.serve(CONFIG, workers=1, args=["--lane", "off", *LIMITS], env=env)
    try:
        yield on, off
    finally:
        for s in (on, off):
            assert s.stop() == 0, s.output()
        reg.cleanup()


def lane_answers(server) -> int:
    t = httpx.get(server.url + "/v1/tables").json()
    return t["lane_answers"] if t["lane"] == "on" else -1


def both(servers, data: bytes, n: int, lane: int | None = None, **kw):
    """The same bytes to both servers: the same answers; ``lane``: how many the lane answered."""
    before = lane_answers(servers[0])
    got = [exchange(s, data, n, **kw) for s in servers]
    assert got[0] == got[1], (got[0], got[1])
    if lane is not None:
        assert lane_answers(servers[0]) - before == lane
    return got[0]


def test_the_lane_is_on_where_asked(servers):
    """What /v1/tables says of the lane, not how many it has answered: the servers are shared by
    this module's tests, whose order is theirs to choose."""
    on, off = servers
    assert lane_answers(on) >= 0 and lane_answers(off) == -1
    assert httpx.get(on.url + "/v1/tables").json()["lane"] == "on"
    assert httpx.get(off.url + "/v1/tables").json()["lane"] != "on"


def test_pipelined_hot_and_asgi_requests_answer_in_order(servers):
    # a configured table (a new spec's first answers are computed while its table is built, and
    # teach no template)
    sin = orjson.dumps({"d_model": 33, "layout": "concat", "positions": [3]})
    ali = orjson.dumps({"num_heads": 12, "query": [9], "key": {"start": 0, "stop": 10}})
    theta = {"rope_theta": 10000.0}  # a template no other test learns
    reqs = [
        request("/v1/rope", rope([5], **theta)),  # first sight: ASGI, seen
        request("/v1/rope", rope([6], **theta)),  # second: ASGI, learns (service/shortcut/store.py)
        # an ASGI answer computed in a thread (the engine builds its new table meanwhile) with
        # a small JSON body, so the hot request behind it finds the transport writable
        request(
            "/v1/rope",
            orjson.dumps({"head_dim": 8, "rope_theta": 77.0 + time.time() % 1, "positions": [9]}),
            accept=b"application/json",
        ),
        request("/v1/rope", rope([7, 1, 7], **theta)),  # hot, behind the slow answer
        b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n",
        request("/v1/sinusoidal", sin),
        request("/v1/sinusoidal", sin.replace(b"[3]", b"[4,0]")),
        request("/v1/rope", rope([1.5], **theta)),  # a known template, a bad list: 422
        request("/v1/alibi", ali),
        request("/v1/alibi", ali.replace(b"[9]", b"[8]")),
        request("/v1/t5-buckets", orjson.dumps({"query": [0], "key": [1, 2]})),
        request("/v1/rope", rope([2047, 0], **theta)),
    ]
    # the lane answers the two hot ropes; the sinusoidal and alibi specs are seen, then learnt
    out, closed = both(servers, b"".join(reqs), len(reqs), lane=2)
    assert [r[0] for r in out] == [b"HTTP/1.1 200 OK"] * 7 + [b"HTTP/1.1 422 Unprocessable Entity"] + [
        b"HTTP/1.1 200 OK"
    ] * 4 and not closed
    # and once more, now that every template but T5's (seen once) is known to both workers
    out2, _ = both(servers, b"".join(reqs), len(reqs), lane=8)
    assert out2 == out
    # and a third time, the T5 block's learnt too (where the engine's kernels are lent to the
    # shortcut: not with the numpy backend)
    out3, _ = both(servers, b"".join(reqs), len(reqs), lane=8 + (kernels.c_api() is not None))
    assert out3 == out


def test_connection_close_and_http10_close_after_the_answer(servers):
    body = rope([3, 4])
    for _ in range(2):  # learn (at the second answer: service/shortcut/store.py)
        both(servers, request("/v1/rope", body), 1)
    for data in (
        request("/v1/rope", body, extra=b"connection: close\r\n"),
        request("/v1/rope", body, version=b"1.0"),
    ):
        out, closed = both(servers, data, 1, lane=1)
        assert out[0][0] == b"HTTP/1.1 200 OK" and (b"connection", b"close") in out[0][1] and closed


def test_chunked_split_and_oversized_bodies_take_the_asgi_path_unchanged(servers):
    body = rope([11, 12])
    for _ in range(2):  # learn (at the second answer: service/shortcut/store.py)
        both(servers, request("/v1/rope", body), 1)
    chunked = (
        b"POST /v1/rope HTTP/1.1\r\nhost: t\r\naccept: %s\r\ntransfer-encoding: chunked\r\n\r\n"
        b"%x\r\n%s\r\n0\r\n\r\n" % (HOT, len(body), body)
    )
    out, _ = both(servers, chunked, 1, lane=0)
    assert out[0][0] == b"HTTP/1.1 200 OK"
    data = request("/v1/rope", body)
    out_split, _ = both(servers, data, 1, lane=1, split_at=len(data) - 5)  # the body in two packets
    assert out_split[0][2] == out[0][2]
    big = rope([1] * 1_400_000)  # over the 4 MiB body limit
    out, _ = both(servers, request("/v1/rope", big), 1, lane=0)
    assert out[0][0] == b"HTTP/1.1 413 Request Entity Too Large"


def test_a_client_leaving_mid_body_costs_nothing(servers):
    body = rope([21])
    for _ in range(2):  # learn (at the second answer: service/shortcut/store.py)
        both(servers, request("/v1/rope", body), 1)
    for s in servers:
        with socket.create_connection(("127.0.0.1", s.port)) as c:
            c.sendall(request("/v1/rope", body)[:-4])  # headers and part of the body
        out, closed = exchange(s, request("/v1/rope", body), 1)  # the worker answers on
        assert out[0][0] == b"HTTP/1.1 200 OK" and not closed


def test_whole_requests_of_every_shape_answer_as_asgi_does(servers):
    body = rope([30, 31])
    plain = request("/v1/rope", body)
    for _ in range(2):  # learn (at the second answer: service/shortcut/store.py)
        both(servers, plain, 1)
    health = b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n"
    shapes = [  # (bytes sent at once, responses, how many the lane answers; None: not fixed)
        (plain * 3, 3, 3),  # pipelined in one read
        (plain + health + plain, 3, 2),  # the lane, httptools, the lane
        (request("/v1/rope", body, extra=b"Connection: keep-alive\r\n"), 1, 1),
        (plain.replace(b"accept:", b"ACCEPT:").replace(b"content-length", b"Content-Length"), 1, 1),
        (plain.replace(b"accept: ", b"accept:\t "), 1, 1),  # leading whitespace is not the value's
        (request("/v1/rope", body, extra=b"x-name: caf\xc3\xa9\r\n"), 1, 1),  # obs-text: httptools
        (request("/v1/rope", body, extra=b"x-trailing: a \r\n"), 1, 1),  # a trailing space too
        (request("/v1/rope", body, accept=HOT + b"\r\naccept: " + HOT), 1, None),  # two Accept lines
        (request("/v1/rope", body, extra=b"content-length: %d\r\n" % len(body)), 1, 0),  # 400
        (request("/v1/rope", body, extra=b"connection: keep-alive, close\r\n"), 1, 1),
        (request("/v1/rope?x=1", body), 1, 1),  # a query string: httptools, then the lane
        (
            request("/v1/rope", body.replace(b"[30,31]", b"[30,2048]")),
            1,
            int(PAST_IN_C),
        ),  # past the table: in C
    ]
    for data, n, lane in shapes:
        out, _ = both(servers, data, n, lane=lane)
        assert all(r[0] in (b"HTTP/1.1 200 OK", b"HTTP/1.1 400 Bad Request") for r in out), out
    # two whole requests and the start of a third in one read, its rest in the next
    data = plain * 3
    out, closed = both(servers, data, 3, lane=3, split_at=len(data) - 20)
    assert len({r[2] for r in out}) == 1 and not closed
    for close in (b"Connection: close\r\n", b"CONNECTION: Close\r\n"):  # what follows a close is dropped
        out, closed = both(servers, request("/v1/rope", body, extra=close) + plain, 1, lane=1)
        assert (b"connection", b"close") in out[0][1] and closed


def test_alibi_decode_blocks_at_every_head_length_answer_as_asgi_does(servers):
    """A decode block (one query, keys 0..t: the stored distance table read backwards) is written
    in place at whatever alignment the HTTP head before it leaves: heads of several lengths (a
    content length of 3, 4 and 5 digits, with and without connection: close), each answered by
    the lane with the full path's bytes."""

    def block(t: int) -> bytes:
        return orjson.dumps({"num_heads": 12, "query": [t], "key": {"start": 0, "stop": t + 1}})

    for _ in range(2):  # learn (at the second answer: service/shortcut/store.py)
        both(servers, request("/v1/alibi", block(1)), 1)
    lengths = set()
    for t in (0, 3, 20, 21, 300, 301, 2046, 2047):
        for extra in (b"", b"connection: close\r\n"):
            out, _ = both(servers, request("/v1/alibi", block(t), extra=extra), 1, lane=1)
            assert out[0][0] == b"HTTP/1.1 200 OK"
            lengths.add((len(dict(out[0][1])[b"content-length"]), bool(extra)))
    assert len(lengths) == 6, lengths


def _answered_then(server, tail: bytes, within: float) -> tuple[bytes, float]:
    """One request the lane answers on a new connection, then ``tail``: what the server sends
    until it closes the connection, and after how many seconds."""
    with socket.create_connection(("127.0.0.1", server.port)) as c:
        c.sendall(request("/v1/rope", rope([40])))
        out, _ = read_responses(c, 1)
        assert out[0][0] == b"HTTP/1.1 200 OK"
        t0 = time.monotonic()
        c.sendall(tail)
        c.settimeout(within)
        reply = b""
        while chunk := c.recv(4096):
            reply += chunk
        return reply, time.monotonic() - t0


def test_timeouts_still_hold_on_a_connection_the_lane_answered(servers):
    on, off = servers
    for _ in range(2):  # learn (at the second answer: service/shortcut/store.py)
        both(servers, request("/v1/rope", rope([40])), 1, lane=None)
    before = lane_answers(on)
    # The server closes each connection itself (a recv past WAIT would raise instead): only the
    # kind of close is asserted, and that the idle one waited for the keep-alive timeout, never how
    # soon it came (a loaded machine may be slow to get there).
    for s in servers:
        reply, took = _answered_then(
            s, b"POST /v1/rope HTTP/1.1\r\nhost: t\r\n", WAIT
        )  # a head that never ends
        assert reply.startswith(b"HTTP/1.1 408"), (reply, took)
        reply, took = _answered_then(
            s, b"POST /v1/rope HTTP/1.1\r\nhost: t\r\ncontent-length: 1000\r\n\r\n{", WAIT
        )
        assert reply == b"", (reply, took)  # a body that never ends
        reply, took = _answered_then(s, b"", WAIT)  # idle: the keep-alive timeout
        assert reply == b"" and took > KEEPALIVE_S - 1, took  # (0.5 s went on reading)
    assert lane_answers(on) - before == 3


def v2_infer(model: str, positions, spec: dict | None = None) -> bytes:
    """A v2 REST binary infer (KServe's binary tensor extension), as tritonclient sends it."""
    import numpy as np

    a = np.asarray(positions, np.int64)
    params = {"binary_data_output": True, **({"spec": orjson.dumps(spec).decode()} if spec else {})}
    head = orjson.dumps(
        {
            "parameters": params,
            "inputs": [
                {
                    "name": "positions",
                    "datatype": "INT64",
                    "shape": [a.size],
                    "parameters": {"binary_data_size": a.nbytes},
                }
            ],
        }
    )
    body = head + a.tobytes()
    return (
        b"POST /v2/models/%s/infer HTTP/1.1\r\nhost: t\r\ncontent-type: application/octet-stream\r\n"
        b"inference-header-content-length: %d\r\ncontent-length: %d\r\n\r\n%s"
        % (model.encode(), len(head), len(body), body)
    )


def test_v2_rest_binary_infer_takes_the_lane_once_learnt_and_answers_the_same_bytes(servers):
    spec = {"head_dim": 64, "rope_theta": 10000.0, "layout": "interleaved"}
    for p in ([3, 0], [4, 1]):  # the full path answers, and learns (a key is its JSON header)
        both(servers, v2_infer("rope", p, spec), 1)
    out, _ = both(servers, v2_infer("rope", [7, 7], spec), 1, lane=1)
    assert out[0][0] == b"HTTP/1.1 200 OK"
    # a table model (CONFIG's first table, "rope-0"), pipelined with /v1: in order, the learnt
    # ones in the lane, a position past the table too (computed in C)
    for p in ([3, 5], [4, 1]):
        both(servers, v2_infer("rope-0", p), 1)
    for p in ([3], [4]):  # /v1's too, here: this module's other tests may run in another process
        both(servers, request("/v1/rope", rope(p)), 1)
    reqs = [
        v2_infer("rope", [1, 2], spec),
        request("/v1/rope", rope([2])),
        v2_infer("rope-0", [2047, 9]),
        v2_infer("rope", [2048, 0], spec),
    ]
    out, closed = both(servers, b"".join(reqs), len(reqs))
    assert [r[0] for r in out] == [b"HTTP/1.1 200 OK"] * 4 and not closed
    out2, _ = both(servers, b"".join(reqs), len(reqs), lane=3 + PAST_IN_C)
    assert out2 == out


def test_json_answers_in_the_lane_are_asgis_bytes(servers):
    """A learnt rows spec asked in JSON (by Accept, or with none): once the full path has answered
    that Accept, the lane answers it, byte for byte (and head for head) what ASGI writes."""
    body = rope([40, 41], rope_theta=20000.0)  # a template no other test learns

    # learn the template: its table is built on first sight, and until it is published the full
    # path computes the rows and teaches nothing (a slower backend is seen there longer)
    def answered_by_the_lane():
        before = lane_answers(servers[0])
        both(servers, request("/v1/rope", body), 1)
        return lane_answers(servers[0]) > before

    wait_for(answered_by_the_lane, 60, 0.05, "the lane answering the rope_theta 20000 template")
    for accept in (b"application/json", b"*/*"):
        both(servers, request("/v1/rope", body, accept=accept), 1)  # the negotiator's choice, seen once
        later = request("/v1/rope", rope([7, 2047, 0], rope_theta=20000.0), accept=accept)
        out, _ = both(servers, later * 2, 2, lane=2)
        assert out[0][0] == b"HTTP/1.1 200 OK" and (b"content-type", b"application/json") in out[0][1]
        assert out[0][2].startswith(b'{"cos":[[')
    bare = request("/v1/rope", body).replace(b"accept: " + HOT + b"\r\n", b"")
    both(servers, bare, 1)  # no Accept: JSON, seen once
    out, _ = both(servers, bare, 1, lane=1)
    assert out[0][2].startswith(b'{"cos":[[')
    past = request(
        "/v1/rope", rope([1 << 20], rope_theta=20000.0), accept=b"application/json"
    )  # past any table
    both(servers, past, 1, lane=0)  # JSON of rows past the table: ASGI's
