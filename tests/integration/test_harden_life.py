"""Issue 15, process life of ``posenc serve``, on real processes:

- SIGKILL of the serve parent leaves no worker (nor engine) alive, and a new server starts on
  the same port and namespace;
- SIGTERM under load drains: every request that reached a worker is answered, long ones included;
- a second server on the same namespace, or on a taken port, refuses before it touches anything
  of the first (it used to delete the running server's metrics files).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import httpx
import pytest

from tests.procs import wait_for
from tests.service_cases import BIN, CONFIG, reference_safetensors
from tests.shm import pid_alive as alive
from tests.shm import shm_files, snapshot


@pytest.mark.slow
def test_sigkill_of_the_parent_leaves_no_worker_and_the_port_is_free(procs, ns):
    s = procs.serve(CONFIG, workers=2, namespace=ns)
    children = [*s.worker_pids(), s.engine_pid()]
    assert len(children) == 3
    s.kill9()
    wait_for(lambda: not any(alive(p) for p in children), 15, 0.05, "workers and engine gone")
    # the same port and namespace serve again (the stale serve lock is taken over)
    again = procs.serve(CONFIG, workers=1, namespace=ns, port=s.port)
    assert httpx.get(f"{s.url}/readyz").status_code == 200
    assert again.stop() == 0, again.output()


@pytest.mark.slow
def test_sigterm_under_load_answers_every_request_that_arrived(procs):
    s = procs.serve(CONFIG, workers=2)
    # answers of 30 MB, each read slowly by its client (64 KiB every 5 ms: a few seconds, inside
    # serve's 10 s drain), so that all three are surely in flight when SIGTERM comes: a request's
    # own work is milliseconds (a new spec's rows are computed at once, its table built aside)
    long = [{"d_model": 384 + 2 * k, "positions": {"start": 0, "stop": 20000}} for k in range(3)]
    results: dict = {"long": [], "short": [], "refused": 0, "lost": []}
    started = [threading.Event() for _ in long]
    stop = threading.Event()

    def long_one(i, body):
        with httpx.stream("POST", s.url + "/v1/sinusoidal", json=body, headers=BIN, timeout=60) as r:
            got = bytearray()
            for chunk in r.iter_bytes(65536):
                got += chunk
                started[i].set()
                time.sleep(0.005)  # a slow reader, on purpose
        results["long"].append((r.status_code, bytes(got) == reference_safetensors("sinusoidal", body)))

    def shorts():
        body = {"head_dim": 64, "positions": [1, 2]}
        with httpx.Client(base_url=s.url, timeout=30) as c:
            fresh = True  # the next request opens a new connection
            while not stop.is_set():
                try:
                    r = c.post("/v1/rope", json=body, headers=BIN)
                    results["short"].append(r.status_code)
                    fresh = r.headers.get("connection") == "close"
                except httpx.TransportError as e:
                    if fresh:  # a new connection no worker accepted: it never reached one
                        results["refused"] += 1
                    else:  # a request on a connection a worker was serving: lost
                        results["lost"].append(repr(e))
                    return

    threads = [threading.Thread(target=long_one, args=(i, b)) for i, b in enumerate(long)] + [
        threading.Thread(target=shorts) for _ in range(3)
    ]
    for t in threads:
        t.start()
    # every long answer has begun to arrive and none is read whole: all three are in flight
    wait_for(
        lambda: all(e.is_set() for e in started),
        60,
        0.005,
        "the long answers' first bytes",
        seen=lambda: results,
    )
    in_flight = len(long) - len(results["long"])
    s.signal(signal.SIGTERM)
    rc = s.wait(60)
    stop.set()
    for t in threads:
        t.join(60)
    assert rc == 0, s.output()
    assert in_flight >= 1, "no long request was in flight at SIGTERM: nothing tested the drain"
    assert results["long"] == [(200, True)] * 3, (results, s.output())
    assert set(results["short"]) == {200} and len(results["short"]) >= 3, results
    # every keep-alive client got its last answer with "connection: close"; its next connection
    # was refused (the listener is closed), which the ingress retries elsewhere (docs/deploy.md)
    assert results["lost"] == [] and results["refused"] == 3, results
    assert shm_files(s.namespace) == []


def test_a_second_server_refuses_before_touching_the_first(procs, ns):
    a = procs.serve(CONFIG, workers=2, namespace=ns)
    wait_for(
        lambda: sum(".metrics." in n for n in shm_files(ns)) == 2, 30, 0.05, "both workers' metrics files"
    )
    # names and inodes: nothing removed, created or replaced (the workers' own counting keeps
    # touching their metrics files' contents meanwhile)
    files = lambda: {n: st[0] for n, st in snapshot(ns).items()}  # noqa: E731
    before = files()
    b = procs.serve(CONFIG, workers=1, namespace=ns, ready=False)  # same namespace
    assert b.wait(30) == 1 and "serves namespace" in b.stderr(), b.output()
    other = procs.serve(CONFIG, workers=1, ready=False, port=a.port)  # same port
    assert other.wait(30) == 1 and "in use" in other.stderr(), other.output()
    assert shm_files(other.namespace) == []
    assert files() == before
    assert httpx.post(a.url + "/v1/rope", json={"head_dim": 64, "positions": [1]}).status_code == 200
    assert a.stop() == 0, a.output()


def _delays(s) -> list[float]:
    return [float(x) for x in re.findall(r"restarting in ([0-9.]+)s", s.stderr())]


def _kill_successors(s, seen: list, until, most: int = 8) -> None:
    """Kill each new engine as soon as serve runs one (its standby, once it holds the lock, or a
    new process), until ``until(delays)`` or ``most`` kills."""
    for _ in range(most):
        pid = wait_for(lambda: (p := s.engine_pid()) not in (None, *seen) and p, 30, 0.01, "a new engine")
        seen.append(pid)
        n = len(_delays(s))
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: len(_delays(s)) > n, 30, 0.01, "the restart it logs")
        if until(_delays(s)):
            return


def _crash_loop_ok(delays: list[float]) -> bool:
    """Serve's rule: a death restarts at once, but for a crash loop (deaths before the engine was
    up, or within 1 s of its start twice in a row), whose delay doubles from 0.5 s. An engine that
    was up before it was killed (a standby adopts in milliseconds) restarts at once, so zeros may
    lead; once the loop starts, each delay doubles the last."""
    grown = [d for d in delays if d > 0]
    lead = delays[: len(delays) - len(grown)]
    return all(d == 0.0 for d in lead) and grown == [0.5 * 2**k for k in range(len(grown))]


@pytest.mark.slow
def test_an_engine_that_keeps_dying_is_restarted_with_growing_delays_and_a_reason(procs):
    s = procs.serve(CONFIG, workers=1)
    seen: list[int] = []
    _kill_successors(s, seen, lambda d: 1.0 in d)  # killed as soon as it runs, again and again
    delays = _delays(s)
    assert delays[0] == 0.0 and 1.0 in delays and _crash_loop_ok(delays), s.output()
    assert "engine killed by SIGKILL" in s.stderr()
    wait_for(lambda: s.engine_pid() not in (None, *seen), 30, 0.05, "the next engine")
    s.wait_ready()
    assert httpx.post(s.url + "/v1/rope", json={"head_dim": 64, "positions": [1]}).status_code == 200
    assert s.stop() == 0, s.output()


@pytest.mark.slow
def test_a_server_stopped_while_its_dead_engine_waits_for_a_restart_leaves_nothing(procs, ns):
    s = procs.serve(CONFIG, workers=1, namespace=ns)
    pids: list[int] = []
    # the engine, then its successors as soon as they run, until a restart waits 2 s
    _kill_successors(s, pids, lambda d: 2.0 in d)
    assert 2.0 in _delays(s) and _crash_loop_ok(_delays(s)), s.output()
    assert shm_files(ns), "nothing of the dead engines is left to remove"
    assert s.stop() == 0, s.output()  # no engine runs now, and none takes the files over
    assert not any(alive(p) for p in pids)
    assert shm_files(ns) == [], s.output()
    assert "a dead engine left" in s.stderr(), s.output()
