"""The gRPC lane (service/grpclane) against grpcio alone: two ``posenc serve`` of one config and
one bearer token, one with the lane (``--grpc-lane auto``) and one without (``off``), sent the same
calls by the real tritonclient and grpcio clients and by raw HTTP/2 frames (tests/integration/
h2_client.py). Every answer's bytes, every status and every message must be the same on both;
what only the lane has (it answers learnt calls itself, resets, a client that stops reading,
GOAWAY at SIGTERM) is checked on it alone. The rest of the KServe suite runs on the lane too
(it is the default where it is built)."""

from __future__ import annotations

import gzip
import json
import queue
import re
import signal
import threading
import zlib

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

from posenc.service import grpclane
from posenc.service.v2.proto import grpc_service_pb2 as pb
from tests.integration.h2_client import H2, frame
from tests.integration.kserve_cases import V2_CONFIG, infer, split, wait_grpc_ready
from tests.procs import Procs, child_env, wait_for
from tests.service_cases import REQUEST_IDS, REQUESTS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        grpclane._h2 is None, reason="service/grpclane/_h2 is not built (no libnghttp2 headers)"
    ),
]
TOKEN = "lane-test-token_0123456789"
AUTH = {"authorization": f"Bearer {TOKEN}"}
MAX_BODY = 1 << 20  # a small request limit, so that a message over it is cheap to send
INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
LEARNT: list = []  # the families asked three times each of the lane's server (learnt: answered by the lane)
STREAMED: list = []  # the ModelStreamInfer streams sent to the lane's server (its own, by the log at its end)
LANE_LINE = re.compile(
    r"grpc lane: (\d+) calls answered by the lane, (\d+) streams of its own, (\d+) relayed"
)


def _serve(reg: Procs, lane: str):
    env = child_env({"POSENC_AUTH_TOKEN": TOKEN, "POSENC_MAX_BODY_BYTES": str(MAX_BODY)})
    s = reg.serve(
        V2_CONFIG,
        workers=1,
        grpc=True,
        env=env,
        args=["--grpc-lane", lane, "--grpc-workers", "1", "--log-level", "info"],
    )
    try:
        wait_grpc_ready(s, metadata=tuple(AUTH.items()))
    except BaseException:
        s.stop()
        raise
    return s


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    import httpx

    reg = Procs(tmp_path_factory.mktemp("grpc-lane"))
    servers = []
    try:
        servers.append(_serve(reg, "auto"))
        servers.append(_serve(reg, "off"))
        shortcut = httpx.get(servers[0].url + "/v1/tables", headers=AUTH, timeout=10).json()["shortcut"]
        yield servers
    finally:
        for s in servers:
            assert s.stop() == 0, s.output()
        reg.cleanup()
    # the lane said, at its end, what it answered itself (learnt calls: only where the shortcut
    # runs, the simd backend; without it every ModelInfer is grpcio's) and its own streams;
    # grpcio alone says nothing of a lane
    on, off = servers
    counts = LANE_LINE.findall(on.output())
    answered = int(counts[-1][0]) if counts else -1
    assert answered == 0 if shortcut != "c" else (answered > 0 or not LEARNT), on.output()[-3000:]
    assert int(counts[-1][1]) >= len(STREAMED), on.output()[-3000:]
    assert not LANE_LINE.search(off.output())


@pytest.fixture(scope="module")
def clients(pair):
    cs = [grpcclient.InferenceServerClient(s.grpc_url) for s in pair]
    yield cs
    for c in cs:
        c.close()


def _both(clients, fn):
    """fn(client) on the lane's server and on grpcio's: (answer, or (status, message) of its error)."""
    out = []
    for c in clients:
        try:
            out.append(fn(c))
        except InferenceServerException as e:
            out.append((e.status(), e.message()))
    return out


def _bytes(r) -> bytes:
    return r.get_response().SerializeToString()


def test_the_servers_say_which_runs_the_lane(pair):
    import httpx

    on, off = (httpx.get(s.url + "/v1/tables", headers=AUTH, timeout=10).json()["grpc_lane"] for s in pair)
    assert on.startswith("on (libnghttp2 ") and off.startswith("off (grpc_lane off)"), (on, off)


@pytest.mark.parametrize("family, body", REQUESTS, ids=REQUEST_IDS)
def test_every_family_answers_the_same_bytes(clients, family, body):
    """Three times each: the full path, its learning, then the template (the lane's own answer)."""
    LEARNT.append(family)
    spec, arrays = split(family, body)
    for _ in range(3):

        def call(c):
            return _bytes(infer_auth(c, family, arrays, spec))

        on, off = _both(clients, call)
        assert on == off


def infer_auth(c, family, arrays, spec, **kw):
    params = {"spec": json.dumps(spec)}
    return c.infer(family, _inputs(arrays), parameters=params, headers=AUTH, **kw)


def _inputs(arrays):
    out = []
    for name, a in arrays.items():
        i = grpcclient.InferInput(name, list(a.shape), "INT64")
        i.set_data_from_numpy(a.astype(np.int64))
        out.append(i)
    return out


@pytest.mark.parametrize("n", [6000, 40000], ids=["inline-3MB", "threaded-20MB"])
def test_large_answers_cross_flow_control_whole(clients, n):
    """An answer answered inline (under 8 MiB) and one filled in a thread, many windows each."""
    arrays = {"positions": np.random.default_rng(n).integers(0, 200_000, n)}
    for _ in range(3):
        on, off = _both(clients, lambda c: _bytes(infer_auth(c, "rope", arrays, {"head_dim": 128})))
        assert on == off and len(on) > n * 128 * 4


BAD = {
    "unknown model": lambda c: c.infer("nope", _inputs({"positions": np.arange(3)}), headers=AUTH),
    "bad spec": lambda c: infer_auth(c, "rope", {"positions": np.arange(3)}, {"head_dim": -4}),
    "unknown spec field": lambda c: infer_auth(
        c, "rope", {"positions": np.arange(3)}, {"head_dim": 8, "x": 1}
    ),
    "float positions": lambda c: c.infer(
        "rope", [_float_input()], parameters={"spec": '{"head_dim": 8}'}, headers=AUTH
    ),
    "no token": lambda c: infer(grpcclient, c, "rope", {"positions": np.arange(3)}, {"head_dim": 8}),
    "wrong token": lambda c: c.infer(
        "rope", _inputs({"positions": np.arange(3)}), headers={"authorization": "Bearer nope"}
    ),
    "answer over the response limit": lambda c: infer_auth(
        c, "rope", {"positions": np.arange(100_000)}, {"head_dim": 4096}
    ),
    "over the request limit": lambda c: infer_auth(
        c, "rope", {"positions": np.arange(MAX_BODY)}, {"head_dim": 8}
    ),
}


def _float_input():
    i = grpcclient.InferInput("positions", [2], "FP32")
    i.set_data_from_numpy(np.array([1.0, 2.0], np.float32))
    return i


@pytest.mark.parametrize("what", BAD)
def test_every_refusal_is_the_same(clients, what):
    for _ in range(3):  # before and after the key could be learnt
        on, off = _both(clients, BAD[what])
        assert on == off and isinstance(on, tuple), (on, off)


def test_metadata_health_and_shared_memory_are_the_same(clients, pair):
    calls = {
        "server": lambda c: c.get_server_metadata(headers=AUTH).SerializeToString(),
        "model": lambda c: c.get_model_metadata("rope", headers=AUTH).SerializeToString(),
        "named": lambda c: c.get_model_metadata("llama-3.1-8b", headers=AUTH).SerializeToString(),
        "ready": lambda c: (c.is_server_live(headers=AUTH), c.is_model_ready("rope", headers=AUTH)),
        "shm": lambda c: c.get_system_shared_memory_status(headers=AUTH).SerializeToString(),
        "shm refused": lambda c: c.register_system_shared_memory(
            "r", "/no-such-posenc-region", 64, headers=AUTH
        ),
    }
    for name, fn in calls.items():
        on, off = _both(clients, fn)
        assert on == off, name
    for s in pair:  # the health service: open, no token
        with grpc.insecure_channel(s.grpc_url) as ch:
            r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
            assert r.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize(
    "path",
    ["/inference.GRPCInferenceService/RepositoryIndex", "/no.Such/Method", "/grpc.health.v1.Health/Nope"],
)
def test_unknown_methods_are_refused_alike(pair, path):
    out = []
    for s in pair:
        with grpc.insecure_channel(s.grpc_url) as ch:
            try:
                ch.unary_unary(path)(b"", timeout=10, metadata=tuple(AUTH.items()))
                out.append("answered")
            except grpc.RpcError as e:
                out.append((e.code(), e.details()))
    assert out[0] == out[1] and out[0] != "answered", out


def test_a_stream_answers_the_same_messages_in_order(pair):
    """ModelStreamInfer (relayed whole): every message's answer, a refused one's error_message among
    them, in order."""
    got = []
    STREAMED.append(1)
    for s in pair:
        c, q = grpcclient.InferenceServerClient(s.grpc_url), queue.Queue()
        c.start_stream(callback=lambda result, error, q=q: q.put((result, error)), headers=AUTH)
        for k in range(6):
            spec = '{"head_dim": 16}' if k != 3 else '{"head_dim": -1}'
            c.async_stream_infer(
                "rope", _inputs({"positions": np.arange(k, k + 4)}), parameters={"spec": spec}
            )
        answers = [q.get(timeout=30) for _ in range(6)]
        c.stop_stream()
        c.close()
        got.append([_bytes(r) if e is None else str(e) for r, e in answers])
    assert got[0] == got[1] and sum(isinstance(a, str) for a in got[0]) == 1, got


def test_many_connections_and_streams_at_once(clients, pair):
    """4 connections x 4 threads x 25 calls of random positions on the lane, each the same bytes as
    grpcio's answer to the same call."""
    rng = np.random.default_rng(7)
    work = [rng.integers(0, 300_000, 5) for _ in range(400)]
    lane = [grpcclient.InferenceServerClient(pair[0].grpc_url) for _ in range(4)]
    got: dict[int, bytes] = {}

    def run(k):
        for i in range(k, len(work), 16):
            got[i] = _bytes(infer_auth(lane[k % 4], "rope", {"positions": work[i]}, {"head_dim": 64}))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for c in lane:
        c.close()
    assert len(got) == len(work)
    for i in range(0, len(work), 7):
        assert got[i] == _bytes(infer_auth(clients[1], "rope", {"positions": work[i]}, {"head_dim": 64}))


def _message(positions, spec='{"head_dim": 64}') -> bytes:
    r = pb.ModelInferRequest(model_name="rope")
    r.inputs.add(name="positions", datatype="INT64", shape=[len(positions)])
    r.raw_input_contents.append(np.asarray(positions, np.int64).tobytes())
    r.parameters["spec"].string_param = spec
    return r.SerializeToString()


AUTH_H2 = ((b"authorization", f"Bearer {TOKEN}".encode()),)


def _port(s) -> int:
    return int(s.grpc_url.rsplit(":", 1)[1])


def pump_until(h: H2, cond, what: str, seen=None, timeout: float = 60.0):
    """Read what the server sends on ``h`` until ``cond()`` holds: its value (tests.waits' deadline,
    naming ``what``; the connection's closing ends the wait at once)."""

    def step():
        if cond():
            return cond()
        if not h.pump(0.05):
            raise AssertionError(f"the connection closed while waiting for {what}: {h.streams}")
        return cond()

    return wait_for(step, timeout, 0, what, seen=seen or (lambda: h.streams))


def shortcut_answers(server, route: str = "grpc ModelInfer rope") -> float:
    """Answers of ``route`` the C template made (posenc_answer_path_total, path "shortcut"): on the
    gRPC port, the lane's own answers of learnt calls."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(server.url + "/metrics", headers=AUTH, timeout=10).text
    return sum(
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "posenc_answer_path_total" and s.labels == {"route": route, "path": "shortcut"}
    )


def test_deadlines_and_resets(pair):
    """A stream whose grpc-timeout passes while it waits for its next message ends with
    DEADLINE_EXCEEDED on both (on the lane, its own stream's timer); a deadline already past when a
    quick call arrives is grpcio's to judge, OK or DEADLINE_EXCEEDED (grpcio alone answers either,
    by a race of its own); a stream the client resets mid-call is dropped and the connection goes
    on serving."""
    ended = []
    for s in pair:
        with H2(_port(s)) as h:
            waits = h.call(STREAM, _message([1, 2, 3]), (*AUTH_H2, (b"grpc-timeout", b"300m")), end=False)
            ended.append(h.status(waits))
            assert len(h.messages(waits)) == 1, h.streams[waits]
            sid = h.call(
                "/inference.GRPCInferenceService/ServerMetadata", b"", (*AUTH_H2, (b"grpc-timeout", b"1n"))
            )
            assert h.status(sid) in ((0, b""), (4, b"Deadline Exceeded"))
            live = h.call(STREAM, _message([1, 2, 3]), AUTH_H2, end=False)
            pump_until(h, lambda: h.messages(live), "the open stream's first answer", lambda: h.streams[live])
            h.reset(live)
            sid = h.call(INFER, _message([5, 6]), AUTH_H2)
            assert h.status(sid) == (0, b"") and len(h.messages(sid)) == 1
    assert ended == [(4, b"Deadline Exceeded")] * 2, ended


def _gzip(m: bytes) -> bytes:
    return gzip.compress(m, mtime=0)


# Requests grpcio judges before (or while) its handler runs, each sent as raw HTTP/2 frames to both
# servers: (extra headers, replaced request headers, the message's gRPC frame from its bytes)
PLAIN = frame


def FLAGGED(data: bytes) -> bytes:  # noqa: N802 (beside PLAIN)
    return b"\1" + len(data).to_bytes(4, "big") + data


EDGES = {
    "plain": ((), {}, PLAIN),
    "timeout 99999999H": (((b"grpc-timeout", b"99999999H"),), {}, PLAIN),
    "timeout past grpcio's cap": (((b"grpc-timeout", b"1000000001S"),), {}, PLAIN),
    "timeout with inner spaces": (((b"grpc-timeout", b"5 S"),), {}, PLAIN),
    "timeout abc": (((b"grpc-timeout", b"abc"),), {}, PLAIN),
    "timeout -1S": (((b"grpc-timeout", b"-1S"),), {}, PLAIN),
    "timeout zero": (((b"grpc-timeout", b"0S"),), {}, PLAIN),
    "two timeouts, one bad": (((b"grpc-timeout", b"5S"), (b"grpc-timeout", b"1x")), {}, PLAIN),
    "metadata bytes 0x80-0xff": (((b"x-custom", b"a\x80\xffz"),), {}, PLAIN),
    "-bin bad base64": (((b"x-custom-bin", b"!!!"),), {}, PLAIN),
    "-bin one char": (((b"x-custom-bin", b"Y"),), {}, PLAIN),
    "-bin unused bits set": (((b"x-custom-bin", b"YR=="),), {}, PLAIN),
    "-bin unpadded": (((b"x-custom-bin", b"YQ"),), {}, PLAIN),
    "the first bad header wins": (((b"x-custom-bin", b"!"), (b"grpc-timeout", b"abc")), {}, PLAIN),
    "illegal key": (((b"x!y", b"v"),), {}, PLAIN),
    "grpc-encoding snappy": (((b"grpc-encoding", b"snappy"),), {}, PLAIN),
    ":method GET": ((), {b":method": b"GET"}, PLAIN),
    ":method PUT": ((), {b":method": b"PUT"}, PLAIN),
    "no te": ((), {b"te": None}, PLAIN),
    "no content-type": ((), {b"content-type": None}, PLAIN),
    "gzip": (((b"grpc-encoding", b"gzip"),), {}, lambda m: FLAGGED(_gzip(m))),
    "deflate": (((b"grpc-encoding", b"deflate"),), {}, lambda m: FLAGGED(zlib.compress(m))),
    "gzip, not gzip": (((b"grpc-encoding", b"gzip"),), {}, lambda m: FLAGGED(b"not gzip" + m)),
    "deflate, not zlib": (((b"grpc-encoding", b"deflate"),), {}, lambda m: FLAGGED(b"not zlib" + m)),
    "gzip cut short": (((b"grpc-encoding", b"gzip"),), {}, lambda m: FLAGGED(_gzip(m)[:-6])),
    "gzip and more": (((b"grpc-encoding", b"gzip"),), {}, lambda m: FLAGGED(_gzip(m) + b"xx")),
    "gzip over the limit": (
        ((b"grpc-encoding", b"gzip"),),
        {},
        lambda m: FLAGGED(_gzip(bytes(2 * MAX_BODY))),
    ),
    "flagged, no grpc-encoding": ((), {}, lambda m: FLAGGED(_gzip(m))),
}
# a learnt ModelInfer (the lane's own answer where the shortcut runs), a relayed call, the lane's own stream
EDGE_CALLS = {
    "ModelInfer": (INFER, _message([1, 2, 3])),
    "relayed": (
        "/inference.GRPCInferenceService/ModelMetadata",
        pb.ModelMetadataRequest(name="rope").SerializeToString(),
    ),
    "ModelStreamInfer": (STREAM, _message([1, 2, 3])),
}


def _edge(port: int, path: str, message: bytes, edge: str) -> dict:
    """The answer as the client sees it: headers, messages, trailers (those of a Trailers-Only
    answer too), RST_STREAM's code."""
    extra, replaced, body = EDGES[edge]
    base = {
        b":method": b"POST",
        b":scheme": b"http",
        b":path": path.encode(),
        b":authority": b"127.0.0.1",
        b"content-type": b"application/grpc",
        b"te": b"trailers",
    }
    base.update(replaced)
    headers = [(k, v) for k, v in base.items() if v is not None] + [*AUTH_H2, *extra]
    with H2(port) as h:
        h.c.config.validate_outbound_headers = h.c.config.normalize_outbound_headers = False
        sid = h.c.get_next_available_stream_id()
        h.c.send_headers(sid, headers)
        h.streams[sid] = {"headers": None, "data": b"", "trailers": None, "ended": False, "reset": None}
        h.c.send_data(sid, body(message), end_stream=True)
        h.flush()
        return _seen(h, sid)


def _seen(h: H2, sid: int, timeout: float = 30.0) -> dict:
    """Stream ``sid``'s answer as its client sees it once it ends: headers (but ``date``),
    messages, trailers (those of a Trailers-Only answer too), RST_STREAM's code."""
    st = h.wait(sid, timeout)
    return {
        "headers": st["headers"] and {k: v for k, v in st["headers"].items() if k != b"date"},
        "messages": h.messages(sid),
        "trailers": st["trailers"],
        "reset": st["reset"],
    }


@pytest.mark.parametrize("edge", EDGES)
def test_edges_grpcio_judges_are_answered_as_grpcio_answers(pair, edge):
    """Each edge to both servers (raw HTTP/2: HTTP status, grpc-status, grpc-message, which
    headers and trailers, RST_STREAM's code): a learnt ModelInfer, a relayed call and a
    ModelStreamInfer get the same answer from the lane as from grpcio alone."""
    for _ in range(6):  # the ModelInfer's key learnt (where the shortcut runs) before its edges
        grpc_call_raw(pair[0], INFER, EDGE_CALLS["ModelInfer"][1])
    for name, (path, message) in EDGE_CALLS.items():
        on, off = (_edge(_port(s), path, message, edge) for s in pair)
        assert on == off, (name, on, off)


def test_bad_compressed_messages_leave_no_traceback(pair):
    """A compressed message that is not gzip is the client's fault, answered with grpc-status:
    the lane logs no traceback for it (one per stream was a log flood anyone could cause)."""
    for name, (path, message) in EDGE_CALLS.items():
        for _ in range(3):
            got = _edge(_port(pair[0]), path, message, "gzip, not gzip")
            assert got["trailers"][b"grpc-status"] == b"13", (name, got)
    out = pair[0].stdout() + pair[0].stderr()
    assert "zlib" not in out and not re.search(
        r"grpc lane: (a \w+ event of stream \d+|relaying .*) failed", out
    ), out[-3000:]


def _unread(port: int, path: str, message: bytes) -> dict:
    """The answer to a call with a 300 ms ``grpc-timeout`` from a client that opens no window (no
    DATA can reach it), as _seen gives it; then a call on the same connection, its window opened,
    is answered whole."""
    with H2(port, window=0) as h:
        h.read_data = False
        got = _seen(h, h.call(path, message, (*AUTH_H2, (b"grpc-timeout", b"300m"))))
        h.read_data = True
        later = h.call(INFER, _message([7]), AUTH_H2)
        h.c.increment_flow_control_window(1 << 20, later)
        h.c.increment_flow_control_window(1 << 20)
        h.flush()
        assert h.status(later) == (0, b"") and len(h.messages(later)) == 1, h.streams[later]
        return got


def test_an_answer_unread_at_its_deadline_is_ended_as_grpcio_ends_it(pair):
    """grpcio ends a call at its deadline whatever it holds: an answer its client has not read is
    dropped and the trailers (DEADLINE_EXCEEDED) go instead. A learnt ModelInfer (the lane's own
    answer), a relayed call and the lane's own stream, each to a client that opens no window, get
    the same from the lane as from grpcio alone; the connection goes on."""
    for _ in range(6):  # the ModelInfer's key learnt (where the shortcut runs)
        grpc_call_raw(pair[0], INFER, EDGE_CALLS["ModelInfer"][1])
    for name, (path, message) in EDGE_CALLS.items():
        on, off = (_unread(_port(s), path, message) for s in pair)
        assert off["trailers"] == {b"grpc-status": b"4", b"grpc-message": b"Deadline Exceeded"}, (name, off)
        assert on == off, (name, on, off)


def test_a_client_that_stops_reading_holds_up_no_one(pair, clients):
    """A connection that never acknowledges DATA (64 KiB windows) asks for 30 learnt answers of 6 MB:
    the lane sends each as far as the windows allow, keeps at most the response limit (64 MiB) of
    its own answers waiting and refuses the calls past it as busy, and serves another client
    meanwhile. Where the shortcut is off (the numpy backend) every call is grpcio's, relayed: they
    all wait, as they do on grpcio alone (grpcio bounds its calls while they run, not after)."""
    import httpx

    shortcut = httpx.get(pair[0].url + "/v1/tables", headers=AUTH, timeout=10).json()["shortcut"]
    big = _message(np.arange(6000), '{"head_dim": 128}')
    size = len(grpc_call_raw(pair[0], INFER, big))
    fits = (64 << 20) // size  # answers within the limit; the one that crosses it is taken too
    if shortcut == "c":  # learnt at the full path's second answer once its table is mapped
        before = shortcut_answers(pair[0])

        def learnt():
            grpc_call_raw(pair[0], INFER, big)
            return shortcut_answers(pair[0]) >= before + 2

        wait_for(learnt, 60, 0.05, "the big call answered by the lane's template twice")
    with H2(_port(pair[0]), window=65535) as h:
        h.read_data = False
        sids = [h.call(INFER, big, AUTH_H2) for _ in range(30)]

        def judged():  # answered (its HEADERS: not flow-controlled) or refused (ended)
            return sum(h.streams[sid]["headers"] is not None or h.streams[sid]["ended"] for sid in sids)

        if shortcut == "c":  # the lane answers each call at once: its answers, then every call refused
            pump_until(h, lambda: judged() == len(sids), "every call answered or refused", judged)
        else:  # relayed: grpcio's answers of the calls admitted in the session, the rest wait for room
            pump_until(h, lambda: judged() >= fits, f"{fits} relayed answers in the session", judged)
        for _ in range(20):
            assert _bytes(infer_auth(clients[0], "rope", {"positions": np.arange(4)}, {"head_dim": 64}))
        busy = [sid for sid in sids if h.streams[sid]["ended"]]
        waiting = [sid for sid in sids if not h.streams[sid]["ended"]]
        if shortcut == "c":
            assert fits <= len(waiting) <= fits + 2 and busy, (size, len(waiting), len(busy))
        else:
            assert len(waiting) == 30, (size, len(waiting), len(busy))
        for sid in busy:
            code, message = h.status(sid)
            assert code == 8 and message.startswith(b"server busy: ") and b"MAX_RESPONSE_BYTES" in message
        assert sum(len(h.streams[sid]["data"]) for sid in sids) <= 65535 * 2


def grpc_call_raw(server, path: str, message: bytes) -> bytes:
    with grpc.insecure_channel(server.grpc_url, options=[("grpc.max_receive_message_length", -1)]) as ch:
        return ch.unary_unary(path)(message, timeout=30, metadata=tuple(AUTH.items()))


def test_sigterm_sends_goaway_and_finishes_the_stream_in_flight(tmp_path):
    """At SIGTERM the lane sends GOAWAY (an idle connection sees it: no new streams) and lets a
    stream already open finish: grpcio's client sends its last message after the signal and gets
    both answers and OK."""
    reg = Procs(tmp_path)
    s = reg.serve(V2_CONFIG, workers=1, grpc=True, args=["--grpc-workers", "1"])
    wait_grpc_ready(s)
    idle = None
    try:
        idle = H2(_port(s))
        go, first = threading.Event(), threading.Event()

        def requests():
            yield _message([1, 2])
            first.wait(30)
            go.wait(30)
            yield _message([3, 4])

        with grpc.insecure_channel(s.grpc_url) as ch:
            call = ch.stream_stream(STREAM)(requests(), timeout=60)
            answers = [next(call)]
            first.set()
            s.signal(signal.SIGTERM)
            pump_until(idle, lambda: idle.terminated is not None, "GOAWAY on the idle connection")
            assert idle.terminated.error_code == 0, idle.terminated
            go.set()
            answers += list(call)
            assert call.code() == grpc.StatusCode.OK and len(answers) == 2
        assert s.wait(60) == 0, s.logs()
    finally:
        if idle is not None:
            idle.close()
        s.stop()
        reg.cleanup()


def test_without_the_lane_grpcio_serves_and_says_why(tmp_path):
    """A gRPC process whose lane cannot load (its library gone: a finder in the process's
    sitecustomize refuses the module, as the loader refuses a missing libnghttp2) serves every
    call on grpcio, and /v1/tables and the log say why."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\n"
        "class Refuse:\n"
        "    def create_module(self, spec):\n"
        "        raise ImportError('libnghttp2.so.14: cannot open shared object file')\n"
        "    def exec_module(self, module):\n"
        "        pass\n"
        "class NoLane:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name != 'posenc.service.grpclane._h2':\n"
        "            return None\n"
        "        for f in sys.meta_path:\n"
        "            spec = f is not self and getattr(f, 'find_spec', None) and f.find_spec(name, path, target)\n"
        "            if spec:\n"
        "                spec.loader = Refuse()\n"
        "                return spec\n"
        "sys.meta_path.insert(0, NoLane())\n"
    )
    reg = Procs(tmp_path)
    s = reg.serve(
        V2_CONFIG,
        workers=1,
        grpc=True,
        env=child_env({"PYTHONPATH": str(site)}),
        args=["--grpc-workers", "1", "--log-level", "info"],
    )
    try:
        wait_grpc_ready(s)
        c = grpcclient.InferenceServerClient(s.grpc_url)
        for _ in range(3):
            r = c.infer("rope", _inputs({"positions": np.arange(4)}), parameters={"spec": '{"head_dim": 8}'})
            assert r.as_numpy("cos").shape == (4, 8)
        c.close()
        import httpx

        why = httpx.get(s.url + "/v1/tables", timeout=10).json()["grpc_lane"]
        assert why.startswith("built but cannot load") and why.endswith("grpcio serves the port"), why
    finally:
        assert s.stop() == 0, s.output()
        reg.cleanup()
    assert f"the gRPC lane is {why}" in s.output() and not LANE_LINE.search(s.output())
