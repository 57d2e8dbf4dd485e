"""HTTP hot-path benchmark (issues #4 and #5). A script, not a test:

    python tests/bench/bench_http.py [--seconds 5]
    python tests/bench/bench_http.py --alternate "alibi 32x1x4096, binary" [--rounds 3]

One server worker pinned to core 0, wrk (C, closed loop) pinned to core 1. For each response it
measures, in one run: p50/p99 at one connection and the most requests/s (32 connections) for
- the floor: loadtest's raw ASGI app (loadtest/floors/asgi_app.py) under posenc's own uvicorn settings,
  returning the same bytes;
- posenc's hot path (the hot lane below ASGI), the raw-ASGI front and its C template
  shortcut alone (POSENC_LANE=off), and the same front with the shortcut
  off (POSENC_SHORTCUT=off: every request validated and resolved), for one RoPE row,
  four sinusoidal rows and a 32 x 1 x 4096 ALiBi block;
- a 32 × 1 × 8192 ALiBi decode block with the C kernels vs POSENC_BACKEND=numpy;
- JSON vs binary for a 4096 × 128 RoPE response.
Ratios are against the floor measured in the same run; the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from posenc.loadtest.drivers import wrk as wrk_tool  # noqa: E402  (the load test's servers, floor and wrk driver)
from posenc.loadtest.floors.asgi_app import save_bodies  # noqa: E402
from posenc.loadtest.servers import Server, free_port, start_floor, start_posenc  # noqa: E402

SERVER_CPU, CLIENT_CPU = "0", "1"
CONFIG = {
    "length": 131072,
    "tables": [
        {"family": "rope", "spec": {"head_dim": 128, "rope_theta": 500000.0}},
        {"family": "alibi", "spec": {"num_heads": 32}},
        {"family": "sinusoidal", "spec": {"d_model": 768}},
    ],
}
CASES = {
    "rope 1 row, binary": (
        "/v1/rope",
        {"head_dim": 128, "rope_theta": 500000.0, "positions": [4096]},
        "application/x-safetensors",
    ),
    "sinusoidal 4 rows, binary": (
        "/v1/sinusoidal",
        {"d_model": 768, "positions": [3, 17, 511, 4095]},
        "application/x-safetensors",
    ),
    "alibi 32x1x4096, binary": (
        "/v1/alibi",
        {"num_heads": 32, "query": [4095], "key": {"start": 0, "stop": 4096}},
        "application/x-safetensors",
    ),
}


def posenc_server(tmp: str, env: dict) -> tuple[Server, str]:
    """``posenc serve --workers 1`` on the server core, ready; (server, namespace)."""
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    cfg = os.path.join(tmp, "tables.json")
    with open(cfg, "w") as f:
        json.dump(CONFIG, f)
    s = start_posenc(free_port(), ns, tables=cfg, cpus=SERVER_CPU, env=env)
    s.wait_ready()
    return s, ns


def floor_server(tmp: str, bodies: dict) -> Server:
    """loadtest's raw ASGI floor on the server core, answering each path with ``bodies[path]``
    = (content type, bytes) under posenc's own uvicorn settings."""
    path = os.path.join(tmp, "floor-bodies.json")
    save_bodies(path, bodies)
    s = start_floor(free_port(), bodies=path, cpus=SERVER_CPU)
    s.wait_ready()
    return s


SHORTCUTS = ("C shortcut", "full path")


def inprocess_us(ns: str, case, shortcut: str = "C shortcut", n: int = 20000) -> float:
    """posenc's own cost per request without the HTTP server: the ASGI front driven directly
    (receive/send complete at once), attached to the running engine's tables, in a tight loop;
    with the C template shortcut (service/shortcut/_hot.c) or without (every request validated and
    resolved)."""
    from posenc.service.core.settings import Settings
    from posenc.service.front.app import create_app

    path, body, accept = case
    front = create_app(Settings(namespace=ns, shortcut="c" if shortcut == "C shortcut" else "off"))
    front.svc.attach_all()
    raw = json.dumps(body).encode()
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [(b"content-type", b"application/json"), (b"accept", accept.encode())],
    }

    async def receive():
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message):
        pass

    def one():
        coro = front(scope, receive, send)
        try:
            coro.send(None)  # nothing awaits anything that suspends
        except StopIteration:
            pass

    for _ in range(n // 10):
        one()
    times = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n // 5):
            one()
        times.append((time.perf_counter() - t) / (n // 5) * 1e6)
    return sorted(times)[2]


def settle(url, timeout=30.0):
    """Wait until the server has drained what the last run left queued (wrk stops sending, the
    server does not stop answering): three fast /healthz answers in a row."""
    deadline, fast = time.monotonic() + timeout, 0
    with httpx.Client(timeout=timeout) as c:
        while fast < 3 and time.monotonic() < deadline:
            t = time.perf_counter()
            try:
                c.get(url + "/healthz")
            except httpx.HTTPError:
                pass
            fast = fast + 1 if time.perf_counter() - t < 0.01 else 0
            time.sleep(0.05)


def measure(url, case, seconds, tmp):
    """wrk on the client core: p50/p99 at one connection, requests/s at 32."""
    path, body, accept = case
    lua = os.path.join(tmp, "case.lua")
    wrk_tool.script(lua, [(path, accept, json.dumps(body).encode())])
    got = {}
    for conns in (1, 32):
        settle(url)
        got[conns] = r = wrk_tool.run(url, lua, seconds, conns, cpus=CLIENT_CPU)
        if r["failures"]:
            raise RuntimeError(f"wrk saw errors on {path}: {r['errors']}")
    return {
        "p50_us": got[1]["latency_us"]["p50"],
        "p99_us": got[1]["latency_us"]["p99"],
        "max_rps": got[32]["rps"],
    }


def alternate(cname: str, rounds: int, seconds: int) -> None:
    """posenc's hot path and the floor for one response, both servers up the whole time and
    measured in turn, so that both see the same stretch of a noisy machine."""
    path, body, accept = case = CASES[cname]
    with tempfile.TemporaryDirectory() as tmp:
        servers = []
        try:
            posenc, _ = posenc_server(tmp, {})
            servers.append(posenc)
            r = httpx.post(posenc.url + path, json=body, headers={"accept": accept})
            assert r.status_code == 200, r.text
            floor = floor_server(tmp, {path: (r.headers["content-type"], r.content)})
            servers.append(floor)
            print(f"{cname}: posenc and the floor alternated, {seconds} s each")
            for i in range(rounds):
                q, f = measure(posenc.url, case, seconds, tmp), measure(floor.url, case, seconds, tmp)
                print(
                    f"round {i + 1}: posenc p50 {q['p50_us']:.0f} µs, {q['max_rps']:.0f}/s; floor p50 "
                    f"{f['p50_us']:.0f} µs, {f['max_rps']:.0f}/s; p50/floor {q['p50_us'] / f['p50_us']:.2f}, "
                    f"rps/floor {q['max_rps'] / f['max_rps']:.2f}",
                    flush=True,
                )
        finally:
            for srv in servers:
                srv.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument(
        "--alternate",
        metavar="CASE",
        choices=list(CASES),
        help="only this response: posenc and the floor side by side, measured in turn",
    )
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.alternate:
        return alternate(a.alternate, a.rounds, a.seconds)
    with tempfile.TemporaryDirectory() as tmp:
        servers = {
            "hot path (simd)": {},
            "raw-ASGI front": {"POSENC_LANE": "off"},
            "shortcut off": {"POSENC_SHORTCUT": "off", "POSENC_LANE": "off"},
            "hot path (numpy)": {"POSENC_BACKEND": "numpy", "POSENC_LANE": "off"},
        }
        results = {}
        bodies = {}
        inproc = {}
        for name, env in servers.items():
            srv, ns = posenc_server(tmp, env)
            url = srv.url
            try:
                for cname, case in CASES.items():
                    r = httpx.post(url + case[0], json=case[1], headers={"accept": case[2]})
                    assert r.status_code == 200, r.text
                    bodies.setdefault(case[0], (r.headers["content-type"], r.content))
                    results[(name, cname)] = measure(url, case, a.seconds, tmp)
                if name == "hot path (simd)":
                    inproc = {(cname, "C shortcut"): inprocess_us(ns, case) for cname, case in CASES.items()}
                    rope_row = CASES["rope 1 row, binary"]
                    for how in SHORTCUTS[1:]:
                        inproc[("rope 1 row, binary", how)] = inprocess_us(ns, rope_row, how)
                    big = {"head_dim": 128, "rope_theta": 500000.0, "positions": {"start": 0, "stop": 4096}}
                    for acc in ("application/json", "application/x-safetensors"):
                        results[(name, f"rope 4096x128 {acc.split('/')[1]}")] = measure(
                            url, ("/v1/rope", big, acc), a.seconds, tmp
                        )
                    dec = {"num_heads": 32, "query": [8191], "key": {"start": 0, "stop": 8192}}
                    results[(name, "alibi 32x1x8192, binary")] = measure(
                        url, ("/v1/alibi", dec, "application/x-safetensors"), a.seconds, tmp
                    )
                if name == "hot path (numpy)":
                    dec = {"num_heads": 32, "query": [8191], "key": {"start": 0, "stop": 8192}}
                    results[(name, "alibi 32x1x8192, binary")] = measure(
                        url, ("/v1/alibi", dec, "application/x-safetensors"), a.seconds, tmp
                    )
            finally:
                srv.stop()
        floor = floor_server(tmp, bodies)  # one floor, each case's bytes at its path
        try:
            for cname, case in CASES.items():
                results[("floor (raw ASGI)", cname)] = measure(floor.url, case, a.seconds, tmp)
        finally:
            floor.stop()

    for (cname, how), us in inproc.items():
        print(f"in-process, no HTTP server: {us:.1f} µs per '{cname}' request, {how} (median of 5)")
    print(
        f"{'server':<20} {'response':<28} {'p50 µs':>8} {'p99 µs':>8} {'max req/s':>10} "
        f"{'p50/floor':>10} {'rps/floor':>10}"
    )
    for (name, cname), r in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        floor = results.get(("floor (raw ASGI)", cname))
        rp = f"{r['p50_us'] / floor['p50_us']:.2f}" if floor else "-"
        rr = f"{r['max_rps'] / floor['max_rps']:.2f}" if floor else "-"
        print(
            f"{name:<20} {cname:<28} {r['p50_us']:>8.0f} {r['p99_us']:>8.0f} {r['max_rps']:>10.0f} {rp:>10} {rr:>10}"
        )


if __name__ == "__main__":
    main()
