"""What the engine's checksum sweep costs the tail. A script, not a test:

    python tests/bench/bench_sweep_tail.py [--rates 5000,15000] [--seconds 10] [--rounds 3]
        [--interval 1] [--server-cpus 0] [--client-cpus 1]

``posenc serve --workers 1`` (the default tables, its engine and its worker pinned to
``--server-cpus``, as ``posenc loadtest`` runs it) is started twice per round, alternately with
``--verify-interval 0`` (no sweeps) and ``--verify-interval INTERVAL`` (a full checksum of every
table each INTERVAL seconds: at 1 s, sixty times the default), and loadtest's open-loop probe
(loadtest/drivers/probe.py, pinned to ``--client-cpus``) offers each rate for ``--seconds``, its requests
drawn at random over the default tables by loadtest's own payloads (RoPE rows, ALiBi decode
blocks, 3:1). Printed: per rate, the medians over rounds of p50 / p99 / p99.9 with and
without sweeps, and their ratios; a ratio near 1.0 says the sweep costs the tail nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from posenc.loadtest import servers  # noqa: E402
from posenc.loadtest.drivers import probe  # noqa: E402

KINDS = "rope-row:3,alibi-decode:1"


def one_server(interval: float, rates: list[float], seconds: float, cpus: str, client_cpus: str) -> dict:
    """{rate: percentiles in µs} of one posenc serve with this --verify-interval."""
    port, ns = servers.free_port(), f"bsweep-{uuid.uuid4().hex[:8]}"
    with servers.start_posenc(port, ns, cpus=cpus, args=("--verify-interval", str(interval))) as srv:
        srv.wait_ready()
        if client_cpus:
            os.sched_setaffinity(0, {int(c) for c in client_cpus.split(",")})
        steps = probe.sweep(f"http://127.0.0.1:{port}", rates, seconds, kinds=KINDS, warmup=1.0)
    left, _ = servers.wait_shm_clean(ns)
    assert not left, f"left in /dev/shm: {left}"
    bad = [s for s in steps if s.errors or s.timeouts]
    assert not bad, [(s.rate, s.errors, s.timeouts) for s in bad]
    return {s.rate: s.percentiles_us for s in steps}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="5000,15000")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--interval", type=float, default=1.0, help="--verify-interval of the sweeping server")
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--client-cpus", default="1")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    runs: dict[float, list[dict]] = {0.0: [], args.interval: []}
    for k in range(args.rounds):
        for interval in runs if k % 2 == 0 else reversed(list(runs)):
            runs[interval].append(
                one_server(interval, rates, args.seconds, args.server_cpus, args.client_cpus)
            )
            print(f"round {k + 1}, --verify-interval {interval:g}: done", file=sys.stderr, flush=True)
    print(
        f"# bench_sweep_tail: {os.cpu_count()} cpus, server on CPU {args.server_cpus}, probe on CPU "
        f"{args.client_cpus}, {args.rounds} rounds of {args.seconds:g} s per rate, kinds {KINDS}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print()
    print(
        f"| rate | p50 none / every {args.interval:g} s | p99 none / every {args.interval:g} s | "
        f"p99.9 none / every {args.interval:g} s | p99 ratio | p99.9 ratio |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for rate in rates:
        med = {
            i: {q: statistics.median(r[rate][q] for r in rs) for q in ("p50", "p99", "p99.9")}
            for i, rs in runs.items()
        }
        off, on = med[0.0], med[args.interval]
        print(
            f"| {rate:,.0f}/s | {off['p50']:.0f} / {on['p50']:.0f} µs | {off['p99']:.0f} / {on['p99']:.0f} µs | "
            f"{off['p99.9']:.0f} / {on['p99.9']:.0f} µs | {on['p99'] / off['p99']:.2f} | "
            f"{on['p99.9'] / off['p99.9']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
