"""The hot lane below ASGI against its two ceilings. A script, not a test:

    python tests/bench/bench_lane.py [--seconds 4] [--rounds 3] [--plot docs/lane-throughput.png]
    python tests/bench/bench_lane.py --in-process [--profile]

One server process pinned to core 0, wrk (C, closed loop) pinned to core 1. Four servers stay up
the whole run and are measured in turn, round after round, so all of them see the same stretch of
a shared, noisy machine:
- floor: the raw-ASGI app under uvicorn with posenc's settings (loadtest/floors/asgi_app.py);
- bare: an asyncio Protocol with httptools on uvloop, no uvicorn (loadtest/floors/http_protocol.py);
- lane: `posenc serve --lane on` (one worker), the hot lane answering;
- asgi: `posenc serve --lane off`, the raw-ASGI front and its C shortcut.
floor and bare return the bytes posenc returned for each request. For one RoPE row and four
sinusoidal rows it prints, per round and as the median over rounds, the most requests/s (64
connections) and p50 at one connection, and the ratios lane/floor and lane/bare.

--in-process: no sockets. The lane's protocol (and the bare server's) fed one whole request per
data_received by a fake transport, in this process against an engine it starts: the Python and C
cost per request that the HTTP figures above add to the kernel's and uvloop's (best of 5; with
--profile, cProfile's table instead).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import uuid

import httpx

from posenc.loadtest.drivers import wrk as wrk_tool
from posenc.loadtest.floors.asgi_app import save_bodies
from posenc.loadtest.servers import free_port, start_floor, start_posenc

SERVER_CPU, CLIENT_CPU = "0", "1"
CONFIG = {
    "length": 131072,
    "tables": [
        {"family": "rope", "spec": {"head_dim": 128, "rope_theta": 500000.0}},
        {"family": "sinusoidal", "spec": {"d_model": 768}},
    ],
}
ACCEPT = "application/x-safetensors"
CASES = {
    "rope 1 row": ("/v1/rope", {"head_dim": 128, "rope_theta": 500000.0, "positions": [4096]}),
    "sinusoidal 4 rows": ("/v1/sinusoidal", {"d_model": 768, "positions": [3, 17, 511, 4095]}),
}
SERVERS = ("floor", "bare", "lane", "asgi")


def start_all(tmp: str) -> dict:
    cfg = os.path.join(tmp, "tables.json")
    with open(cfg, "w") as f:
        json.dump(CONFIG, f)
    servers = {}
    for name, lane in (("lane", "on"), ("asgi", "off")):
        servers[name] = start_posenc(
            free_port(), f"bench-{uuid.uuid4().hex[:6]}", tables=cfg, cpus=SERVER_CPU, args=("--lane", lane)
        )
    bodies = {}
    for s in (servers["lane"], servers["asgi"]):
        s.wait_ready()
        for path, body in CASES.values():  # the second answer teaches the worker its template
            for _ in range(2):
                r = httpx.post(s.url + path, json=body, headers={"accept": ACCEPT})
                assert r.status_code == 200, r.text
            bodies[path] = (r.headers["content-type"], r.content)
    assert httpx.get(servers["lane"].url + "/v1/tables").json()["lane"] == "on"
    path = os.path.join(tmp, "bodies.json")
    save_bodies(path, bodies)
    for kind in ("floor", "bare"):
        servers[kind] = start_floor(free_port(), bodies=path, cpus=SERVER_CPU, kind=kind)
        servers[kind].wait_ready()
    return servers


def measure(url: str, case, seconds: float, tmp: str) -> dict:
    path, body = case
    lua = os.path.join(tmp, "case.lua")
    wrk_tool.script(lua, [(path, ACCEPT, json.dumps(body).encode())])
    one = wrk_tool.run(url, lua, seconds, 1, cpus=CLIENT_CPU, timeout_s=10)
    many = wrk_tool.run(url, lua, seconds, 64, cpus=CLIENT_CPU, timeout_s=10)
    bad = {k: v for r in (one, many) for k, v in r["errors"].items() if v and k != "timeout"}
    if bad:
        raise RuntimeError(f"wrk saw errors on {url}{path}: {bad}")
    return {
        "rps": many["rps"],
        "p50_us": one["latency_us"]["p50"],
        "timeouts": one["errors"]["timeout"] + many["errors"]["timeout"],
    }


def plot(medians: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.2
    for i, name in enumerate(SERVERS):
        xs = [j + (i - 1.5) * width for j in range(len(CASES))]
        ys = [medians[(name, c)]["rps"] / 1000 for c in CASES]
        bars = ax.bar(xs, ys, width, label=name)
        ax.bar_label(bars, fmt="%.0fk", fontsize=7)
    ax.set_xticks(range(len(CASES)), list(CASES))
    ax.set_ylabel("requests/s per server core (thousands)")
    ax.set_title("One server core, wrk on the other: median over rounds")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


class _Transport:
    """What a protocol needs of a transport, writes counted and dropped."""

    def __init__(self):
        self.writes, self.closing = 0, False

    def write(self, data):
        self.writes += 1

    def writelines(self, data):
        self.writes += 1

    def is_closing(self):
        return self.closing

    def close(self):
        self.closing = True

    def get_extra_info(self, name, default=None):
        return {"sockname": ("127.0.0.1", 1), "peername": ("127.0.0.1", 2)}.get(name, default)

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


def _per_request(feed, data: bytes, n: int, profile: bool) -> float:
    """Best µs per request of feed(data) over 5 runs of n (or cProfile's table of one run)."""
    import cProfile
    import pstats
    import time

    if profile:
        prof = cProfile.Profile()
        prof.runcall(lambda: [feed(data) for _ in range(n)])
        pstats.Stats(prof).sort_stats("tottime").print_stats(14)
        return float("nan")
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            feed(data)
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e6


def in_process(profile: bool, n: int = 50000) -> None:
    import asyncio

    import uvicorn
    import uvloop
    from uvicorn.server import ServerState

    from posenc.loadtest.floors.http_protocol import BareProtocol
    from posenc.service.core.settings import Settings
    from posenc.service.front.app import create_app
    from posenc.service.metrics.counters import Metrics, remove_all
    from posenc.service.protocol.lane import STATE_KEY
    from posenc.service.protocol.uvicorn_api import Protocol

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from tests.procs import Procs, unique_namespace

    with tempfile.TemporaryDirectory() as tmp:
        procs = Procs(tmp)
        eng = procs.engine(CONFIG, unique_namespace("bench-lane"))
        s = Settings(namespace=eng.namespace, shortcut="c", lane="on")
        app = create_app(s)
        front = app  # the raw-ASGI front (no CORS): it holds the worker's lane
        front.metrics = Metrics(s.shm_dir, s.namespace)
        try:
            front.svc.attach_all(wait_s=10)
            loop = uvloop.new_event_loop()
            asyncio.set_event_loop(loop)
            cfg = uvicorn.Config(
                app=app,
                http=Protocol,
                loop="none",
                lifespan="off",
                server_header=False,
                log_level="warning",
                access_log=False,
            )
            cfg.load()
            state = ServerState()
            state.default_headers = [(b"date", b"Thu, 01 Jan 2026 00:00:00 GMT")] + cfg.encoded_headers
            for cname, (path, body) in CASES.items():
                raw = json.dumps(body).encode()
                for _ in range(2):  # learnt at its second answer (service/shortcut/store.py); learn
                    front.svc.execute(front.svc.prepare(path.rsplit("/", 1)[1], raw, ACCEPT))
                data = (
                    b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    b"Accept: %s\r\nContent-Length: %d\r\n\r\n%s"
                    % (path.encode(), ACCEPT.encode(), len(raw), raw)
                )
                p = Protocol(cfg, state, {STATE_KEY: front.lane}, _loop=loop)
                p.connection_made(_Transport())
                before = front.lane.answered
                us = _per_request(p.data_received, data, n, profile)
                assert front.lane.answered - before == (n if profile else 5 * n), "the lane did not answer"
                p.connection_lost(None)
                b = BareProtocol({path.encode(): b"x" * 1600}, b"")
                b.connection_made(_Transport())
                bare = _per_request(b.data_received, data, n, profile)
                print(f"{cname}: lane {us:.2f} µs/request, bare {bare:.2f} µs/request", flush=True)
        finally:
            front.metrics.close()
            remove_all(s.shm_dir, s.namespace)
            eng.stop()
            procs.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--plot", help="write a bar chart of the medians to this PNG")
    ap.add_argument("--in-process", action="store_true", help="Python and C cost per request, no sockets")
    ap.add_argument("--profile", action="store_true", help="with --in-process: cProfile's table")
    a = ap.parse_args()
    if a.in_process:
        return in_process(a.profile)
    runs: dict = {}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        servers = start_all(tmp)
        try:
            for rnd in range(a.rounds):
                for cname, case in CASES.items():
                    got = {name: measure(servers[name].url, case, a.seconds, tmp) for name in SERVERS}
                    for name, r in got.items():
                        runs.setdefault((name, cname), []).append(r)
                    print(
                        f"round {rnd + 1} {cname}: "
                        + ", ".join(
                            f"{n} {r['rps']:.0f}/s p50 {r['p50_us']} µs"
                            + (f" ({r['timeouts']} timeouts)" if r["timeouts"] else "")
                            for n, r in got.items()
                        ),
                        flush=True,
                    )
        finally:
            for s in servers.values():
                s.stop()
    load.append(os.getloadavg()[0])
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("rps", "p50_us")} for k, v in runs.items()}
    print(f"\nmedians over {a.rounds} rounds")
    print(
        f"{'response':<18} {'server':<6} {'req/s':>8} {'p50 µs':>7} {'rps/floor':>10} {'rps/bare':>9} {'p50/floor':>10}"
    )
    for cname in CASES:
        f, b = med[("floor", cname)], med[("bare", cname)]
        for name in SERVERS:
            r = med[(name, cname)]
            print(
                f"{cname:<18} {name:<6} {r['rps']:>8.0f} {r['p50_us']:>7.0f} {r['rps'] / f['rps']:>10.2f} "
                f"{r['rps'] / b['rps']:>9.2f} {r['p50_us'] / f['p50_us']:>10.2f}"
            )
    # On a shared machine a burst hits whichever server is measured then: the ratios within
    # each round, and their medians, say more than the ratio of medians.
    print(f"\nper-round ratios of the lane (load average {load[0]:.2f} before, {load[1]:.2f} after)")
    for cname in CASES:
        per = {
            k: [la[m] / ba[m] for la, ba in zip(runs[("lane", cname)], runs[(base, cname)])]
            for k, base, m in (
                ("rps/floor", "floor", "rps"),
                ("rps/bare", "bare", "rps"),
                ("p50/floor", "floor", "p50_us"),
            )
        }
        print(
            f"{cname:<18} "
            + "; ".join(
                f"{k} {' '.join(f'{v:.2f}' for v in vs)} (median {statistics.median(vs):.2f})"
                for k, vs in per.items()
            )
        )
    if a.plot:
        plot(med, a.plot)
        print(f"plot: {a.plot}")


if __name__ == "__main__":
    main()
