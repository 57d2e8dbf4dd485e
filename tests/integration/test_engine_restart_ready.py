"""SIGKILL the engine of a real ``posenc serve`` (2 workers) under load: no request fails (specs
the workers have not mapped are computed exactly in the worker until the engine is back, then
built by it), /readyz stays 200 as docs/deploy.md says and tells the engine's state, and serve logs
the restart-to-ready time. Load on 127.0.0.1 only, bounded in time. How soon the engine is back is
measured by tests/bench/bench_adopt.py (``--serve-kills``), not asserted here."""

from __future__ import annotations

import itertools
import os
import re
import signal
import threading
import time

import httpx
import pytest

from posenc.engine.reader.client import Client
from posenc.service.supervise.engine_watch import CRASH_S
from tests.integration.test_supervisor_spare import RECVMSG, waiting_for_work
from tests.procs import cmdline, wait_for
from tests.service_cases import BIN, CONFIG, reference_safetensors
from tests.shm import read_head

pytestmark = pytest.mark.slow

MAPPED = {"head_dim": 64, "positions": [1, 2, 3]}


def load(url: str, stop: threading.Event, results: list, new_specs) -> None:
    with httpx.Client(base_url=url, timeout=30) as c:
        while not stop.is_set():
            body = MAPPED if len(results) % 2 else {"head_dim": next(new_specs), "positions": [0, 5]}
            try:
                r = c.post("/v1/rope", json=body, headers=BIN)
                results.append((body, r.status_code, r.content))
            except httpx.HTTPError as e:
                results.append((body, repr(e), b""))


def test_engine_killed_under_load_no_request_fails_and_ready_stays_true(procs, ns):
    server = procs.serve(CONFIG, workers=2, namespace=ns)
    client = Client(namespace=server.namespace)
    gen = client.wait_ready()["generation"]
    new_specs = (2 * k for k in itertools.count(4))  # head_dim 8, 10, ...: a new table each
    stop, results, ready = threading.Event(), [], []
    threads = [threading.Thread(target=load, args=(server.url, stop, results, new_specs)) for _ in range(2)]
    for t in threads:
        t.start()

    def probe():
        r = httpx.get(server.url + "/readyz", timeout=5)
        ready.append((r.status_code, r.json()))
        return r.json()

    try:
        wait_for(lambda: len(results) > 20, 30, 0.01, "the load answered")  # before the kill, under load
        # every worker ready before the kill (serve's /readyz was one worker's; a worker still
        # attaching says "starting", rightly): ten probes in a row, each on a new connection
        wait_for(lambda: all(probe()["status"] == "ready" for _ in range(10)), 30, 0.05, "every worker ready")
        ready.clear()
        engine = server.engine_pid()
        os.kill(engine, signal.SIGKILL)
        # (the engine is restarted at once and adopts its tables: "down" may last less than a probe)
        wait_for(
            lambda: probe().get("engine") == "up" and probe().get("generation") != gen,
            60,
            0.02,
            "the restarted engine",
        )
        n_restart = len(results)
        wait_for(lambda: len(results) > n_restart + 20, 60, 0.01, "the load answered by the new engine")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    bad = [(b, s) for b, s, _ in results if s != 200]
    assert not bad, bad[:5]
    assert len(results) > n_restart > 20
    assert all(s == 200 for s, _ in ready), ready
    for body, _, content in results[:: max(1, len(results) // 40)]:  # exact, however answered
        assert content == reference_safetensors("rope", body)
    # serve logged the restart-to-ready time
    wait_for(
        lambda: re.search(r"engine restarted: generation \d+ ready [\d.]+ s", server.stderr()),
        60,
        0.1,
        "the restart-to-ready log line",
    )
    # the restarted engine adopted the configured tables the dead one left, rather than rebuilding them
    assert re.search(r"adopted [1-9]\d* table\(s\)", server.stderr()), server.output()
    # a new spec is built by the engine once it is back (one build, then it is mapped)
    fresh = {"head_dim": 6, "positions": [1]}
    assert httpx.post(server.url + "/v1/rope", json=fresh, headers=BIN, timeout=30).status_code == 200
    client = Client(namespace=server.namespace)  # the build runs behind the first answer: wait for it
    wait_for(lambda: len(client.call({"op": "stats"})["builds"]) > 7, 30, 0.05, "the new spec's build")
    assert client.call({"op": "stats"})["generation"] != gen


def test_readyz_says_down_while_no_engine_runs_and_up_once_another_is_ready(procs, ns):
    eng = procs.engine(CONFIG, ns)
    server = procs.serve(CONFIG, workers=1, namespace=ns, args=["--attach-only"])
    gen = eng.manifest()["generation"]
    assert httpx.get(server.url + "/readyz").json() == {
        "status": "ready",
        "generation": gen,
        "engine": "up",
        "computed": [],
    }
    eng.kill9()  # --attach-only: nobody restarts it
    wait_for(lambda: httpx.get(server.url + "/readyz").json()["engine"] == "down", 60, 0.05, "engine: down")
    r = httpx.get(server.url + "/readyz")
    assert r.status_code == 200 and r.json()["status"] == "ready"
    for body in (MAPPED, {"head_dim": 6, "rope_theta": 3.0, "positions": [0, 9]}):  # mapped, and computed
        a = httpx.post(server.url + "/v1/rope", json=body, headers=BIN, timeout=30)
        assert a.status_code == 200 and a.content == reference_safetensors("rope", body)
    again = procs.engine(CONFIG, ns)  # (a standalone engine has no keeper: it builds its tables again)
    assert not any(e.get("adopted") for e in again.manifest()["tables"].values())
    wait_for(
        lambda: (
            httpx.get(server.url + "/readyz").json()
            == {
                "status": "ready",
                "generation": again.manifest()["generation"],
                "engine": "up",
                "computed": [],
            }
        ),
        60,
        0.05,
        "engine: up",
    )
    assert server.stop() == 0 and again.stop() == 0


def _back_after_kill(server, ns: str, gen):
    """SIGKILL the server's engine; the generation of the manifest its successor published."""
    os.kill(wait_for(server.engine_pid, 60, 0.01, "the running engine"), signal.SIGKILL)
    return wait_for(
        lambda: (g := (read_head(ns) or {}).get("generation")) not in (None, gen) and g,
        60,
        0.005,
        "the restarted engine's manifest",
    )


def test_an_engine_killed_again_soon_after_its_restart_is_restarted_at_once(procs, ns):
    """Each kill comes once serve saw the restarted engine up (its restart-to-ready line) and
    CRASH_S later (an engine that was up and lived CRASH_S: no crash loop): restarted at once each
    time. (How soon it is back: tests/bench/bench_adopt.py ``--serve-kills``.)"""
    server = procs.serve(CONFIG, workers=1, namespace=ns)
    gen = read_head(ns)["generation"]
    wait_for(server.standby_pid, 60, 0.02, "a standby (serve starts one once it saw its engine up)")
    for k in range(3):
        gen = _back_after_kill(server, ns, gen)
        wait_for(
            lambda k=k: server.stderr().count("engine restarted: generation") > k,
            60,
            0.01,
            f"serve's restart-to-ready line of restart {k + 1}",
            seen=lambda: server.stderr()[-2000:],
        )
        # the scenario's pace, not a wait for a state: serve counts a death within CRASH_S of the
        # engine's start as a crash loop's (then it waits); this kill comes just past that
        time.sleep(CRASH_S)
    delays = re.findall(r"restarting in ([0-9.]+)s", server.stderr())
    assert delays == ["0.0"] * 3, server.output()
    assert httpx.post(
        server.url + "/v1/rope", json=MAPPED, headers=BIN, timeout=30
    ).content == reference_safetensors("rope", MAPPED)
    assert server.stop() == 0, server.output()


def test_a_standby_engine_waits_imported_and_takes_over_when_the_engine_dies(procs, ns):
    """Once the engine is up serve starts a standby (``--standby-fd``: imported, waiting); a
    killed engine's successor is that standby (no new process on the restart path), a new
    standby follows once it is up, and stopping serve ends both."""
    server = procs.serve(CONFIG, workers=1, namespace=ns)
    gen = read_head(ns)["generation"]
    standby = wait_for(server.standby_pid, 30, 0.02, "a standby engine")
    engine = server.engine_pid()
    assert engine != standby and "--standby-fd" in cmdline(standby)
    gen = _back_after_kill(server, ns, gen)
    assert server.engine_pid() == standby  # the standby is the engine now
    assert read_head(ns)["pid"] == standby
    second = wait_for(server.standby_pid, 30, 0.02, "the next standby")
    assert second not in (engine, standby)
    if RECVMSG is not None:  # imported: waiting in recvmsg for its go (then its size is what it costs)
        wait_for(lambda: waiting_for_work(second), 120, 0.01, "the new standby waiting for its go")
        print(f"resident: the engine {_rss_mib(standby):.0f} MiB, its standby {_rss_mib(second):.0f} MiB")
    assert httpx.post(
        server.url + "/v1/rope", json=MAPPED, headers=BIN, timeout=30
    ).content == reference_safetensors("rope", MAPPED)
    assert server.stop() == 0, server.output()
    assert not any(os.path.exists(f"/proc/{p}") and cmdline(p) for p in (engine, standby, second))


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmRSS:")) / 1024
