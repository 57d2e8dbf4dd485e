"""What the metrics cost per hot request, in process. A script, not a test:

    python tests/bench/bench_metrics.py [--rounds 7] [--min-time 0.2]

One engine (a child process) holds a RoPE table; in this process the app's raw-ASGI front
(service/front/front.py) answers a repeated one-row RoPE request through the C shortcut, the way the
raw front does under uvicorn, with ``front.metrics`` set (a real counts file) and unset, in
alternated rounds; and ``Metrics.observe_at`` alone. Prints the median per call of each, and the
difference: the metrics' cost per hot request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid

from posenc.engine.reader.client import Client
from posenc.service.core.settings import Settings
from posenc.service.front.app import create_app
from posenc.service.metrics.counters import Metrics
from posenc.service.shortcut import templates as replay

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import timeit  # noqa: E402

CONFIG = {"length": 8192, "tables": [{"family": "rope", "spec": {"head_dim": 128, "rope_theta": 500000.0}}]}
BODY = json.dumps({"head_dim": 128, "rope_theta": 500000.0, "positions": [4096]}).encode()
SCOPE = {
    "type": "http",
    "method": "POST",
    "path": "/v1/rope",
    "headers": [
        (b"host", b"x"),
        (b"content-type", b"application/json"),
        (b"accept", b"application/x-safetensors"),
    ],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.2)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    cfg = os.path.join(tmp, "tables.json")
    with open(cfg, "w") as f:
        json.dump(CONFIG, f)
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    eng = subprocess.Popen(
        [sys.executable, "-m", "posenc.engine.process.main", "--tables", cfg, "--namespace", ns]
    )
    try:
        Client(namespace=ns).wait_ready(60)
        run(ns, tmp, a.rounds, a.min_time)
    finally:
        eng.terminate()
        eng.wait(30)


def run(ns: str, tmp: str, rounds: int, min_time: float) -> None:
    front = create_app(Settings(namespace=ns, shortcut="c" if replay.NATIVE else "off"))
    front.svc.attach_all(wait_s=30)
    loop = asyncio.new_event_loop()
    sent = []

    async def receive():
        return {"type": "http.request", "body": BODY, "more_body": False}

    async def send(m):
        sent.append(m)

    async def one():
        await front(SCOPE, receive, send)

    def call():
        sent.clear()
        loop.run_until_complete(one())

    call()
    call()  # the first answer taught the template: from here on the shortcut answers
    assert sent[0]["status"] == 200, sent
    metrics = Metrics(tmp, ns)
    with_m, without_m, observe = [], [], []
    base = Metrics.path_index("/v1/rope", "c")
    try:
        for _ in range(rounds):  # alternated, so both see the same stretch of a noisy machine
            front.metrics = metrics
            with_m.append(timeit(call, 5, min_time))
            front.metrics = None
            without_m.append(timeit(call, 5, min_time))
            observe.append(timeit(lambda: metrics.observe_at(base, 30e-6, 1234), 5, min_time))
    finally:
        metrics.close()
        loop.close()
    med = {
        k: statistics.median(v) * 1e6
        for k, v in (("with metrics", with_m), ("without metrics", without_m), ("observe_at alone", observe))
    }
    print(f"shortcut in use: {front.svc.shortcut}; {rounds} alternated rounds, medians (µs per request)")
    for k, v in med.items():
        print(f"  {k:<18} {v:8.3f}")
    print(f"  {'difference':<18} {med['with metrics'] - med['without metrics']:8.3f}")


if __name__ == "__main__":
    main()
