"""What a large JSON answer costs the other requests of its worker: /healthz latency on the same
worker while answers of 20-60 MiB of JSON text are built and sent, over /healthz on the idle worker
in the same round. A script, not a test:

    python tests/bench/bench_big_answer.py [--rounds 3] [--seconds 4] [--cpus 0]

Each round starts ``posenc serve --workers 1`` (the default tables; pinned to ``--cpus``, empty for
none), then asks /healthz back to back on its own connection for ``--seconds`` with nothing else
running (the baseline), then again while another connection asks, one after another, for large
JSON answers drawn at random (sinusoidal or rope, widths 32 to 128, rows at any offset in the
first million positions, sized to hold 20 to 60 MiB of text: under the 64 MiB answer limit, so each
is answered). Printed per round and as medians over rounds: /healthz p50, p99 and max, idle and
loaded, and loaded over idle; and the large answers' count and median time.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from posenc.engine.answer import pipeline  # noqa: E402
from posenc.loadtest import servers  # noqa: E402
from posenc.service.core import sizing  # noqa: E402

MIB = 1 << 20
JSON = {"content-type": "application/json", "accept": "application/json"}


def large_body(rng: random.Random) -> tuple[str, dict]:
    """A random large JSON request whose bound is 20-60 MiB (so under the answer limit)."""
    family = rng.choice(["sinusoidal", "rope"])
    width = rng.choice([32, 64, 128])
    target = rng.uniform(20, 60) * MIB
    spec = {"d_model": width} if family == "sinusoidal" else {"head_dim": width}
    probe = {**spec, "positions": {"start": 0, "stop": 1024}}
    per_row = sizing.json_bound(pipeline.parse(family, probe)) / 1024
    n = int(target / per_row)
    start = rng.randrange(0, 1 << 20)
    return family, {**spec, "positions": {"start": start, "stop": start + n}}


def percentiles(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {
        "p50": xs[len(xs) // 2] * 1e3,
        "p99": xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1e3,
        "max": xs[-1] * 1e3,
        "n": len(xs),
    }


def healthz_for(url: str, seconds: float) -> list[float]:
    out = []
    with httpx.Client(base_url=url, timeout=60) as c:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t = time.perf_counter()
            assert c.get("/healthz").status_code == 200
            out.append(time.perf_counter() - t)
    return out


def one_round(rng: random.Random, seconds: float, cpus: str) -> dict:
    port, ns = servers.free_port(), f"bbig-{uuid.uuid4().hex[:8]}"
    with servers.start_posenc(port, ns, cpus=cpus or None) as srv:
        srv.wait_ready()
        url = f"http://127.0.0.1:{port}"
        idle = healthz_for(url, seconds)
        stop, big = threading.Event(), []

        def large():
            with httpx.Client(base_url=url, timeout=120) as c:
                while not stop.is_set():
                    family, body = large_body(rng)
                    t = time.perf_counter()
                    r = c.post(f"/v1/{family}", content=orjson.dumps(body), headers=JSON)
                    assert r.status_code == 200, r.text[:200]
                    big.append((time.perf_counter() - t, len(r.content) / MIB))

        th = threading.Thread(target=large, daemon=True)
        th.start()
        loaded = healthz_for(url, seconds)
        stop.set()
        th.join(120)
    return {"idle": percentiles(idle), "loaded": percentiles(loaded), "big": big}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--cpus", default="0")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    rounds = []
    for i in range(a.rounds):
        r = one_round(rng, a.seconds, a.cpus)
        rounds.append(r)
        big = r["big"]
        print(
            f"round {i + 1}: /healthz idle p50 {r['idle']['p50']:.2f} ms p99 {r['idle']['p99']:.2f} ms | "
            f"beside large answers p50 {r['loaded']['p50']:.2f} ms p99 {r['loaded']['p99']:.2f} ms "
            f"max {r['loaded']['max']:.1f} ms ({r['loaded']['n']} asked) | {len(big)} large answers, "
            f"median {statistics.median(b[1] for b in big) if big else 0:.0f} MiB in "
            f"{statistics.median(b[0] for b in big) if big else 0:.2f} s",
            flush=True,
        )

    def med(side, key):
        return statistics.median(r[side][key] for r in rounds)

    print(f"\nmedians over {a.rounds} rounds (ms):")
    print(f"{'':>10} {'p50':>8} {'p99':>8} {'max':>8}")
    for side in ("idle", "loaded"):
        print(f"{side:>10} {med(side, 'p50'):8.2f} {med(side, 'p99'):8.2f} {med(side, 'max'):8.1f}")
    ratio = statistics.median(r["loaded"]["p99"] / r["idle"]["p99"] for r in rounds)
    ratio50 = statistics.median(r["loaded"]["p50"] / r["idle"]["p50"] for r in rounds)
    print(f"loaded / idle: p50 x{ratio50:.1f}, p99 x{ratio:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
