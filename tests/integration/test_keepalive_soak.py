"""A short soak of pooled keep-alive clients against a real ``posenc serve`` (2 HTTP workers and
its gRPC server, default settings, 127.0.0.1 only), no faults: /v1 JSON and binary (httpx),
KServe v2 REST (tritonclient.http: geventhttpclient's pool, which keeps idle connections
without limit and does not retry a POST) and gRPC (tritonclient.grpc). Each client sends bursts
and idles between them, now briefly, now around 5 s (httpx's own idle expiry, and the server's
keep-alive timeout before it was made longer than clients' reuse: the gap at which a pooled
client's request met the server's close). Every request must succeed with the exact answer; each
client's plan (its bursts and gaps, from its seed) is fixed, so every run sends as many requests."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

from posenc.engine.answer.pipeline import compute
from tests.integration.kserve_cases import wait_grpc_ready
from tests.service_cases import BIN, CONFIG, reference_safetensors

pytestmark = pytest.mark.slow
BURSTS = 12  # per client: a burst of 1-3 requests, then an idle gap (every third one around 5 s)
POS = [[0, 1, 2], [5, 17, 4095], [100, 2047, 2048]]


def _plan(seed: int) -> list[tuple[int, float]]:
    """A client's bursts: (requests, the idle gap after them in s), from its seed."""
    rng = random.Random(seed)
    return [
        (rng.randint(1, 3), rng.uniform(4.9, 5.1) if k % 3 == 1 else rng.uniform(0.0, 0.3))
        for k in range(BURSTS)
    ]


def _client(kind: str, server, seed: int, out: list) -> None:
    rng = random.Random(seed)
    if kind in ("json", "binary"):
        import httpx

        c = httpx.Client(base_url=server.url, timeout=30)

        def send(p):
            body = {"head_dim": 64, "positions": p}
            if kind == "json":
                r = c.post("/v1/rope", json=body)
                return r.status_code == 200 and np.array_equal(
                    np.asarray(r.json()["cos"], np.float32), compute("rope", body)["cos"]
                )
            r = c.post("/v1/rope", json=body, headers=BIN)
            return r.status_code == 200 and r.content == reference_safetensors("rope", body)
    else:
        import tritonclient.grpc as grpcclient
        import tritonclient.http as httpclient

        mod = httpclient if kind == "rest" else grpcclient
        c = mod.InferenceServerClient(server.url[len("http://") :] if kind == "rest" else server.grpc_url)

        def send(p):
            inp = mod.InferInput("positions", [len(p)], "INT64")
            inp.set_data_from_numpy(np.asarray(p, np.int64))
            r = c.infer("rope", [inp], parameters={"spec": '{"head_dim": 64}'})
            return (
                r.as_numpy("cos").tobytes()
                == compute("rope", {"head_dim": 64, "positions": p})["cos"].tobytes()
            )

    try:
        for n, idle in _plan(seed):
            for _ in range(n):
                try:
                    out.append((kind, send(rng.choice(POS)), None))
                except Exception as e:  # (HTTPConnectionClosed, a reset, an RPC error: a failure)
                    out.append((kind, False, repr(e)))
            time.sleep(idle)  # the soak's idle gap: paced on purpose (the pooled connection waits)
    finally:
        c.close()


def test_pooled_keep_alive_clients_of_every_protocol_never_fail_without_faults(procs):
    server = procs.serve(CONFIG, workers=2, grpc=True)
    wait_grpc_ready(server)
    out: list = []
    kinds = ("json", "binary", "rest", "grpc")
    seeds = {(kind, k * 10 + i) for k, kind in enumerate(kinds) for i in range(3)}
    threads = [threading.Thread(target=_client, args=(kind, server, seed, out)) for kind, seed in seeds]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:  # a bound on a hang: the longest plan's gaps, and time for its requests
        t.join(max(sum(idle for _, idle in _plan(seed)) for _, seed in seeds) + 120)
    assert not any(t.is_alive() for t in threads), "a soak client is still sending"
    bad = [(kind, why) for kind, ok, why in out if not ok]
    per = {kind: sum(1 for k, _, _ in out if k == kind) for kind in kinds}
    planned = {kind: sum(n for k, seed in seeds if k == kind for n, _ in _plan(seed)) for kind in kinds}
    print(f"keep-alive soak, {time.monotonic() - t0:.0f} s: {len(out)} requests {per}, {len(bad)} failed")
    assert not bad, bad[:5]
    assert per == planned, (per, planned)  # every request of every plan was sent and answered
    assert server.stop() == 0, server.output()
