"""Engine starts and first answers. A script, not a test:

    python tests/bench/bench_starts.py [--rounds 5] [--specs 20]

Every figure is a median over ``--rounds`` (the machine is shared and noisy), with its baseline
measured in the same run:
- the default set's fills alone, in process, on one thread and on one per core (largest first);
- cold start: ``python -m posenc.engine.process.main`` with the embedded default set, from process
  start until it reports ready (its ``--ready-fd``), on all cores against pinned to one core
  (``taskset -c 0``: one build thread, as before the builds ran in parallel);
- adopt-restart: the same engine killed with SIGKILL and started again, until ready, its tables
  held by a keeper as ``posenc serve`` holds them (engine/process/keeper.py): it adopts them (sealed: not
  read again) instead of building them;
- ``posenc serve`` (1 worker) from process start until /readyz answers 200 (the engine built
  the default set and the worker mapped and checksummed every table);
- under ``posenc serve`` (1 worker, a fresh server each round): SIGKILL the engine once, and the
  time until the restarted engine's manifest is published (serve's own "ready N s after" log line measures the same);
- the first answer for a new RoPE spec (64 positions, head_dim 128, a new rope_theta each time:
  no table yet, so the worker computes the rows while the engine builds), against the same body
  once its table is mapped (the second ask after the build), over HTTP on 127.0.0.1.
Nothing is left in /dev/shm (checked at the end).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np

from posenc.engine.process.adopt import workers
from posenc.engine.process.configured import load_config
from posenc.engine.process.keeper import Keeper
from posenc.engine.store import segments as store
from posenc.loadtest.servers import free_port, shm_leftovers, start_posenc

BIN = {"accept": "application/x-safetensors"}


def engine_start(
    ns: str, pin: str | None = None, keeper: Keeper | None = None
) -> tuple[subprocess.Popen, float]:
    """Start an engine on the default set (with ``keeper``: as posenc serve starts it, its tables
    kept for the next one); (process, seconds until it said ready)."""
    r, w = os.pipe()
    cmd = [sys.executable, "-m", "posenc.engine.process.main", "--namespace", ns, "--ready-fd", str(w)]
    if pin is not None:
        cmd = ["taskset", "-c", pin, *cmd]
    channel = keeper.channel() if keeper is not None else None
    if channel is not None:
        cmd += ["--keeper-fd", str(channel.fileno())]
    t0 = time.perf_counter()
    p = subprocess.Popen(
        cmd, pass_fds=(w, *([channel.fileno()] if channel else [])), stderr=subprocess.DEVNULL
    )
    if channel is not None:
        channel.close()
    os.close(w)
    with os.fdopen(r, "rb") as f:
        if not f.readline():
            raise SystemExit(f"engine {ns} exited with {p.wait()} before it was ready")
    return p, time.perf_counter() - t0


def stop(p: subprocess.Popen) -> None:
    p.send_signal(signal.SIGTERM)
    p.wait(30)


def cold_and_adopt(rounds: int) -> dict:
    res = {"cold": [], "cold_1core": [], "adopt": []}
    for _ in range(rounds):
        ns = f"bench-{uuid.uuid4().hex[:6]}"
        p, t = engine_start(ns, pin="0")
        res["cold_1core"].append(t)
        stop(p)
        keeper = Keeper()  # (engine/process/keeper.py: what posenc serve holds)
        p, t = engine_start(ns, keeper=keeper)
        res["cold"].append(t)
        p.kill()
        p.wait()
        p, t = engine_start(ns, keeper=keeper)
        res["adopt"].append(t)
        stop(p)
        keeper.close()
        assert not shm_leftovers(ns), shm_leftovers(ns)
    return res


@contextlib.contextmanager
def fresh_server():
    """A ``posenc serve`` (1 worker, the default set) on its own namespace and port: (server,
    namespace); stopped afterwards, and checked to leave nothing in /dev/shm."""
    ns, port = f"bench-{uuid.uuid4().hex[:6]}", free_port()
    srv = start_posenc(port, ns)
    try:
        yield srv, ns
    finally:
        srv.stop()
    assert not shm_leftovers(ns), shm_leftovers(ns)


def until(cond, poll: float) -> None:
    while not cond():
        time.sleep(poll)


def serve_cold(rounds: int) -> list[float]:
    """``posenc serve`` (1 worker, the default set) from process start to /readyz 200."""

    def ready(srv) -> bool:
        assert srv.proc.poll() is None, "posenc serve exited"
        try:
            return httpx.get(f"{srv.url}/readyz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        with fresh_server() as (srv, _):
            until(lambda: ready(srv), 0.01)
            out.append(time.perf_counter() - t0)
    return out


def serve_restarts(rounds: int) -> list[float]:
    """A fresh ``posenc serve`` per round, its engine killed once: an engine that keeps dying
    young is restarted after a growing delay, which is not what this measures."""
    out = []
    for _ in range(rounds):
        with fresh_server() as (srv, ns):
            srv.wait_ready()
            gen, pid = (m := store.read_manifest("/dev/shm", ns))["generation"], m["pid"]
            os.kill(pid, signal.SIGKILL)
            t0 = time.perf_counter()
            until(lambda: (store.read_manifest("/dev/shm", ns) or {}).get("generation", gen) != gen, 0.002)
            out.append(time.perf_counter() - t0)
    return out


def fills(rounds: int) -> dict:
    """The default set's fills alone, in process into private pre-faulted memory: one thread
    against one per core, largest first (what engine/process/coldstart.py does, without tmpfs, the
    checksums and the interpreter's start)."""
    tables = sorted((ct.table for ct in load_config(None)), key=lambda t: -t.nbytes())
    res = {"1": [], "all": []}
    for _ in range(rounds):
        for key, n in (("1", 1), ("all", workers())):
            outs = [{k: np.zeros(shape, dt) for k, (shape, dt) in t.layout().items()} for t in tables]
            t0 = time.perf_counter()
            with ThreadPoolExecutor(n) as pool:
                list(pool.map(lambda i: tables[i].fill(outs[i]), range(len(tables))))
            res[key].append(time.perf_counter() - t0)
    return res


def first_answers(n: int) -> dict:
    first, mapped = [], []
    with fresh_server() as (srv, ns):
        srv.wait_ready()
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            for k in range(n):
                body = {"head_dim": 128, "rope_theta": 20000.0 + k, "positions": list(range(0, 8192, 128))}
                t0 = time.perf_counter()
                r = c.post("/v1/rope", json=body, headers=BIN)
                first.append(time.perf_counter() - t0)
                assert r.status_code == 200, r.text
                deadline = time.monotonic() + 10
                while not any(
                    f"{20000.0 + k}" in e["key"]
                    for e in store.read_manifest("/dev/shm", ns)["tables"].values()
                ):
                    assert time.monotonic() < deadline, "the table was never built"
                    time.sleep(0.005)
                time.sleep(0.1)  # the worker's manifest check (every 50 ms) sees it
                c.post("/v1/rope", json=body, headers=BIN)  # maps it
                t0 = time.perf_counter()
                r2 = c.post("/v1/rope", json=body, headers=BIN)
                mapped.append(time.perf_counter() - t0)
                assert r2.content == r.content
    return {"first": first, "mapped": mapped}


def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--specs", type=int, default=20)
    a = ap.parse_args()
    if shutil.which("taskset") is None:
        raise SystemExit("taskset (util-linux) is needed for the one-core baseline")
    load = os.getloadavg()[0]
    fill = {k: statistics.median(v) for k, v in fills(a.rounds).items()}
    starts = cold_and_adopt(a.rounds)
    serve = serve_cold(a.rounds)
    restarts = serve_restarts(a.rounds)
    answers = first_answers(a.specs)
    med = {k: statistics.median(v) for k, v in starts.items()}
    print(f"load average at start {load:.2f}; {os.cpu_count()} cores; medians of {a.rounds} rounds")
    print(f"cold start, default set, all cores:     {med['cold']:.2f} s")
    print(
        f"cold start, default set, one core:      {med['cold_1core']:.2f} s "
        f"(parallel = {med['cold_1core'] / med['cold']:.2f}x faster)"
    )
    print(
        f"the fills alone, in process:            {1e3 * fill['all']:.0f} ms on {workers()} threads, "
        f"{1e3 * fill['1']:.0f} ms on one ({fill['1'] / fill['all']:.2f}x)"
    )
    print(
        f"restart after kill -9 (adopts):         {med['adopt']:.2f} s "
        f"({med['cold'] / med['adopt']:.2f}x faster than a cold start)"
    )
    print(f"posenc serve, start to /readyz 200:     {statistics.median(serve):.2f} s (1 worker)")
    print(
        f"posenc serve: kill -9 to new manifest:  {statistics.median(restarts):.2f} s "
        f"(max {max(restarts):.2f} s)"
    )
    f, m = answers["first"], answers["mapped"]
    print(
        f"first answer, new spec, 64 rows:        p50 {1e3 * q(f, 0.5):.1f} ms, p90 {1e3 * q(f, 0.9):.1f} ms "
        f"(n={len(f)})"
    )
    print(
        f"the same body from its mapped table:    p50 {1e3 * q(m, 0.5):.2f} ms "
        f"(first / mapped = {q(f, 0.5) / q(m, 0.5):.1f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
