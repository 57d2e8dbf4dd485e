"""The realistic mix (issue 21) against the raw-ASGI floor, alternated round after round. A script,
not a test:

    python tests/bench/bench_mix.py [--seconds 5] [--rounds 5] [--new-specs-per-s 3] [--tables FILE]

One `posenc serve --lane on` worker pinned to core 0 with the default tables (or --tables), and the
floor (loadtest/floors/asgi_app.py under uvicorn with posenc's settings, answering each request of the pool
with exactly the bytes posenc answered it with) on the same core; wrk (C, closed loop, 64
connections) on core 1 cycles the realistic mix's pool (loadtest/workloads/mix.py: 2,048 requests drawn at
random over the tables' models, positions uniform over twice each table, /v1 and v2 REST, binary
and JSON). Each pool request is sent to posenc once first (as `posenc loadtest` does: the full path
answers a template's first request). Round after round, posenc is measured, with
--new-specs-per-s RoPE specs no table holds sent alongside (each built on demand), then the floor,
so both see the same stretch of a shared machine. Printed per round and as medians: requests/s,
the ratio, the cores posenc's processes used (/proc; 1.0: its pinned core saturated) and the share
of posenc's answers each way made them (`posenc_answer_path_total`: c, the lane's one C call from
the socket's bytes; shortcut; python). `posenc loadtest --scenario realistic-mix` gives the same
mix one wrk run each, with open-loop latencies and locust.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import types
import uuid

from bench_cliffs import SERVER_CPU, tree_cpu_s, wrk  # (this folder: run as a script)

from posenc.loadtest.drivers import wrk as wrk_tool
from posenc.loadtest.reports import paths
from posenc.loadtest.servers import free_port, start_floor, start_posenc
from posenc.loadtest.workloads import mix, scenario


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--new-specs-per-s", type=float, default=3.0)
    ap.add_argument("--tables", help="a table config (default: the engine's default set)")
    a = ap.parse_args()
    load = [os.getloadavg()[0]]
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        posenc = start_posenc(
            free_port(),
            f"bench-{uuid.uuid4().hex[:6]}",
            tables=a.tables,
            cpus=SERVER_CPU,
            args=("--lane", "on"),
        )
        floor = None
        try:
            posenc.wait_ready()
            opts = types.SimpleNamespace(scenario=mix.NAME, tables=a.tables)
            pool = scenario.prepare(opts, posenc.url, {}, tmp)  # posenc answers each once; the floor's bytes
            floor = start_floor(free_port(), requests=pool["floor_requests"], cpus=SERVER_CPU)
            floor.wait_ready()
            lua = os.path.join(tmp, "mix.lua")
            wrk_tool.script(lua, pool["items"])
            wrk(posenc.url, lua, 2, 64)  # warm-up: rows past the tables computed and kept, texts rendered
            print(
                f"pool: {pool['pool']} requests, {len(pool['names'])} kinds; posenc then the floor each round"
            )
            for rnd in range(a.rounds):
                before, cpu = paths.scrape(posenc.url), tree_cpu_s(posenc.proc.pid)
                specs = (
                    mix.NewSpecs(posenc.url, a.new_specs_per_s, seed=None) if a.new_specs_per_s > 0 else None
                )
                if specs:
                    specs.start()
                p = wrk(posenc.url, lua, a.seconds, 64)
                new = specs.stop() if specs else {"sent": 0, "ok": 0}
                cores = (tree_cpu_s(posenc.proc.pid) - cpu) / max(1, round(a.seconds))
                got = paths.shares(before, paths.scrape(posenc.url))
                f = wrk(floor.url, lua, a.seconds, 64)
                r = {
                    "rps": p["rps"],
                    "floor": f["rps"],
                    "ratio": p["rps"] / f["rps"],
                    "cores": cores,
                    **{k: got["shares"].get(k, 0.0) for k in paths.PATHS},
                }
                rounds.append(r)
                print(
                    f"round {rnd + 1}: posenc {r['rps']:.0f}/s, floor {r['floor']:.0f}/s, ratio {r['ratio']:.2f}, "
                    f"posenc {cores:.2f} cores; answers "
                    + ", ".join(f"{k} {r[k]:.2%}" for k in paths.PATHS)
                    + f"; new specs {new['ok']}/{new['sent']} answered 200",
                    flush=True,
                )
        finally:
            posenc.stop()
            if floor is not None:
                floor.stop()
    load.append(os.getloadavg()[0])
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    per_round = " ".join(f"{r['ratio']:.2f}" for r in rounds)
    print(
        f"\nmedians over {a.rounds} rounds (load average {load[0]:.2f} before, {load[1]:.2f} after): "
        f"posenc {med['rps']:.0f}/s, floor {med['floor']:.0f}/s, ratio {med['ratio']:.2f} "
        f"(per round: {per_round}); answers " + ", ".join(f"{k} {med[k]:.2%}" for k in paths.PATHS)
    )


if __name__ == "__main__":
    main()
