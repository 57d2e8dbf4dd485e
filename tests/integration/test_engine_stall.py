"""An engine stalled (SIGSTOP) while a real ``posenc serve`` (1 worker) keeps getting requests for
new specs, each asked many times: every request is answered exactly (computed) meanwhile, and
once the engine runs again each spec is built at most twice, however often (and however much
further) it was asked during the stall: the ask that was on its way when the engine stopped, then
one at the longest reach asked meanwhile (a worker coalesces its asks: one per table in flight,
engine/reader/client.py). Without coalescing, each longer reach queued one more ask, and each was a build
(an on-demand table's length is the reach rounded up to a power of two: up to six per spec here). Load on
127.0.0.1 only."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from posenc.engine.answer import pipeline
from posenc.engine.reader.client import ASK_AGAIN_S, Client
from posenc.engine.tables.base import DEFAULT_LENGTH, on_demand_length
from tests.procs import wait_for
from tests.service_cases import BIN, CONFIG, reference_safetensors

pytestmark = pytest.mark.slow

SPECS = [{"head_dim": 16, "rope_theta": 3000.0 + k} for k in range(12)]


def test_a_stalled_engine_builds_each_spec_at_most_twice_when_it_runs_again(procs, ns):
    server = procs.serve(CONFIG, workers=1, namespace=ns)  # (each worker has its own ask in flight)
    c = Client(namespace=ns)
    engine = server.engine_pid()
    before = c.call({"op": "stats"})["builds"]
    reach: dict = {}  # digest -> the longest reach asked of it
    os.kill(engine, signal.SIGSTOP)
    stalled = time.monotonic()
    try:
        n = 0
        with httpx.Client(base_url=server.url, timeout=30) as h:
            # each spec asked 6 times at a growing reach, through a stall longer than a worker's
            # re-ask interval (ASK_AGAIN_S): the load's length, a lower bound that makes the
            # worker's asks come due again meanwhile; no count or speed within it is asserted
            while n < 6 * len(SPECS) or time.monotonic() - stalled < ASK_AGAIN_S + 1.0:
                spec = SPECS[n % len(SPECS)]
                body = {**spec, "positions": [n % 4000, min(131071, 3000 + 150 * n)]}  # reach grows
                r = h.post("/v1/rope", json=body, headers=BIN)
                assert r.status_code == 200 and r.content == reference_safetensors("rope", body), body
                d = pipeline.parse("rope", body).table.digest
                reach[d] = max(reach.get(d, 0), max(body["positions"]) + 1)
                n += 1
    finally:
        os.kill(engine, signal.SIGCONT)
    # done: every spec stored at the longest reach asked of it. Any ask still queued anywhere
    # reaches no further (the requests stopped), so the engine holds it and builds nothing more.
    need = {d: on_demand_length(r, DEFAULT_LENGTH) for d, r in reach.items()}
    assert len(need) == len(SPECS)
    wait_for(
        lambda: all(
            c.manifest(force=True)["tables"].get(d, {}).get("length", 0) >= k for d, k in need.items()
        ),
        60,
        0.05,
        "every spec stored at the longest reach asked of it",
    )
    digests = set(need)
    print(f"{n} requests during the stall")
    builds = c.call({"op": "stats"})["builds"]
    new = {d: k for d, k in builds.items() if d not in before}
    assert set(new) == digests and max(new.values()) <= 2, new
    assert server.engine_pid() == engine and server.stop() == 0, server.output()
