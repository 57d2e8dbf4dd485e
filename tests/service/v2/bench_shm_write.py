"""What writing outputs into a client's shared memory costs, in process (a script, not a test):

    python tests/service/v2/bench_shm_write.py [--rounds 5] [--seconds 1]

One engine (tests/procs.py) holding the rope table of tests/bench/bench_kserve.py (head_dim 128,
θ = 500000, 16384 rows); a V2 and its gRPC service in this process, attached to it. The request
is bench_kserve's [64, 128] INT64 batch with cos and sin (float32, 4 MiB each) asked into a
region the client registered, as a serialized ModelInferRequest handed to ``ModelInfer``
(no network): with the C shortcut (``shortcut=c``, the template learnt first) and on the full
path (``shortcut=off``). Also the [128] single row of the same batch. Rounds alternate; the
medians of the rounds come last, in ms per request.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)

from posenc.engine.reader.client import Client  # noqa: E402
from posenc.service.core.settings import Settings  # noqa: E402
from posenc.service.v2.core import V2  # noqa: E402
from posenc.service.v2.grpc_server import GrpcV2  # noqa: E402
from posenc.service.v2.shm import remove_registry  # noqa: E402
from tests.procs import Procs, unique_namespace  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
from bench_kserve import CONFIG, SPEC, infer_request  # noqa: E402  (the benchmark's table and requests)


class Ctx:
    async def abort(self, code, msg):
        raise RuntimeError(code, msg)


def per_call(loop, server, data: bytes, seconds: float) -> float:
    """Median ms per ModelInfer over ~``seconds`` of calls (10 timings)."""
    loop.run_until_complete(server.ModelInfer(data, Ctx()))
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds / 10:
        loop.run_until_complete(server.ModelInfer(data, Ctx()))
        n += 1
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        for _ in range(n):
            loop.run_until_complete(server.ModelInfer(data, Ctx()))
        times.append((time.perf_counter() - t0) / n * 1e3)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0, help="per figure per round")
    a = ap.parse_args()
    batch = np.random.default_rng(3).integers(0, 16384, size=(64, 128))
    key = f"posenc_bench_{uuid.uuid4().hex[:8]}"
    path = os.path.join("/dev/shm", key)
    size = 2 * batch.size * SPEC["head_dim"] * 4
    with tempfile.TemporaryDirectory() as tmp:
        procs = Procs(tmp)
        ns = unique_namespace("pbench")
        with open(path, "wb") as f:
            f.truncate(size)
        try:
            procs.engine(CONFIG, ns)
            loop = asyncio.new_event_loop()
            servers = {}
            for shortcut in ("c", "off"):
                s = Settings(namespace=ns, shortcut=shortcut)
                client = Client(s.shm_dir, s.namespace)
                client.attach_all(True, 30)
                servers[shortcut] = GrpcV2(V2(s, client, lambda: True))
            servers["c"].v2.regions.register(key, "/" + key, 0, size)
            reqs = {"batch": infer_request(batch, region=key), "single": infer_request(batch[0], region=key)}
            for data in reqs.values():  # the shortcut learns at the full path's second answer
                for _ in range(3):
                    loop.run_until_complete(servers["c"].ModelInfer(data, Ctx()))
            assert servers["c"].hot.grpc(reqs["batch"]) is not None, "the shortcut did not learn the batch"
            got: dict = {}
            for r in range(a.rounds):
                for what, data in reqs.items():
                    for shortcut, server in servers.items():
                        got.setdefault((what, shortcut), []).append(per_call(loop, server, data, a.seconds))
                print(
                    f"round {r + 1}: " + ", ".join(f"{w} {s} {v[-1]:.3f}" for (w, s), v in got.items()),
                    flush=True,
                )
            print("median ms per request (rounds):")
            for (what, shortcut), v in got.items():
                print(
                    f"  {what:6s} shortcut={shortcut:3s}: {statistics.median(v):.3f} ms  "
                    f"({', '.join(f'{x:.3f}' for x in v)})"
                )
            servers["c"].v2.regions.unregister(None)
        finally:
            os.unlink(path)
            remove_registry("/dev/shm", ns)
            procs.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
