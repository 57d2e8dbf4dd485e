"""The open-loop probe's senders against a real ``posenc serve`` (issue #21): a rate held gives exact
request counts; a rate that cannot be held is reported as fell behind, by whom, with the rate
achieved, and the report shows no latency for it. How fast the C sender goes is the report's
question (docs/loadtest.md), not these tests'.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading

import pytest

from tests.loadtest.loadtest_cases import require_installed

require_installed("hdrh", "uvicorn")

from posenc.loadtest.drivers import probe, sender
from posenc.loadtest.reports import figures as report_figures
from posenc.loadtest.reports import summary as report
from posenc.loadtest.workloads import mix
from tests.loadtest.loadtest_cases import TABLES


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.procs import Procs
    from tests.shm import shm_files

    d = tmp_path_factory.mktemp("probe")
    (d / "tables.json").write_text(json.dumps(TABLES))
    reg = Procs(d / "procs")
    srv = reg.serve(str(d / "tables.json"), workers=1)
    try:
        yield srv, str(d / "tables.json")
    finally:
        rc = srv.stop()
        reg.cleanup()
        assert rc == 0, srv.output()
        assert shm_files(srv.namespace) == [], "/dev/shm leftovers after SIGTERM"


def _pool(srv, tables, n=256):
    reqs, kinds, names, _items = mix.build(f"127.0.0.1:{srv.port}", tables, pool=n, seed=3)
    return reqs, kinds, names


def test_the_c_sender_is_built():
    """pip install builds loadtest/_sender.c (setup.py); without it the probe cannot measure the lane."""
    assert sender._sender is not None, (
        "posenc.loadtest._sender is not built: pip install -e . needs a C compiler"
    )
    assert sender.name() == "c"


@pytest.mark.parametrize("which, rate", [("c", 1000.0), ("python", 200.0)])
def test_a_held_rate_gives_exact_counts(server, monkeypatch, which, rate):
    """Every request scheduled in the measured window is sent and answered once, over the realistic
    mix (every family, binary and JSON, /v1 and v2), by either sender."""
    srv, tables = server
    monkeypatch.setenv("POSENC_PROBE_SENDER", which)
    reqs, kinds, names = _pool(srv, tables)
    s = probe.run_step(
        "127.0.0.1",
        srv.port,
        reqs,
        kinds,
        names,
        rate,
        duration=1.0,
        connections=16,
        warmup=0.25,
        drain=60.0,  # a bound on a hang: the step ends once every request is answered
        target="posenc",
    )
    print(probe.format_step(s))
    assert s.sender == which
    assert s.errors == 0 and s.timeouts == 0 and s.resets == 0, s.status_counts
    assert s.sent == int(rate * 1.0) and s.completed == s.sent, (s.sent, s.completed)
    assert s.status_counts == {200: s.sent}
    # Whether this machine holds the rate (who fell behind, if anyone) is a figure, printed: how fast
    # posenc answers is the probe's benchmark question (docs/loadtest.md), not this test's.
    p = s.percentiles_us
    assert 0 < p["p50"] <= p["p90"] <= p["p99"] <= p["p99.9"] <= s.max_us
    assert set(s.by_kind) == set(names)
    assert s.loop_lag_us["p50"] >= 0 and s.rx_us["p50"] > 0


class SlowServer(threading.Thread):
    """An HTTP/1.1 keep-alive server that answers each request 20 ms after it arrived, and uses
    no CPU meanwhile: four connections hold 200 requests/s at most."""

    def __init__(self):
        super().__init__(daemon=True)
        self.ready = threading.Event()
        self.port = 0
        self.writers = set()
        self.handlers: set[asyncio.Task] = set()

    async def _conn(self, reader, writer):
        self.writers.add(writer)
        self.handlers.add(asyncio.current_task())
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(n)
                await asyncio.sleep(0.02)  # the server's slowness, on purpose: 20 ms per answer
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self.writers.discard(writer)

    def run(self):
        async def main():
            server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            self.loop, self.stopped = asyncio.get_running_loop(), asyncio.Event()
            self.ready.set()
            async with server:
                await self.stopped.wait()
            # Close the connections the probe left open while the loop still runs: their handlers
            # end at EOF, and no StreamWriter outlives the loop (its __del__ would warn "loop is
            # closed" in whichever later test the garbage collector happens to run).
            for w in list(self.writers):
                w.close()
            # each handler ends at its EOF (a bound on a hang all the same)
            _, pending = await asyncio.wait(self.handlers, timeout=60) if self.handlers else ((), ())
            assert not pending, f"{len(pending)} connection handlers did not end"

        asyncio.run(main())

    def stop(self):
        self.loop.call_soon_threadsafe(self.stopped.set)
        self.join(60)
        assert not self.is_alive(), "the slow server's thread did not end"


def test_a_server_that_cannot_keep_up_fell_behind():
    """2,000/s offered to a server that answers 200/s: the server fell behind, with the rate it
    achieved, and the report gives the step no latency."""
    srv = SlowServer()
    srv.start()
    assert srv.ready.wait(60), "the slow server did not start"
    try:
        req = b"POST /v1/rope HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
        s = probe.run_step(
            "127.0.0.1",
            srv.port,
            [req],
            [0],
            ["slow"],
            2000.0,
            duration=0.5,
            connections=4,
            warmup=0.1,
            drain=0.5,
            target="slow",
        )
    finally:
        srv.stop()
    assert s.sender == "c"
    assert s.fell_behind and s.behind == "server", probe.format_step(s)
    assert s.achieved_rps < 250 and s.queued > 0 and s.timeouts > 0
    assert "FELL BEHIND" in probe.format_step(s) and "p50" not in probe.format_step(s)
    _no_latency_in_report(s)


@pytest.mark.parametrize("which", ["c", "python"])
def test_a_server_that_closes_after_each_answer(monkeypatch, which):
    """An HTTP/1.0 server closes the connection after every answer: each answer counts, the probe
    opens a new connection for the next request, and nothing is an error."""
    import http.server

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(200)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    monkeypatch.setenv("POSENC_PROBE_SENDER", which)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        req = b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
        s = probe.run_step(
            "127.0.0.1",
            srv.server_address[1],
            [req],
            [0],
            ["x"],
            200.0,
            duration=0.5,
            connections=4,
            warmup=0.1,
            target="http/1.0",
        )
    finally:
        srv.shutdown()
        srv.server_close()
    assert s.errors == 0 and s.timeouts == 0 and s.resets == 0, s.status_counts
    assert s.sent == 100 and s.completed == 100 and s.status_counts == {200: 100}


def test_a_rate_the_python_sender_cannot_hold_fell_behind(server, monkeypatch):
    """The Python sender offered 300,000/s over the realistic mix, far past what it and one worker
    answer (on a fast stretch of this machine, 100,000/s was nearly held): the step fell behind, and
    no latency is reported for it."""
    srv, tables = server
    monkeypatch.setenv("POSENC_PROBE_SENDER", "python")
    reqs, kinds, names = _pool(srv, tables, 64)
    s = probe.run_step(
        "127.0.0.1",
        srv.port,
        reqs,
        kinds,
        names,
        300_000.0,
        duration=0.2,
        connections=16,
        warmup=0.05,
        drain=0.5,
        target="posenc",
    )
    assert s.fell_behind and s.behind in ("probe", "server"), probe.format_step(s)
    assert s.achieved_rps < 0.97 * 300_000
    _no_latency_in_report(s)


@pytest.mark.parametrize(
    "unsent, late_share, queued, timeouts, achieved, expected",
    [
        (False, 0.0, 0, 0, 1000.0, (False, "")),
        (False, 0.009, 0, 0, 980.0, (False, "")),
        (False, 0.02, 0, 0, 1000.0, (True, "probe")),  # its own sends late: those latencies are its own
        (True, 0.0, 0, 0, 1000.0, (True, "probe")),  # it could not send everything
        (False, 0.0, 50, 5, 1000.0, (True, "server")),  # answers missing at the end
        (False, 0.0, 50, 0, 960.0, (True, "server")),  # under 97% of the offered rate answered
        (False, 0.05, 50, 0, 500.0, (True, "server")),  # late too, but requests waited for the server
        (False, 0.05, 0, 0, 500.0, (True, "probe")),  # slow while every connection was free: the probe
        (False, 0.0, 500, 0, 1000.0, (False, "")),  # half of the requests waited: kept up, just
        (False, 0.0, 501, 0, 1000.0, (True, "server")),  # more than half: a queue that grew all along
    ],
)
def test_who_fell_behind(unsent, late_share, queued, timeouts, achieved, expected):
    r = probe.StepResult(
        target="t",
        rate=1000.0,
        duration_s=1.0,
        connections=1,
        sent=1000,
        late_share=late_share,
        queued=queued,
        timeouts=timeouts,
        achieved_rps=achieved,
    )
    assert probe.judge(r, unsent) == expected


def _no_latency_in_report(s: probe.StepResult) -> None:
    import dataclasses

    d = dataclasses.asdict(s)
    res = {"probe": {"posenc": [d], "floor": []}, "saturation_rps": s.rate * 2}
    f = report_figures.figures(res, 37_500.0, 80.0, 32)
    assert f["at_50"]["saturated"] and f["at_50"]["posenc"] is not None
    md = report.markdown(res, f)
    row = next(line for line in md.splitlines() if line.startswith(f"| {s.rate:,.0f} | posenc |"))
    assert f"✗ fell behind ({s.behind}), {s.achieved_rps:,.0f}/s achieved | – | – | – | – | – |" in row, row
    head = next(line for line in md.splitlines() if "at 50% of saturation" in line)
    assert "no latency: fell behind" in head and "µs" not in head.split("|")[2], head


def test_a_floor_that_fell_behind_gives_no_latency_in_the_headline():
    """posenc held 50% of its saturation, the floor did not at that rate: the headline gives
    posenc's latency and says the floor fell behind, with no floor latency or difference (the
    floor's percentiles there are its queue, not a latency)."""
    import dataclasses

    pct = {"p50": 40, "p90": 90, "p99": 300, "p99.9": 900, "max": 1000}
    kept = probe.StepResult(
        target="posenc",
        rate=25_000.0,
        duration_s=1.0,
        connections=64,
        sent=25_000,
        achieved_rps=25_000.0,
        percentiles_us=pct,
    )
    fell = probe.StepResult(
        target="floor",
        rate=25_000.0,
        duration_s=1.0,
        connections=64,
        sent=25_000,
        achieved_rps=20_000.0,
        queued=5_000,
        fell_behind=True,
        behind="server",
        percentiles_us={k: 100 * v for k, v in pct.items()},
    )
    res = {
        "probe": {"posenc": [dataclasses.asdict(kept)], "floor": [dataclasses.asdict(fell)]},
        "saturation_rps": 50_000.0,
    }
    f = report_figures.figures(res, 37_500.0, 80.0, 32)
    assert f["at_50"]["floor"] is None and f["at_50"]["posenc"] == pct
    head = next(line for line in report.markdown(res, f).splitlines() if "at 50% of saturation" in line)
    assert "the floor fell behind (server), 20,000/s achieved" in head, head
    assert "posenc − floor" not in head and "4000" not in head, head


def test_a_step_the_probe_fell_behind_on_is_measured_once_more_and_the_better_kept():
    """The report's runner measures a step again when the probe says it was late itself (a stalled
    VM's steal shows in no process's CPU), keeps the better of the two, marks it retried; a step
    that held its rate is measured once. (Others' CPU is not what these check: no limit on it.)"""
    from posenc.loadtest.runner import NoiseGuard

    def quality(d):
        return (not d["fell_behind"], -d["p99"])

    def doubtful(d):
        return d["behind"] == "probe"

    late = {"fell_behind": True, "behind": "probe", "p99": 0}
    held = {"fell_behind": False, "behind": "", "p99": 70}
    for first, second, want, calls in (
        (late, held, held, 2),
        (held, late, held, 1),
        (late, dict(late), late, 2),
        ({**late, "behind": "server"}, held, {**late, "behind": "server"}, 1),
    ):
        guard, made = NoiseGuard([os.getpid()], idle_budget=0.0, noise_cores=1e9), []
        results = iter([first, second])
        got = guard.measure(lambda: made.append(1) or dict(next(results)), quality, doubtful)
        assert len(made) == calls and got["retried"] == (calls == 2)
        assert {k: got[k] for k in want} == want
