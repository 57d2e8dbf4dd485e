"""/metrics on a real ``posenc serve`` with 2 workers obeys Prometheus' counter semantics when a
worker is SIGKILLed under load (uvicorn replaces it) while new specs keep the engine building and
evicting (a small budget): no counter series ever decreases across scrapes every 100 ms, which
land on either worker (parsed with prometheus_client's text parser), the engine's builds and
evictions among them; the dead worker's requests stay counted (what it had written of its counts,
service/metrics/counters.py: once the load stops, the total holds what a scrape before the kill
held plus every answer to a request sent after the kill); the engine, shared-memory and process
figures are there. Load on 127.0.0.1 only, bounded."""

from __future__ import annotations

import os
import signal
import threading

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from posenc.service.metrics.counters import FLUSH_S
from tests.integration.test_supervisor_spare import gone
from tests.procs import wait_for
from tests.service_cases import BIN, CONFIG

pytestmark = pytest.mark.slow

ROPE = {"head_dim": 64, "positions": [1, 2, 3]}


def scrape(url: str) -> dict:
    """{(name, labels): value} of every sample, and each family's type under ("#type", name)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    out = {}
    for fam in text_string_to_metric_families(text):
        out[("#type", fam.name)] = fam.type
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def counter_series(sample: dict) -> dict:
    """The samples that must never decrease: counters, and histograms' buckets, counts and sums."""
    kinds = {name: t for (k, name), t in sample.items() if k == "#type"}
    out = {}
    for key, v in sample.items():
        name = key[0]
        if name == "#type":
            continue
        base = next((f for f in kinds if name.startswith(f)), None)
        if base and kinds[base] in ("counter", "histogram") and not name.endswith("_created"):
            out[key] = v
    return out


def load(
    url: str, stop: threading.Event, counts: dict, killed: threading.Event, new_specs: bool = False
) -> None:
    """Requests until ``stop``; ``counts``: by status, and ("after", 200): the 200s of requests sent
    once ``killed`` was set (the victim dead: every one answered by a live worker)."""
    theta = 100.0
    with httpx.Client(base_url=url, timeout=30) as c:
        while not stop.is_set():
            theta += 1.0
            body = {"head_dim": 8, "rope_theta": theta, "positions": [1, 9]} if new_specs else ROPE
            after = killed.is_set()
            try:
                r = c.post("/v1/rope", json=body, headers=BIN)
                counts[r.status_code] = counts.get(r.status_code, 0) + 1
                if after and r.status_code == 200:
                    counts["after", 200] = counts.get(("after", 200), 0) + 1
            except httpx.HTTPError:
                counts["error"] = counts.get("error", 0) + 1


def test_no_counter_decreases_when_a_worker_is_killed_under_load(procs, ns):
    server = procs.serve(CONFIG, workers=2, namespace=ns, args=["--memory-budget", str(12 * 2**20)])
    stop, killed, counts, fresh = threading.Event(), threading.Event(), {}, {}
    threads = [threading.Thread(target=load, args=(server.url, stop, counts, killed)) for _ in range(2)]
    # new specs: builds and evictions
    threads.append(threading.Thread(target=load, args=(server.url, stop, fresh, killed, True)))
    for t in threads:
        t.start()
    scrapes = []
    rope_200 = ("posenc_request_duration_seconds_count", (("route", "/v1/rope"), ("status", "200")))

    def scrape_until(pred, what: str) -> None:  # scraping all along: no counter may go down
        def step():
            scrapes.append(scrape(server.url))
            return pred(scrapes[-1])

        wait_for(step, 60, 0.1, what)

    try:
        scrape_until(
            lambda m: (
                m.get(rope_200, 0) > 50
                and counts.get(200, 0) > 50
                and m.get(("posenc_evictions_total", ()), 0) >= 3
            ),
            "50 answers and 3 evictions counted",
        )
        victim = server.worker_pids()[0]
        before_kill = scrapes[-1]
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: gone(victim), 60, 0.01, "the killed worker dead")
        killed.set()  # (from now on only live workers answer)
        wait_for(
            lambda: len(server.worker_pids()) == 2 and victim not in server.worker_pids(),
            30,
            0.1,
            "uvicorn to replace the worker",
        )
        scrape_until(
            lambda m: m.get(rope_200, 0) > before_kill[rope_200] + 50 and m.get(("posenc_workers", ())) == 2,
            "the new worker counted, and 50 more answers",
        )
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not any(t.is_alive() for t in threads), "load still running 60 s after its stop"
    # every answered rope request is counted, the killed worker's too (what it had written when
    # SIGKILL came): the total reaches what the scrape before the kill held plus the answers to
    # the requests sent after it (the live workers', each counted, written every FLUSH_S). Lost
    # counts of the dead worker leave it below that for good, and the wait times out.
    after = counts.get(("after", 200), 0) + fresh.get(("after", 200), 0)
    want = before_kill[rope_200] + after
    final = wait_for(
        lambda: (m := scrape(server.url))[rope_200] >= want and m,
        60,
        FLUSH_S,
        f"{want} rope answers counted (before the kill {before_kill[rope_200]:.0f}, then {after})",
        seen=lambda: scrape(server.url)[rope_200],
    )
    scrapes.append(final)
    assert counts.get(200, 0) > 50, counts
    prev = {}
    for i, s in enumerate(scrapes):
        cur = counter_series(s)
        for key, v in cur.items():
            if key in prev:
                assert v >= prev[key], (i, key, prev[key], v)
        prev.update(cur)
    assert final[("posenc_evictions_total", ())] >= 3, final[("posenc_evictions_total", ())]
    got = before_kill[("posenc_request_duration_seconds_count", (("route", "/v1/rope"), ("status", "200")))]
    assert final[("posenc_request_duration_seconds_count", (("route", "/v1/rope"), ("status", "200")))] > got
    assert final[("posenc_workers", ())] == 2
    assert final[("posenc_engine_up", ())] == 1
    assert final[("posenc_tables", (("kind", "pinned"),))] == 7
    assert final[("posenc_builds_total", ())] >= 7 + 3
    assert final[("posenc_shm_bytes", (("kind", "pinned"),))] > 0
    assert final[("posenc_builds_total", ())] >= 7
    assert final[("posenc_build_seconds_count", ())] == final[("posenc_builds_total", ())]
    assert final[("posenc_memory_budget_bytes", ())] > 0
    assert ("posenc_evictions_total", ()) in final
    assert final[("posenc_response_bytes_total", (("route", "/v1/rope"),))] > 0
    hot = {
        p: final.get(("posenc_hot_path_total", (("path", p), ("route", "/v1/rope"))), 0)
        for p in ("shortcut", "full")
    }
    assert hot["full"] > 0, hot
    if httpx.get(server.url + "/v1/tables").json()["shortcut"] == "c":  # repeated specs take it
        assert hot["shortcut"] > 0, hot
    else:
        assert hot["shortcut"] == 0, hot
    roles = {dict(labels).get("role") for (name, labels) in final if name == "process_cpu_seconds_total"}
    assert roles == {"worker", "engine", "serve"}
