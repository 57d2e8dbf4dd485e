"""What each of posenc's own background sources costs the tail, measured one at a time. A script,
not a test:

    python tests/bench/bench_tail.py [--rates 15000,30000] [--seconds 5] [--rounds 3]
        [--server-cpus 0] [--client-cpus 1] [--engine-cpus CPUS] [--builds-per-s 2] [--no-settle]
        [--only VARIANT,...] [--scenario realistic-mix|decode] [--kinds rope-row:3,alibi-decode:1]

Each round starts ``posenc serve --workers 1`` (the default tables) once per variant, each with one
source removed or made sixty times as frequent, and the bare server (asyncio + httptools answering
exactly posenc's bytes: the tail this machine allows); loadtest's open-loop probe (pinned to
``--client-cpus``) offers each rate for ``--seconds`` to each in turn, its requests the realistic
mix's pool (loadtest/workloads/mix.py: 2,048 requests drawn at random over the default tables'
models, every family, positions over their context and past it, lists and ranges, binary and JSON,
/v1 and v2 REST). The order of the servers turns every round. ``--scenario decode`` sends
``posenc loadtest``'s default scenario instead: its pool of 512 requests of ``--kinds`` (an
inference worker's decode steps: one RoPE row, and one query's ALiBi block over keys 0..t, at
positions drawn over the decode context; loadtest/workloads/payloads.py), whose answers cost the
worker little more than the bare server's replay of them, so that what is left between the two
is what the rest of the serve (the engine, its standby, the checksummer) costs the worker.

The whole serve is pinned to ``--server-cpus`` (taskset: serve, which runs the one worker, the
engine, its standby and the checksummer all inherit it), as in a small pod where a worker shares
its core with everything else; ``--engine-cpus`` moves the engine, the standby and the checksummer
to other cores instead, for comparison. ``--no-settle`` measures without first waiting for
posenc's processes to be idle (the standby, started once the engine is ready, imports for a few
seconds: as after every engine restart). The variants:

- ``as shipped``: the defaults (the checksum sweep every 60 s in a child at idle priority; the
  standby at idle priority too until it becomes the engine, engine/process/main.py);
- ``no yield``: the standby at the scheduler's normal priority, as before it yielded (the
  sitecustomize below makes its priority calls do nothing);
- ``no sweep`` (``--verify-interval 0``) and ``sweep every 1 s`` (``--verify-interval 1``: the
  default tables summed each second, sixty times the default);
- ``no metrics flush``: the worker's thread that writes its counts to shared memory every 0.1 s
  (service/metrics/counters.py, FLUSH_S) waits an hour instead;
- ``gc off``: the garbage collector disabled in every posenc process;
- ``engine stopped`` and ``standby stopped``: the engine and its standby, or the standby alone,
  held with SIGSTOP for the probe's steps (the worker answers from the mapped tables alone), then
  resumed;
- ``no gRPC`` (``--grpc-port 0``): no gRPC server processes (two by default, each with its own
  metrics flush and grpcio's timer threads, on the same core);
- ``all quiet``: every source at once: no gRPC processes, no sweep, no metrics flush, and the
  engine and its standby held as in ``engine stopped``.

Every posenc process runs with this script's sitecustomize (a directory put first on PYTHONPATH;
nothing in posenc changes), which records each garbage collection (generation, pause) and each
metrics flush (duration) with its time, so that the report also says how often each ran while the
probe measured and its longest pause. Printed: per rate and variant, the medians over rounds of
p50 / p99 / p99.9, p99 and p99.9 over the bare server's in the same round (medians of the ratios,
and their range over the rounds); p99 and p99.9 of every round's requests pooled per server, and
their ratios to the bare server's;
what ran in the measured windows; the machine's kernel threads' CPU in the steps (kernel_threads);
where each posenc process ran, at which priority, its CPU and
how often it was put on a CPU in the steps (/proc/PID/task/*/schedstat); and, after each posenc
server's steps, ``--builds-per-s`` new specs a second (each an on-demand build by the engine)
sent while the probe offers the last rate: their answers' status and time, which is what a worker
waiting for a build gets from an engine that yields.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
import types
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "bench")]

from bench_cliffs import _procs, tree, tree_cpu_s  # noqa: E402  (beside this script)
from hdrh.histogram import HdrHistogram  # noqa: E402
from kernel_bursts import kthreads  # noqa: E402

from posenc.loadtest import servers  # noqa: E402
from posenc.loadtest.drivers import probe  # noqa: E402
from posenc.loadtest.workloads import mix, scenario  # noqa: E402

VARIANTS = {  # name: (posenc serve's extra flags, the sitecustomize's mode)
    "as shipped": ((), ""),
    "no sweep": (("--verify-interval", "0"), ""),
    "sweep every 1 s": (("--verify-interval", "1"), ""),
    "no metrics flush": ((), "no-flush"),
    "gc off": ((), "gc-off"),
    "engine stopped": ((), ""),
    "standby stopped": ((), ""),
    "no yield": ((), "no-yield"),
    "no gRPC": (("--grpc-port", "0"), ""),
    "all quiet": (("--grpc-port", "0", "--verify-interval", "0"), "no-flush"),
}
# the processes each "... stopped" variant holds with SIGSTOP for the probe's steps
STOPPED = {
    "engine stopped": ("engine", "standby"),
    "standby stopped": ("standby",),
    "all quiet": ("engine", "standby"),
}

# Put first on the posenc processes' PYTHONPATH: records every collection and every metrics flush
# (wall time, duration in ns) and writes them at exit to $BENCH_TAIL_DIR/PID.json.
SITECUSTOMIZE = r"""
import atexit, gc, json, os, sys, time
_dir, _mode = os.environ.get("BENCH_TAIL_DIR"), os.environ.get("BENCH_TAIL_MODE", "")
if _dir:
    _rec = {"gc": [], "flush": []}
    _t0 = [0]
    def _gc(phase, info):
        if phase == "start":
            _t0[0] = time.perf_counter_ns()
        else:
            _rec["gc"].append((time.time(), info["generation"], time.perf_counter_ns() - _t0[0]))
    gc.callbacks.append(_gc)
    if _mode == "gc-off":
        gc.disable()
    if _mode == "no-yield":  # the engine and its standby keep the scheduler's normal priority
        with open("/proc/self/cmdline", "rb") as _f:
            if b"posenc.engine.process.main" in _f.read():
                os.sched_setscheduler = lambda *a: None
                os.nice = lambda *a: 0
    import importlib.abc, importlib.util
    _NAME = "posenc.service.metrics.counters"
    class _Hook(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            if name != _NAME:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            self._loader, spec.loader = spec.loader, self
            return spec
        def create_module(self, spec):
            return self._loader.create_module(spec)
        def exec_module(self, module):
            self._loader.exec_module(module)
            plain = module.Metrics.flush
            def flush(m):  # the CPU time the flush takes (its wall time includes waits for the GIL)
                t = time.thread_time_ns()
                plain(m)
                _rec["flush"].append((time.time(), 0, time.thread_time_ns() - t))
            module.Metrics.flush = flush
            if _mode == "no-flush":
                module.FLUSH_S = 3600.0
    sys.meta_path.insert(0, _Hook())
    def _dump():
        with open(os.path.join(_dir, "%d.json" % os.getpid()), "w") as f:
            json.dump({"argv": sys.argv, **_rec}, f)
    atexit.register(_dump)
"""


def site_dirs(tmp: str) -> tuple[str, str]:
    """(site, rec) made under ``tmp``: a directory holding SITECUSTOMIZE, to put first on posenc's
    PYTHONPATH, and the one its records are written to."""
    site, rec = os.path.join(tmp, "site"), os.path.join(tmp, "rec")
    os.makedirs(site)
    os.makedirs(rec)
    with open(os.path.join(site, "sitecustomize.py"), "w") as f:
        f.write(SITECUSTOMIZE)
    return site, rec


def site_env(site: str, rec: str, mode: str) -> dict:
    """posenc serve's environment with site_dirs' sitecustomize in ``mode`` (VARIANTS)."""
    return {
        "PYTHONPATH": os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p),
        "BENCH_TAIL_DIR": rec,
        "BENCH_TAIL_MODE": mode,
    }


def roles(pid: int) -> dict[int, str]:
    """{pid: role} of posenc serve ``pid``'s process tree: serve, worker, engine, standby,
    checksummer, other (multiprocessing's resource tracker)."""
    out = {}
    for c in tree(pid, _procs()):
        try:
            with open(f"/proc/{c}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if c == pid:
            out[c] = "serve"  # (with one worker, serve runs it: "worker" below)
        elif b"spawn_main" in cmd:
            out[c] = "worker"
        elif b"posenc.engine.process.main" in cmd:
            out[c] = "standby" if b"--standby-fd" in cmd else "engine"
        elif b"posenc.engine.process.checksummer" in cmd:
            out[c] = "checksummer"
        else:
            out[c] = "other"
    if pid in out and "worker" not in out.values():
        out[pid] = "worker"
    return out


POLICIES = {getattr(os, n, -1): n[6:].lower() for n in ("SCHED_OTHER", "SCHED_BATCH", "SCHED_IDLE")}


def placement(pid: int) -> dict[str, str]:
    """{role: "CPUs <affinity>, <policy>[ nice N]"} of every posenc process: where each may run, and
    at which priority."""
    out = {}
    for p, role in roles(pid).items():
        try:
            cpus = ",".join(map(str, sorted(os.sched_getaffinity(p))))
            pol = POLICIES.get(os.sched_getscheduler(p), "?")
            nice = os.getpriority(os.PRIO_PROCESS, p)
        except OSError:
            continue
        out[role] = f"CPUs {cpus}, {pol}" + (f" nice {nice}" if nice else "")
    return out


def cpu_by_role(pid: int) -> dict[str, tuple[float, int]]:
    """{role: (CPU seconds so far, times put on a CPU so far)} of posenc's processes, every thread
    summed (/proc/PID/task/TID/schedstat: nanoseconds, not clock ticks, so that an engine's few
    microseconds of upkeep are seen)."""
    out: dict[str, tuple[float, int]] = {}
    for p, role in roles(pid).items():
        ns = runs = 0
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/schedstat") as f:
                    run, _, n = f.read().split()
                ns, runs = ns + int(run), runs + int(n)
        except (OSError, ValueError):
            pass
        had = out.get(role, (0.0, 0))
        out[role] = (had[0] + ns / 1e9, had[1] + runs)
    return out


def kernel_threads() -> dict[str, tuple[int, int]]:
    """{name: (CPU ns so far, times put on a CPU so far)} of the machine's kernel threads (children
    of kthreadd), a CPU's own per-CPU kworkers summed under "kworker/N", unbound ones under
    "kworker/uN": the machine's work that takes a core from the server (kdamond, the memory
    monitor of this kind of VM, wakes every 512 ms for 1-2 ms, longer every 5 s: kernel_bursts.py)."""
    out: dict[str, tuple[int, int]] = {}
    for pid, name in kthreads().items():
        try:
            with open(f"/proc/{pid}/schedstat") as f:
                run, _, n = f.read().split()
        except (OSError, ValueError):
            continue
        if name.startswith("kworker/"):
            name = name.partition(":")[0].partition("-")[0]
        had = out.get(name, (0, 0))
        out[name] = (had[0] + int(run), had[1] + int(n))
    return out


def _settle(pid: int, quiet_s: float = 0.02, timeout: float = 30.0) -> None:
    """Wait until posenc's processes are idle (under ``quiet_s`` of CPU in half a second): the
    standby engine, started beside the engine once it is ready, imports and maps for a few
    seconds on the same core, which is start-up, not the tail of a running server."""
    deadline = time.monotonic() + timeout
    last = tree_cpu_s(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = tree_cpu_s(pid)
        if now - last < quiet_s:
            return
        last = now


def _who(argv: list[str]) -> str:
    """Which posenc process wrote a record: the worker, the engine, its standby, the checksummer."""
    text = " ".join(argv)
    if "--standby-fd" in text:
        return "standby"
    for name in ("checksummer", "engine"):
        if name in text:
            return name
    return "worker"


def _warm(url: str, pool: dict, rate: float) -> None:
    """Two unmeasured seconds at ``rate`` first, as ``posenc loadtest`` runs wrk before its probe:
    a new server's first sight of each of the pool's request shapes is answered by the full path
    (which learns its template), and its first reads of each table page fault them in; without
    it, the first step's p99 at 15,000/s read 4-10x the next one's."""
    port = int(url.rsplit(":", 1)[1])
    probe.run_step("127.0.0.1", port, pool["requests"], pool["kinds"], pool["names"], rate, 2.0, warmup=0.5)


def _steps(
    url: str, pool: dict, rates, seconds, pid: int | None = None, kernel: dict | None = None
) -> tuple[dict, list, dict]:
    """({rate: percentiles}, [(start, end) wall time of each measured step], {rate: {role: (CPU
    seconds, runs) in the step}} of posenc serve ``pid``'s processes); _warm before. ``kernel``:
    {rate: [{kernel thread: (CPU s, runs) in the step}]}, each step's appended."""
    out, windows, cpu = {}, [], {}
    port = int(url.rsplit(":", 1)[1])
    for rate in rates:
        for _ in range(2):  # a step the probe or the server fell behind in is run once more
            t0 = time.time()
            before = cpu_by_role(pid) if pid else {}
            kbefore = kernel_threads() if kernel is not None else {}
            s = probe.run_step(
                "127.0.0.1", port, pool["requests"], pool["kinds"], pool["names"], rate, seconds, warmup=1.0
            )
            after = cpu_by_role(pid) if pid else {}
            kafter = kernel_threads() if kernel is not None else {}
            assert not s.errors, (url, s.rate, s.errors)
            # (requests that timed out: the machine's other work took the cores for seconds)
            behind = s.fell_behind or s.timeouts
            if not behind:
                break
        windows.append((t0 + 1.0, time.time()))
        cpu[rate] = {r: tuple(x - y for x, y in zip(after[r], before.get(r, (0, 0)))) for r in after}
        if kernel is not None:
            kernel.setdefault(rate, []).append(
                {
                    k: ((v[0] - kbefore.get(k, (0, 0))[0]) / 1e9, v[1] - kbefore.get(k, (0, 0))[1])
                    for k, v in kafter.items()
                }
            )
        if behind:  # the percentiles are not latency: say so, and count the step out
            why = f"{s.timeouts} timed out" if s.timeouts else s.behind
            print(f"{url} fell behind at {rate:g}/s ({why})", file=sys.stderr, flush=True)
        out[rate] = None if behind else {**s.percentiles_us, "hdr": s.hdr}
    return out, windows, cpu


def _pooled(steps) -> HdrHistogram | None:
    """One histogram of every measured step's requests (the probe's HdrHistogram of each), or None."""
    h = None
    for st in steps:
        if st:
            if h is None:
                h = HdrHistogram(1, probe.MAX_US, 3)
            h.decode_and_add(st["hdr"])
    return h


def _builds_under_load(url: str, pool: dict, rate: float, seconds: float, per_s: float) -> list:
    """[(status, seconds)] of the new specs (mix.NewSpecs: RoPE tables no table holds, each built on
    demand by the engine) sent ``per_s`` a second while the probe offers ``rate``: what a worker
    waiting for a build gets from an engine that yields the core to it."""
    port = int(url.rsplit(":", 1)[1])
    t = mix.NewSpecs(url, per_s)
    t.start()
    try:
        probe.run_step("127.0.0.1", port, pool["requests"], pool["kinds"], pool["names"], rate, seconds)
    finally:
        t.stop()
    return t.results


def one_posenc(
    variant: str,
    rates,
    seconds,
    cpus: str,
    site: str,
    rec_dir: str,
    pool: dict | None,
    out: str = "",
    workload=None,
    engine_cpus: str = "",
    builds_per_s: float = 0.0,
    settle: bool = True,
    kernel: dict | None = None,
) -> dict:
    """One posenc serve: {"got": {rate: percentiles}, "seen": {"gc": [...], "flush": [...]} inside
    the measured windows, "cpu": {rate: {role: (CPU s, runs)}}, "placement": {role: ...}, "builds":
    [(status, s)], "pool"}; without ``pool``, the realistic mix's pool is made, with posenc's answers
    to it saved in ``out`` for the bare server (the pool's ``floor_requests``). ``engine_cpus``: the
    engine, its standby and the checksummer moved there (by default they share ``cpus`` with the
    worker: the whole serve on one core). ``settle``: wait for posenc's processes to be idle first
    (False: measured while the standby, started once the engine is ready, still imports)."""
    flags, mode = VARIANTS[variant]
    port, ns = servers.free_port(), f"btail-{uuid.uuid4().hex[:8]}"
    for f in os.listdir(rec_dir):
        os.unlink(os.path.join(rec_dir, f))
    env = site_env(site, rec_dir, mode)
    res: dict = {"builds": []}
    with servers.start_posenc(port, ns, cpus=cpus, env=env, args=flags) as srv:
        srv.wait_ready()
        pid = srv.proc.pid
        url = f"http://127.0.0.1:{port}"
        if pool is None:
            pool = scenario.prepare(workload, url, {}, out)
        if settle:
            _settle(pid)
        if engine_cpus:  # (the checksummer, started by the engine later, inherits the engine's)
            for p, role in roles(pid).items():
                if role in ("engine", "standby", "checksummer"):
                    os.sched_setaffinity(p, {int(c) for c in engine_cpus.split(",")})
        _warm(url, pool, rates[0])
        held = [p for p, role in roles(pid).items() if role in STOPPED.get(variant, ())]
        assert held or variant not in STOPPED, f"no {STOPPED[variant]} process found under posenc serve"
        res["placement"] = placement(pid)
        for p in held:
            os.kill(p, signal.SIGSTOP)
        try:
            res["got"], windows, res["cpu"] = _steps(url, pool, rates, seconds, pid, kernel)
        finally:
            for p in held:
                os.kill(p, signal.SIGCONT)
        if builds_per_s > 0:
            res["builds"] = _builds_under_load(url, pool, rates[-1], seconds, builds_per_s)
    left, _ = servers.wait_shm_clean(ns)
    assert not left, f"left in /dev/shm: {left}"
    seen = {"gc": [], "flush": []}
    for f in os.listdir(rec_dir):
        try:
            with open(os.path.join(rec_dir, f)) as fh:
                rec = json.load(fh)
        except ValueError:  # a process killed while it wrote its record (serve's stop timed out)
            print(f"{variant}: an unreadable record {f}", file=sys.stderr, flush=True)
            continue
        who = _who(rec["argv"])
        for k in seen:
            seen[k] += [(who, *e) for e in rec[k] if any(a <= e[0] <= b for a, b in windows)]
    res["seen"], res["pool"] = seen, pool
    return res


def _table_head(intro: str, head: str, rule: str) -> None:
    print()
    print(intro)
    print()
    print(head)
    print(rule)


def _cpu_cell(samples: list, seconds: float) -> str:
    """The medians of [(CPU s, runs) of each step] as "CPU ms/s, runs/s"."""
    return (
        f"{1e3 * statistics.median(c for c, _ in samples) / seconds:.2f} ms/s, "
        f"{statistics.median(n for _, n in samples) / seconds:.0f}/s"
    )


def workload_args(ap: argparse.ArgumentParser) -> None:
    """--scenario and --kinds: the probe's pool (loadtest/workloads/scenario.py)."""
    ap.add_argument("--scenario", choices=scenario.NAMES, default=mix.NAME, help="the probe's requests")
    ap.add_argument(
        "--kinds",
        default="rope-row:3,alibi-decode:1",
        help="--scenario decode: the request kinds and weights",
    )


def workload_of(args) -> types.SimpleNamespace:
    """What scenario.prepare reads of workload_args' options (the default tables)."""
    return types.SimpleNamespace(scenario=args.scenario, kinds=args.kinds, tables=None)


def described(args) -> str:
    """The pool's name in a report's first line."""
    return "the realistic mix" if args.scenario == mix.NAME else f"the decode scenario ({args.kinds})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="15000,30000")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--client-cpus", default="1")
    ap.add_argument(
        "--engine-cpus",
        default="",
        help="move the engine, standby and checksummer here (default: the whole serve on --server-cpus)",
    )
    ap.add_argument(
        "--builds-per-s",
        type=float,
        default=2.0,
        help="new specs a second in each posenc server's build step (0: none)",
    )
    ap.add_argument(
        "--no-settle",
        action="store_true",
        help="measure without waiting for the standby's start (as after an engine restart)",
    )
    ap.add_argument("--only", default=",".join(VARIANTS), help="the variants to run, comma-separated")
    workload_args(ap)
    args = ap.parse_args()
    workload = workload_of(args)
    rates = [float(r) for r in args.rates.split(",")]
    names = [v for v in args.only.split(",") if v]
    assert all(v in VARIANTS for v in names), f"variants: {list(VARIANTS)}"
    if args.client_cpus:
        os.sched_setaffinity(0, {int(c) for c in args.client_cpus.split(",")})
    res = {v: [] for v in ["bare", *names]}
    events = {v: {"gc": [], "flush": []} for v in names}
    cpu = {v: {} for v in ["bare", *names]}  # {variant: {(rate, role): [CPU s per step]}}
    builds = {v: [] for v in names}
    kernel: dict = {}  # {rate: [{kernel thread: (CPU s, runs)} of each step of every server]}
    where = {}
    with tempfile.TemporaryDirectory(prefix="bench_tail.") as tmp:
        site, rec = site_dirs(tmp)
        # posenc's answers to the pool, once, for the bare server
        pool = one_posenc(names[0], rates[:1], 0.5, args.server_cpus, site, rec, None, tmp, workload)["pool"]
        for k in range(args.rounds):
            order = ["bare", *names]
            order = order[k % len(order) :] + order[: k % len(order)]
            for v in order:
                if v == "bare":
                    with servers.start_floor(
                        servers.free_port(),
                        None,
                        args.server_cpus,
                        kind="bare",
                        requests=pool["floor_requests"],
                    ) as b:
                        b.wait_ready(30)
                        _warm(b.url, pool, rates[0])
                        got, _, by = _steps(b.url, pool, rates, args.seconds, b.proc.pid, kernel)
                        res[v].append(got)
                        for rate, roles_cpu in by.items():  # (the one process reads as "worker")
                            for sec in roles_cpu.values():
                                cpu[v].setdefault((rate, "server"), []).append(sec)
                else:
                    r = one_posenc(
                        v,
                        rates,
                        args.seconds,
                        args.server_cpus,
                        site,
                        rec,
                        pool,
                        engine_cpus=args.engine_cpus,
                        builds_per_s=args.builds_per_s,
                        settle=not args.no_settle,
                        kernel=kernel,
                    )
                    res[v].append(r["got"])
                    for e in r["seen"]:
                        events[v][e] += r["seen"][e]
                    for rate, by in r["cpu"].items():
                        for role, sec in by.items():
                            cpu[v].setdefault((rate, role), []).append(sec)
                    builds[v] += r["builds"]
                    where[v] = r["placement"]
                print(f"round {k + 1}: {v} done", file=sys.stderr, flush=True)
    print(
        f"# bench_tail: {os.cpu_count()} cpus, server on CPU {args.server_cpus}"
        + (
            f" (engine, standby, checksummer on CPU {args.engine_cpus})"
            if args.engine_cpus
            else " (all of it)"
        )
        + f", probe on CPU "
        f"{args.client_cpus}, {args.rounds} rounds of {args.seconds:g} s per rate, "
        + described(args)
        + f" ({pool['pool']} requests, {len(pool['names'])} kinds), "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print()
    print("| rate | server | p50 | p99 | p99.9 | p99 ÷ bare | p99.9 ÷ bare |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for rate in rates:
        for v in res:
            pairs = [(r[rate], b[rate]) for r, b in zip(res[v], res["bare"]) if r[rate] and b[rate]]
            if not pairs:
                print(f"| {rate:,.0f}/s | {v} | fell behind | | | | |")
                continue
            q = {p: statistics.median(r[p] for r, _ in pairs) for p in ("p50", "p99", "p99.9")}
            each = {p: sorted(r[p] / b[p] for r, b in pairs) for p in ("p99", "p99.9")}
            # the median of the rounds' ratios, and their range: a round's p99 at a high rate falls
            # among the requests that queued behind one of the machine's stalls (both servers see
            # them), so one round's ratio says little
            rel = (
                ""
                if v == "bare"
                else " | ".join(
                    f"{statistics.median(x):.2f}× ({x[0]:.2f}–{x[-1]:.2f})" for x in each.values()
                )
            )
            print(
                f"| {rate:,.0f}/s | {v} | {q['p50']:.0f} µs | {q['p99']:.0f} µs | {q['p99.9']:.0f} µs | "
                + (rel or " | ")
                + " |"
            )
    print()
    print(
        "Every round's requests pooled per server (one histogram each, the rounds a server held its rate "
        "in): a steadier estimate than one round's, whose p99 moves with the machine's stalls in it:"
    )
    print()
    print("| rate | server | requests | p99 | p99.9 | p99 ÷ bare | p99.9 ÷ bare |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for rate in rates:
        pooled = {v: _pooled(r[rate] for r in res[v]) for v in res}
        b = pooled.get("bare")
        for v, h in pooled.items():
            if h is None:
                continue
            p = {q: h.get_value_at_percentile(q) for q in (99.0, 99.9)}
            rel = (
                " | "
                if v == "bare" or b is None
                else " | ".join(f"{p[q] / b.get_value_at_percentile(q):.2f}×" for q in (99.0, 99.9))
            )
            print(f"| {rate:,.0f}/s | {v} | {h.get_total_count():,} | {p[99.0]} µs | {p[99.9]} µs | {rel} |")
    print()
    window = args.rounds * len(rates) * args.seconds
    print(f"What ran inside the measured windows ({window:g} s per variant, every posenc process):")
    print()
    print(
        "| server | process | collections (gen 0 / 1 / 2) | longest collection | metrics flushes "
        "| longest flush (CPU) |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for v in names:
        ev = events[v]
        for who in sorted({e[0] for k in ev for e in ev[k]}):
            g = [e for e in ev["gc"] if e[0] == who]
            fl = [e for e in ev["flush"] if e[0] == who]
            gens = " / ".join(str(sum(1 for e in g if e[2] == n)) for n in (0, 1, 2))
            print(
                f"| {v} | {who} | {gens} | {max((e[3] for e in g), default=0) / 1e3:.0f} µs | {len(fl)} | "
                f"{max((e[3] for e in fl), default=0) / 1e3:.0f} µs "
                f"(median {statistics.median([e[3] for e in fl] or [0]) / 1e3:.0f} µs) |"
            )
    at_rates = " | ".join(f"CPU, runs at {r:,.0f}/s" for r in rates)
    _table_head(
        "Where each posenc process ran and at which priority, and in the measured steps its CPU "
        "(ms per second) and how often it was put on a CPU (per second), medians over rounds:",
        f"| server | process | placement | {at_rates} |",
        "|---|---|---|" + "---:|" * len(rates),
    )
    for v in ["bare", *names]:
        for role in sorted({role for _, role in cpu[v]}):
            cells = [_cpu_cell(cpu[v][(r, role)], args.seconds) if (r, role) in cpu[v] else "" for r in rates]
            print(f"| {v} | {role} | {where.get(v, {}).get(role, '')} | " + " | ".join(cells) + " |")
    _table_head(
        "The machine's own work in the steps (kernel threads, on either core; every server's steps): CPU "
        "(ms per second) and times put on a CPU (per second), medians over the steps, where over 0.1 ms/s:",
        f"| kernel thread | {at_rates} |",
        "|---|" + "---:|" * len(rates),
    )
    for k in sorted({k for r in rates for st in kernel.get(r, []) for k in st}):
        each = {r: [st.get(k, (0.0, 0)) for st in kernel[r]] for r in rates if kernel.get(r)}
        if any(statistics.median(c for c, _ in x) * 1e3 / args.seconds > 0.1 for x in each.values()):
            print(f"| {k} | " + " | ".join(_cpu_cell(x, args.seconds) for x in each.values()) + " |")
    if args.builds_per_s > 0:
        print()
        print(
            f"New specs built on demand while the probe offers {rates[-1]:,.0f}/s ({args.builds_per_s:g} a second):"
        )
        print()
        print("| server | sent | 200 | p50 | max |")
        print("|---|---:|---:|---:|---:|")
        for v in names:
            got = sorted(sec for _, sec in builds[v])
            ok = sum(1 for st, _ in builds[v] if st == 200)
            if got:
                print(
                    f"| {v} | {len(got)} | {ok} | {1e3 * got[len(got) // 2]:.0f} ms | {1e3 * got[-1]:.0f} ms |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
