"""HTTP hot-path benchmark (issues #4 and #5). A script, not a test:

    python tests/bench/bench_http.py [--seconds 5]
    python tests/bench/bench_http.py --alternate "alibi 32x1x4096, binary" [--rounds 3]

One server worker pinned to core 0, wrk (C, closed loop) pinned to core 1. For each response it
measures, in one run: p50/p99 at one connection and the most requests/s (32 connections) for
- the floor: a raw ASGI app under the same uvicorn (uvloop, httptools, 1 worker) returning the
  same bytes;
- posenc's hot path (the raw-ASGI front and its C template shortcut), and its FastAPI routes
  (POSENC_FAST_PATH=0), for one RoPE row, four sinusoidal rows and a 32 x 1 x 4096 ALiBi block;
- a 32 × 1 × 8192 ALiBi decode block with the C kernels vs POSENC_BACKEND=numpy;
- JSON vs binary for a 4096 × 128 RoPE response.
Ratios are against the floor measured in the same run; the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = sys.executable
CONFIG = {"length": 131072, "tables": [
    {"family": "rope", "spec": {"head_dim": 128, "rope_theta": 500000.0}},
    {"family": "alibi", "spec": {"num_heads": 32}},
    {"family": "sinusoidal", "spec": {"d_model": 768}},
]}
CASES = {
    "rope 1 row, binary": ("/v1/rope", {"head_dim": 128, "rope_theta": 500000.0, "positions": [4096]},
                           "application/x-safetensors"),
    "sinusoidal 4 rows, binary": ("/v1/sinusoidal", {"d_model": 768, "positions": [3, 17, 511, 4095]},
                                  "application/x-safetensors"),
    "alibi 32x1x4096, binary": ("/v1/alibi", {"num_heads": 32, "query": [4095], "key": {"start": 0, "stop": 4096}},
                                "application/x-safetensors"),
}
FLOOR_APP = textwrap.dedent('''
    import os
    BODY = open(os.environ["FLOOR_BODY"], "rb").read()
    CT = os.environ["FLOOR_CT"].encode()
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", CT), (b"content-length", str(len(BODY)).encode())]})
        await send({"type": "http.response.body", "body": BODY})
''')


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(url, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code in (200, 404, 405):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(url)


def start_posenc(tmp, env_extra):
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    port = free_port()
    cfg = os.path.join(tmp, "tables.json")
    with open(cfg, "w") as f:
        json.dump(CONFIG, f)
    env = dict(os.environ, **env_extra)
    p = subprocess.Popen(["taskset", "-c", "0", PY, "-m", "engine.cli", "serve", "--workers", "1", "--port", str(port),
                          "--namespace", ns, "--tables", cfg, "--log-level", "warning"], cwd=ROOT, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait(f"http://127.0.0.1:{port}/readyz", p)
    while httpx.get(f"http://127.0.0.1:{port}/readyz").status_code != 200:
        time.sleep(0.1)
    return p, f"http://127.0.0.1:{port}", ns


def inprocess_us(ns: str, case, n: int = 20000) -> float:
    """posenc's own cost per request without the HTTP server: the ASGI front driven directly
    (receive/send complete at once), attached to the running engine's tables, in a tight loop."""
    sys.path.insert(0, ROOT)
    from service.app import create_app
    from service.settings import Settings
    path, body, accept = case
    front = create_app(Settings(namespace=ns))
    front.svc.attach_all()
    raw = json.dumps(body).encode()
    scope = {"type": "http", "method": "POST", "path": path,
             "headers": [(b"content-type", b"application/json"), (b"accept", accept.encode())]}

    async def receive():
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message):
        pass

    def one():
        coro = front(scope, receive, send)
        try:
            coro.send(None)   # nothing awaits anything that suspends
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


def start_floor(tmp, body: bytes, ctype: str):
    port = free_port()
    path = os.path.join(tmp, f"floor-{port}.bin")
    with open(path, "wb") as f:
        f.write(body)
    with open(os.path.join(tmp, "floor_app.py"), "w") as f:
        f.write(FLOOR_APP)
    env = dict(os.environ, FLOOR_BODY=path, FLOOR_CT=ctype, PYTHONPATH=tmp)
    p = subprocess.Popen(["taskset", "-c", "0", PY, "-m", "uvicorn", "floor_app:app", "--port", str(port),
                          "--loop", "uvloop", "--http", "httptools", "--workers", "1", "--log-level", "warning",
                          "--no-access-log"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait(f"http://127.0.0.1:{port}/", p)
    return p, f"http://127.0.0.1:{port}"


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()


def wrk(url, path, body, accept, conns, seconds, tmp):
    lua = os.path.join(tmp, "post.lua")
    with open(lua, "w") as f:
        f.write(f'wrk.method = "POST"\nwrk.body = {json.dumps(json.dumps(body))}\n'
                f'wrk.headers["Content-Type"] = "application/json"\nwrk.headers["Accept"] = "{accept}"\n')
    out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--latency", "-s", lua,
                          url + path], capture_output=True, text=True, timeout=seconds + 30).stdout

    def lat(pct):
        m = re.search(rf"^\s+{pct}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        v, unit = float(m.group(1)), m.group(2)
        return v * {"us": 1, "ms": 1e3, "s": 1e6}[unit]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"wrk saw errors: {out}")
    return {"p50": lat(50), "p99": lat(99), "rps": rps}


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
    path, body, accept = case
    settle(url)
    one = wrk(url, path, body, accept, 1, seconds, tmp)
    settle(url)
    many = wrk(url, path, body, accept, 32, seconds, tmp)
    return {"p50_us": one["p50"], "p99_us": one["p99"], "max_rps": many["rps"]}


def alternate(cname: str, rounds: int, seconds: int) -> None:
    """posenc's hot path and the floor for one response, both servers up the whole time and
    measured in turn, so that both see the same stretch of a noisy machine."""
    case = CASES[cname]
    with tempfile.TemporaryDirectory() as tmp:
        p, url, _ = start_posenc(tmp, {})
        fp = None
        try:
            r = httpx.post(url + case[0], json=case[1], headers={"accept": case[2]})
            assert r.status_code == 200, r.text
            ctype = r.headers["content-type"]
            fp, furl = start_floor(tmp, r.content, ctype)
            print(f"{cname}: posenc and the floor alternated, {seconds} s each")
            for i in range(rounds):
                q = measure(url, case, seconds, tmp)
                f = measure(furl, ("/", {}, ctype), seconds, tmp)
                print(f"round {i + 1}: posenc p50 {q['p50_us']:.0f} µs, {q['max_rps']:.0f}/s; floor p50 "
                      f"{f['p50_us']:.0f} µs, {f['max_rps']:.0f}/s; p50/floor {q['p50_us'] / f['p50_us']:.2f}, "
                      f"rps/floor {q['max_rps'] / f['max_rps']:.2f}", flush=True)
        finally:
            stop(p)
            if fp is not None:
                stop(fp)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--alternate", metavar="CASE", choices=list(CASES),
                    help="only this response: posenc and the floor side by side, measured in turn")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.alternate:
        return alternate(a.alternate, a.rounds, a.seconds)
    with tempfile.TemporaryDirectory() as tmp:
        servers = {"hot path (simd)": {}, "FastAPI route": {"POSENC_FAST_PATH": "0"},
                   "hot path (numpy)": {"POSENC_BACKEND": "numpy"}}
        results = {}
        bodies = {}
        inproc = {}
        for name, env in servers.items():
            p, url, ns = start_posenc(tmp, env)
            try:
                for cname, case in CASES.items():
                    r = httpx.post(url + case[0], json=case[1], headers={"accept": case[2]})
                    assert r.status_code == 200, r.text
                    bodies.setdefault(cname, (r.content, r.headers["content-type"]))
                    results[(name, cname)] = measure(url, case, a.seconds, tmp)
                if name == "hot path (simd)":
                    inproc = {cname: inprocess_us(ns, case) for cname, case in CASES.items()}
                    big = {"head_dim": 128, "rope_theta": 500000.0, "positions": {"start": 0, "stop": 4096}}
                    for acc in ("application/json", "application/x-safetensors"):
                        results[(name, f"rope 4096x128 {acc.split('/')[1]}")] = measure(
                            url, ("/v1/rope", big, acc), a.seconds, tmp)
                    dec = {"num_heads": 32, "query": [8191], "key": {"start": 0, "stop": 8192}}
                    results[(name, "alibi 32x1x8192, binary")] = measure(
                        url, ("/v1/alibi", dec, "application/x-safetensors"), a.seconds, tmp)
                if name == "hot path (numpy)":
                    dec = {"num_heads": 32, "query": [8191], "key": {"start": 0, "stop": 8192}}
                    results[(name, "alibi 32x1x8192, binary")] = measure(
                        url, ("/v1/alibi", dec, "application/x-safetensors"), a.seconds, tmp)
            finally:
                stop(p)
        for cname, (body, ctype) in bodies.items():
            p, url = start_floor(tmp, body, ctype)
            try:
                results[("floor (raw ASGI)", cname)] = measure(url, ("/", {}, ctype), a.seconds, tmp)
            finally:
                stop(p)

    for cname, us in inproc.items():
        print(f"in-process, no HTTP server: {us:.1f} µs per '{cname}' request (median of 5)")
    print(f"{'server':<20} {'response':<28} {'p50 µs':>8} {'p99 µs':>8} {'max req/s':>10} {'p50/floor':>10} {'rps/floor':>10}")
    for (name, cname), r in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        floor = results.get(("floor (raw ASGI)", cname))
        rp = f"{r['p50_us'] / floor['p50_us']:.2f}" if floor else "-"
        rr = f"{r['max_rps'] / floor['max_rps']:.2f}" if floor else "-"
        print(f"{name:<20} {cname:<28} {r['p50_us']:>8.0f} {r['p99_us']:>8.0f} {r['max_rps']:>10.0f} {rp:>10} {rr:>10}")


if __name__ == "__main__":
    main()
