"""``posenc_answer_path_total{route, path}`` of a real ``posenc serve`` (one HTTP worker, the lane
on, its gRPC server), scraped and parsed with prometheus_client's text parser: on each route that
answers (/v1/<family>, v2 REST infer, gRPC ModelInfer and ModelStreamInfer), requests known to take
each way are counted under that way, exactly, and each route's paths add up to its
``posenc_request_duration_seconds_count``. The ways (service/metrics/layout.py ``PATHS``):

- python: the first answers of a spec (the full path answers, the shortcut learns), refusals;
- c: a learnt request that arrives whole in one write on an idle connection (the lane's one C call);
- shortcut: a learnt request the lane admits at its headers after httptools read them (more header
  lines than the C lane reads), one a header keeps off the lane (the raw ASGI front answers it from
  its template), and the gRPC server's template answers.

Counts reach a scrape when their process writes its file (every FLUSH_S, service/metrics/counters.py):
each check polls the scrape until the route's answers are all counted, then, once every live process
has written its file again (``wait_counts_written``), once more, so a count that lands late (or
twice) fails the test."""

from __future__ import annotations

import os
import queue
import socket
import time

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from posenc.service.metrics.counters import FLUSH_S
from posenc.service.metrics.layout import PATHS, alive, prefix
from posenc.service.shortcut import templates as replay
from tests.integration.kserve_cases import serving_grpc
from tests.integration.test_lane import lane_answers, read_responses, request, rope, v2_infer
from tests.procs import child_env, wait_for
from tests.service_cases import CONFIG
from tests.shm import SHM_DIR

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not replay.NATIVE, reason="the C paths need the C shortcut (service._hot)"),
]

PAD = b"".join(b"x-pad-%d: 1\r\n" % i for i in range(49))  # more lines than the C lane reads: httptools does
OFF = b"proxy-connection: keep-alive\r\n"  # service/core/settings.py LANE_OFF_HEADERS: off the lane, to ASGI


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with serving_grpc(
        tmp_path_factory,
        "metrics-paths",
        CONFIG,
        workers=1,
        args=["--lane", "on"],
        env=child_env({"POSENC_SHORTCUT": "c"}),
    ) as s:
        yield s


def scrape(srv) -> tuple[dict, dict]:
    """({route: {path: answers}}, {route: requests of every status})."""
    text = httpx.get(srv.url + "/metrics", timeout=10).text
    ways, counts = {}, {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            route = s.labels.get("route")
            if s.name == "posenc_answer_path_total":
                ways.setdefault(route, dict.fromkeys(PATHS, 0.0))[s.labels["path"]] = s.value
            elif s.name == "posenc_request_duration_seconds_count":
                counts[route] = counts.get(route, 0.0) + s.value
    return ways, counts


def wait_counts_written(namespace: str, shm_dir: str = SHM_DIR) -> None:
    """Wait until every live process of the namespace (HTTP workers, the gRPC server) has written its
    metrics file after this call began: then a scrape holds every count made before it. Each file
    ``{ns}.metrics.{pid}`` is written every FLUSH_S; its mtime (the kernel's coarse clock, never ahead
    of time.time_ns()) past the call's start means a write after it."""
    since = time.time_ns()
    pre = prefix(namespace)

    def behind() -> dict:
        out = {}
        for name in os.listdir(shm_dir):
            pid = name[len(pre) :]
            if name.startswith(pre) and pid.isdigit() and alive(int(pid)):
                try:
                    mtime = os.stat(os.path.join(shm_dir, name)).st_mtime_ns
                except FileNotFoundError:  # retired meanwhile: its counts are in the total
                    continue
                if mtime <= since:
                    out[name] = mtime - since
            # (the folded total, {ns}.metrics.total, changes only when a process is gone)
        return out

    wait_for(
        lambda: not behind(),
        60,
        FLUSH_S / 4,
        f"every live process of {namespace} to write its metrics file again",
        seen=behind,
    )


class Counted:
    """The answers of ``route`` since the last check, by path, once they have all reached a scrape."""

    def __init__(self, srv, route: str):
        self.srv, self.route = srv, route
        self.seen = scrape(srv)[0].get(route, dict.fromkeys(PATHS, 0.0))

    def check(self, **want: int) -> None:
        want = {p: want.get(p, 0) for p in PATHS}
        n = sum(self.seen.values()) + sum(want.values())

        def settled():
            ways, counts = scrape(self.srv)
            got = ways.get(self.route, {})
            return sum(got.values()) >= n and (ways, counts)

        wait_for(settled, 60, FLUSH_S, f"{n} answers of {self.route} counted")
        wait_counts_written(self.srv.namespace)  # none late: every process has written its counts since
        ways, counts = scrape(self.srv)
        got = {p: ways[self.route][p] - self.seen[p] for p in PATHS}
        assert got == want, (self.route, got, want)
        assert sum(ways[self.route].values()) == counts[self.route], (self.route, ways[self.route], counts)
        self.seen = ways[self.route]


def send(srv, data: bytes) -> bytes:
    """One request on a fresh connection, its bytes in one write; its status line."""
    with socket.create_connection(("127.0.0.1", srv.port)) as s:
        s.sendall(data)
        ((status, _headers, body),) = read_responses(s, 1)[0]
    return status + b" " + body[:200] if not status.endswith(b"200 OK") else status


OK = b"HTTP/1.1 200 OK"


def test_v1_answers_count_under_the_path_that_made_them(srv):
    route = Counted(srv, "/v1/rope")
    spec = {}  # CONFIG's stored RoPE table (a spec without one is computed: no template until it is built)
    for p in ([1], [4]):  # the full path answers; a key is learnt the second time
        assert send(srv, request("/v1/rope", rope(p, **spec))) == OK
    route.check(python=2)
    for p in ([2], [2047, 3], [0]):
        assert send(srv, request("/v1/rope", rope(p, **spec))) == OK
    route.check(c=3)
    lane = lane_answers(srv)
    for p in ([5], [6, 7]):  # httptools reads the head, the lane answers: the C template, not one C call
        assert send(srv, request("/v1/rope", rope(p, **spec), extra=PAD)) == OK
    route.check(shortcut=2)
    assert lane_answers(srv) - lane == 2
    for p in ([8], [9, 10]):  # off the lane: the raw ASGI front's C template
        assert send(srv, request("/v1/rope", rope(p, **spec), extra=OFF)) == OK
    route.check(shortcut=2)
    assert lane_answers(srv) - lane == 2
    assert send(srv, request("/v1/rope", rope([1], head_dim=1))).startswith(b"HTTP/1.1 422")
    route.check(python=1)


def test_v2_rest_answers_count_under_the_path_that_made_them(srv):
    route = Counted(srv, "/v2/models/rope/infer")
    spec = {"head_dim": 64}
    for p in ([3, 0], [4, 1]):  # the full path answers; a key is learnt the second time
        assert send(srv, v2_infer("rope", p, spec)) == OK
    route.check(python=2)
    for p in ([7, 7], [2047, 0], [1, 2]):
        assert send(srv, v2_infer("rope", p, spec)) == OK
    route.check(c=3)
    pad = v2_infer("rope", [5, 6], spec).replace(b"host: t\r\n", b"host: t\r\n" + PAD)
    off = v2_infer("rope", [8, 9], spec).replace(b"host: t\r\n", b"host: t\r\n" + OFF)
    lane = lane_answers(srv)
    assert send(srv, pad) == OK
    assert lane_answers(srv) - lane == 1  # the lane, after httptools
    assert send(srv, off) == OK
    assert lane_answers(srv) - lane == 1  # the raw ASGI front
    route.check(shortcut=2)
    bad = v2_infer("rope", [1, 2], {"head_dim": 1})
    assert send(srv, bad).startswith(b"HTTP/1.1 4")
    route.check(python=1)


def rope_input(positions) -> grpcclient.InferInput:
    t = grpcclient.InferInput("positions", [len(positions)], "INT64")
    t.set_data_from_numpy(np.asarray(positions, dtype=np.int64))
    return t


def test_grpc_answers_count_under_the_path_that_made_them(srv):
    unary = Counted(srv, "grpc ModelInfer rope")
    stream = Counted(srv, "grpc ModelStreamInfer <table>")
    c = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        spec = {"spec": '{"head_dim": 64}'}
        for k in range(6):  # the full path twice (learnt the second time), then the shortcut
            c.infer("rope", [rope_input([k, k + 1])], parameters=spec)
        with pytest.raises(InferenceServerException):
            c.infer("rope", [rope_input([1])], parameters={"spec": '{"head_dim": 1}'})
        unary.check(python=3, shortcut=4)
        got: queue.Queue = queue.Queue()
        c.start_stream(callback=lambda result, error: got.put((result, error)))
        try:
            for k in range(5):
                c.async_stream_infer("rope-0", [rope_input([k, 2 * k])], request_id="s")
            assert all(got.get(timeout=30)[1] is None for _ in range(5))
        finally:
            c.stop_stream()
        stream.check(python=2, shortcut=3)
    finally:
        c.close()
