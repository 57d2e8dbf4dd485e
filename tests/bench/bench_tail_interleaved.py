"""posenc's tail against the bare server's, the two alternated second by second. A script, not a
test:

    python tests/bench/bench_tail_interleaved.py [--rates 15000,30000] [--steps 60] [--step-s 1]
        [--scenario realistic-mix|decode] [--kinds rope-row:3,alibi-decode:1] [--blocks 6]
        [--server-cpus 0] [--client-cpus 1] [--variant "as shipped"] [--aa]

bench_tail.py measures each server for 5 s per rate in turn, restarting them every round. This
machine's stalls (kdamond, the hypervisor, other tenants: a few a second, a few milliseconds each,
bench_tail.py kernel_threads) come unevenly, so that which server's 5 s held more of them decides
a round's p99 ratio: the same build read pooled p99 ratios from 0.46x to 1.73x in three runs. Here
both servers run the whole time on the same core: ``posenc serve --workers 1`` (the default
tables; the whole serve pinned to ``--server-cpus``: its worker, engine, standby and checksummer)
and the bare server (asyncio + httptools on uvloop, answering each request with posenc's own
bytes), and loadtest's open-loop probe (on ``--client-cpus``) offers each rate for ``--step-s`` to
one, then the other, ``--steps`` times each, the order turning every step. While the bare server
is measured every posenc process is held with SIGSTOP, so that nothing of posenc's runs in the bare
server's steps (its background work counts in its own steps only); it is resumed (SIGCONT) for
its own, whose first 0.3 s are not measured (timers due while it was held run then). Both are
warmed first as bench_tail.py warms them (2 s at the first rate).

``--variant`` runs posenc as bench_tail.py's variant of that name (background sources removed; the
processes a variant holds, bench_tail.py's STOPPED, are held in posenc's steps too).

``--aa`` puts a second bare server in posenc's place (posenc held throughout): two identical
servers, whose ratios show how far this machine moves each figure with nothing to find.

Printed per rate: each server's requests pooled over its steps (p50, p99, p99.9) and the ratios
to the bare server's; the ratios of the same pooling over ``--blocks`` consecutive parts of the
run (their range: how much the ratio still moves); the ratio of the two servers' median step's
p99 and p99.9 (each 1-s step's own percentile: a stall moves it for its own step only), with a
90% bootstrap interval; and the CPU a request took (every process of the server, the whole posenc
serve, /proc schedstat over each step, its warm-up included) and its ratio to the bare server's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "bench")]

from bench_tail import (  # noqa: E402  (beside this script)
    STOPPED,
    VARIANTS,
    _pooled,
    _settle,
    _warm,
    cpu_by_role,
    described,
    roles,
    site_dirs,
    site_env,
    workload_args,
    workload_of,
)

from posenc.loadtest import servers  # noqa: E402
from posenc.loadtest.drivers import probe  # noqa: E402
from posenc.loadtest.workloads import scenario  # noqa: E402

WARMUP_S = 0.3  # of each step, not measured (posenc's timers due while it was held run first)


def _hold(pid: int, sig, keep=()) -> None:
    """``sig`` to every process of posenc serve ``pid``'s tree but those whose role is in ``keep``
    (read again each time: the engine starts its checksummer for each sweep)."""
    for p, role in roles(pid).items():
        if role in keep:
            continue
        try:
            os.kill(p, sig)
        except ProcessLookupError:  # (a checksummer that just ended)
            pass


def _median_ratio(steps, base, q: float, draws: int = 2000) -> str:
    """The ratio of the two servers' median step's ``q`` percentile (each 1-s step's own, over the
    steps the probe kept), and its 90% bootstrap interval (the steps of each drawn again with
    replacement): a statistic that one stall in a step moves only for that step."""
    a, b = ([_pooled([st]).get_value_at_percentile(q) for st in x if st] for x in (steps, base))
    if not a or not b:
        return ""
    rng = random.Random(1)
    r = sorted(
        statistics.median(rng.choices(a, k=len(a))) / statistics.median(rng.choices(b, k=len(b)))
        for _ in range(draws)
    )
    return f"{statistics.median(a) / statistics.median(b):.2f}× ({r[draws // 20]:.2f}–{r[-draws // 20]:.2f})"


def _cpu_s(pid: int) -> float:
    """The CPU seconds so far of every process of ``pid``'s tree (the whole posenc serve)."""
    return sum(c for c, _ in cpu_by_role(pid).values())


def _cpu_per_request(steps) -> float | None:
    kept = [st for st in steps if st]
    return sum(st["cpu_s"] for st in kept) / sum(st["offered"] for st in kept) if kept else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="15000,30000")
    ap.add_argument("--steps", type=int, default=60, help="measured steps per server and rate")
    ap.add_argument("--step-s", type=float, default=1.0, help="measured seconds of a step")
    ap.add_argument("--blocks", type=int, default=6, help="parts of the run whose ratios are given too")
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--client-cpus", default="1")
    ap.add_argument(
        "--variant", choices=list(VARIANTS), default="as shipped", help="bench_tail.py's variants"
    )
    ap.add_argument(
        "--aa",
        action="store_true",
        help="A/A: a second bare server in posenc's place (posenc held throughout), to show how far "
        "two identical servers' ratio moves",
    )
    workload_args(ap)
    args = ap.parse_args()
    flags, mode = VARIANTS[args.variant]
    stopped = STOPPED.get(args.variant, ())
    rates = [float(r) for r in args.rates.split(",")]
    os.sched_setaffinity(0, {int(c) for c in args.client_cpus.split(",")})
    workload = workload_of(args)
    # {(server, rate): [each step's {"hdr", "cpu_s", "offered"}, None where the probe or server fell behind]}
    got: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench_tail_interleaved.") as tmp:
        port, ns = servers.free_port(), f"btaili-{uuid.uuid4().hex[:8]}"
        env = site_env(*site_dirs(tmp), mode)
        with servers.start_posenc(port, ns, cpus=args.server_cpus, env=env, args=flags) as srv:
            srv.wait_ready()
            url = f"http://127.0.0.1:{port}"
            pool = scenario.prepare(workload, url, {}, tmp)
            _settle(srv.proc.pid)
            with contextlib.ExitStack() as floors:
                bares = []
                for _ in range(2 if args.aa else 1):
                    floor = servers.start_floor(
                        servers.free_port(),
                        None,
                        args.server_cpus,
                        kind="bare",
                        requests=pool["floor_requests"],
                    )
                    bares.append(floors.enter_context(floor))
                    bares[-1].wait_ready(30)
                # --aa: a second bare server in posenc's place (posenc held throughout)
                urls = {"posenc": bares[-1].url if args.aa else url, "bare": bares[0].url}
                pids = {"posenc": bares[-1].proc.pid if args.aa else srv.proc.pid, "bare": bares[0].proc.pid}
                for u in urls.values():
                    _warm(u, pool, rates[0])
                _hold(srv.proc.pid, signal.SIGSTOP)
                try:
                    for rate in rates:
                        for i in range(args.steps):
                            for name in ("bare", "posenc")[:: 1 if i % 2 else -1]:
                                if name != "bare" and not args.aa:
                                    _hold(srv.proc.pid, signal.SIGCONT, keep=stopped)
                                cpu0 = _cpu_s(pids[name])
                                s = probe.run_step(
                                    "127.0.0.1",
                                    int(urls[name].rsplit(":", 1)[1]),
                                    pool["requests"],
                                    pool["kinds"],
                                    pool["names"],
                                    rate,
                                    args.step_s,
                                    warmup=WARMUP_S,
                                )
                                if name != "bare" and not args.aa:
                                    _hold(srv.proc.pid, signal.SIGSTOP)
                                assert not s.errors, (name, rate, s.errors)
                                behind = s.fell_behind or s.timeouts
                                cpu = _cpu_s(pids[name]) - cpu0  # (the warm-up's requests too)
                                offered = rate * (WARMUP_S + args.step_s)
                                got.setdefault((name, rate), []).append(
                                    None if behind else {"hdr": s.hdr, "cpu_s": cpu, "offered": offered}
                                )
                        print(f"{rate:g}/s done", file=sys.stderr, flush=True)
                finally:
                    _hold(srv.proc.pid, signal.SIGCONT)
        left, _ = servers.wait_shm_clean(ns)
        assert not left, f"left in /dev/shm: {left}"
    print(
        f"# bench_tail_interleaved: {os.cpu_count()} cpus, both servers on CPU {args.server_cpus}, probe on "
        f"CPU {args.client_cpus}, {args.steps} steps of {args.step_s:g} s per server and rate, alternated, "
        f"{described(args)} ({pool['pool']} requests), {'A/A' if args.aa else 'posenc ' + args.variant}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print()
    print(
        "| rate | server | requests | steps fell behind | p50 | p99 | p99.9 | p99 ÷ bare | p99.9 ÷ bare "
        f"| p99 ÷ bare, {args.blocks} parts | p99.9 ÷ bare, {args.blocks} parts "
        "| median step's p99 ÷ bare (90% interval) | median step's p99.9 ÷ bare (90% interval) "
        "| CPU a request (÷ bare) |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|---:|")
    for rate in rates:
        steps = {n: got[(n, rate)] for n in ("bare", "posenc")}
        whole = {n: _pooled(st) for n, st in steps.items()}
        ends = [round(k * args.steps / args.blocks) for k in range(args.blocks + 1)]  # (blocks parts)
        parts = {n: [_pooled(st[a:b]) for a, b in zip(ends, ends[1:])] for n, st in steps.items()}
        for n, h in whole.items():
            label = (
                "bare"
                if n == "bare"
                else "bare, a second one (A/A)"
                if args.aa
                else f"posenc, {args.variant}"
            )
            if h is None:
                print(f"| {rate:,.0f}/s | {label} | fell behind | | | | | | | | | | | |")
                continue
            p = {q: h.get_value_at_percentile(q) for q in (50.0, 99.0, 99.9)}
            cells = ["", "", "", "", "", ""]
            b = whole["bare"]
            if n != "bare" and b is not None:
                cells[:2] = [f"{p[q] / b.get_value_at_percentile(q):.2f}×" for q in (99.0, 99.9)]
                for j, q in enumerate((99.0, 99.9)):
                    r = sorted(
                        x.get_value_at_percentile(q) / y.get_value_at_percentile(q)
                        for x, y in zip(parts[n], parts["bare"])
                        if x is not None and y is not None
                    )
                    cells[2 + j] = ", ".join(f"{v:.2f}" for v in r)
                    cells[4 + j] = _median_ratio(steps[n], steps["bare"], q)
            cpu, cpu_bare = _cpu_per_request(steps[n]), _cpu_per_request(steps["bare"])
            cells.append(
                f"{cpu * 1e6:.1f} µs" + (f" ({cpu / cpu_bare:.2f}×)" if n != "bare" and cpu_bare else "")
            )
            print(
                f"| {rate:,.0f}/s | {label} | {h.get_total_count():,} | {sum(s is None for s in steps[n])} | "
                f"{p[50.0]} µs | {p[99.0]} µs | {p[99.9]} µs | " + " | ".join(cells) + " |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
