"""An engine stalled (SIGSTOP) while a real ``posenc serve`` (1 worker) keeps getting requests for
new specs, each asked many times: every request is answered exactly (computed) meanwhile, and
once the engine runs again each spec is built at most twice, however often (and however much
further) it was asked during the stall: the ask that was on its way when the engine stopped, then
one at the longest reach asked meanwhile (a worker coalesces its asks: one per table in flight,
engine/client.py). Without coalescing, each longer reach queued one more ask, and each was a build
(an on-demand table's length is the reach rounded up to a power of two: up to six per spec here). Load on
127.0.0.1 only, bounded in time."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from posenc.engine import pipeline
from posenc.engine.client import Client
from tests.procs import wait_for
from tests.service_cases import BIN, CONFIG, reference_safetensors

pytestmark = pytest.mark.slow

SPECS = [{"head_dim": 16, "rope_theta": 3000.0 + k} for k in range(12)]


def test_a_stalled_engine_builds_each_spec_at_most_twice_when_it_runs_again(procs, ns):
    server = procs.serve(CONFIG, workers=1, namespace=ns)  # (each worker has its own ask in flight)
    c = Client(namespace=ns)
    engine = server.engine_pid()
    before = c.call({"op": "stats"})["builds"]
    os.kill(engine, signal.SIGSTOP)
    try:
        n, end = 0, time.monotonic() + 5.0  # longer than a worker's re-ask interval (2 s)
        with httpx.Client(base_url=server.url, timeout=30) as h:
            while time.monotonic() < end:
                spec = SPECS[n % len(SPECS)]
                body = {**spec, "positions": [n % 4000, min(131071, 3000 + 150 * n)]}  # reach grows
                r = h.post("/v1/rope", json=body, headers=BIN)
                assert r.status_code == 200 and r.content == reference_safetensors("rope", body), body
                n += 1
    finally:
        os.kill(engine, signal.SIGCONT)
    t0 = time.monotonic()
    digests = {pipeline.parse("rope", {**s, "positions": [0]}).table.digest for s in SPECS}
    wait_for(lambda: digests <= set(c.manifest(force=True)["tables"]), 60, 0.05, "every spec stored")
    print(f"{n} requests during the stall; every spec stored {time.monotonic() - t0:.2f} s after SIGCONT")
    time.sleep(3.0)  # asks still queued anywhere would build again now
    builds = c.call({"op": "stats"})["builds"]
    new = {d: k for d, k in builds.items() if d not in before}
    assert set(new) == digests and max(new.values()) <= 2, new
    assert n > 5 * len(SPECS), n
    assert server.engine_pid() == engine and server.stop() == 0, server.output()
