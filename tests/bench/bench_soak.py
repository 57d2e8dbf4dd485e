"""Worker memory over a long run: is a growing worker warm caches or a leak? A script, not a test:

    python tests/bench/bench_soak.py [--minutes 30] [--workers 2] [--rate 200] [--new-specs-per-s 0.5]
        [--out soak.json]

Starts ``posenc serve --workers N`` (the default tables) and sends it, for ``--minutes``, a paced
stream of requests drawn afresh for every request (never a fixed pool): the realistic mix
(loadtest/workloads/mix.py: a random table of the default set asked by its spec, every family,
positions uniform over twice the table's length, in and past the table; /v1 binary and JSON, v2
REST binary and JSON), a quarter of the /v1 ones with a range ({start, stop[, step]}) instead of a
list, and ``--new-specs-per-s`` RoPE specs no table holds (payloads.Mix.new_spec: each built on
demand, so the workers map more tables as the engine builds and evicts them), over connections
that each close after RECONNECT requests (so that every worker is sent its share). Every answer
must be 200 with a body; anything else is counted and printed.

Each minute it reads every worker's /proc/PID/status and /proc/PID/maps: RSS split into anonymous
memory (the heap: what would grow with a leak), shared memory (the tables' pages the worker has
touched: bounded by the tables' size, and shared with every other reader) and file pages (code),
and the number of table segments mapped.

Inside the workers, through a sitecustomize of this script's own (a directory first on PYTHONPATH;
nothing in posenc changes): every minute each worker counts what each of its caches holds (the
/v1 templates, the v2 hot store's known and once-seen keys, the pipeline's specs, the table
views, the lru_caches, and the bytes the C templates keep: _hot.kept()), and the first worker to
start runs ``tracemalloc`` and writes its traced total and the 12 source lines whose allocations
grew most since its first snapshot (after the first minute); the other workers run untraced, so
their RSS is not inflated by the tracer's own bookkeeping. Printed: the RSS curve per minute, per
worker, the traced worker's biggest growers, and each cache's fill against its cap.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "bench")]

from bench_cliffs import _procs, tree  # noqa: E402  (beside this script)

from posenc.loadtest import servers  # noqa: E402
from posenc.loadtest.workloads import mix, payloads  # noqa: E402
from tests.procs import wait_for  # noqa: E402

# Put first on posenc's PYTHONPATH: in the first uvicorn worker (a spawned interpreter) to claim
# $BENCH_SOAK_DIR/traced, tracemalloc, and each minute a line of $BENCH_SOAK_DIR/heap.jsonl.
SITECUSTOMIZE = r"""
import os
_dir = os.environ.get("BENCH_SOAK_DIR")
def _is_worker():
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return b"spawn_main" in f.read()
    except OSError:
        return False
def _census():
    # each cache's fill: what the worker holds against each cap (read, never changed)
    import gc, sys
    out = {}
    hot = sys.modules.get("posenc.service.shortcut._hot")
    if hot is not None:
        out["kept_bytes"] = hot.kept()
    for name, attr in (("posenc.service.v2.wire", "varint"), ("posenc.service.front.negotiate", "_cached")):
        m = sys.modules.get(name)
        if m is not None:
            out[name.rsplit(".", 1)[1] + "_lru"] = getattr(m, attr).cache_info().currsize
    for o in gc.get_objects():
        t = type(o).__name__
        if t == "Templates" and hasattr(o, "native"):
            out["v1_templates"] = out.get("v1_templates", 0) + sum(map(len, o.native.values()))
        elif t == "Hot" and hasattr(o, "known"):
            out["v2_known"] = out.get("v2_known", 0) + len(o.known)
            out["v2_once"] = out.get("v2_once", 0) + len(o.once)
        elif t == "Pipeline" and hasattr(o, "_specs"):
            out["pipeline_specs"] = out.get("pipeline_specs", 0) + len(o._specs)
        elif t == "Client" and hasattr(o, "_views"):
            out["table_views"] = out.get("table_views", 0) + len(o._views)
    return out
if _dir and _is_worker():
    import json, threading, time
    try:
        os.close(os.open(os.path.join(_dir, "traced"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        _traced = True
    except FileExistsError:
        _traced = False
    if _traced:
        import tracemalloc
        tracemalloc.start(4)
    def _watch():
        first = None
        while True:
            time.sleep(60.0)
            rec = {"t": time.time(), "pid": os.getpid(), "caches": _census()}
            if _traced:
                snap = tracemalloc.take_snapshot().filter_traces(
                    [tracemalloc.Filter(False, tracemalloc.__file__)])
                rec["traced"], rec["peak"] = tracemalloc.get_traced_memory()
                if first is None:
                    first = snap
                rec["top"] = [(str(s.traceback[0]), s.size_diff, s.size, s.count_diff)
                              for s in snap.compare_to(first, "lineno")[:12]]
            with open(os.path.join(_dir, "heap.jsonl"), "a") as f:
                f.write(json.dumps(rec) + "\n")
    threading.Thread(target=_watch, daemon=True, name="bench-soak-heap").start()
"""


def workers(pid: int) -> list[int]:
    """The uvicorn workers under posenc serve ``pid`` (spawned interpreters)."""
    found = []
    for c in sorted(tree(pid, _procs()) - {pid}):
        try:
            with open(f"/proc/{c}/cmdline", "rb") as f:
                if b"spawn_main" in f.read():
                    found.append(c)
        except OSError:
            pass
    return found


def memory(pid: int, namespace: str) -> dict | None:
    """A process's RSS in MB (total, anonymous, shared memory, file) and the table segments it maps."""
    try:
        with open(f"/proc/{pid}/status") as f:
            st = {
                k: v.split()[0] for k, v in (ln.split(":", 1) for ln in f if ln.startswith(("Rss", "VmRSS")))
            }
        with open(f"/proc/{pid}/maps") as f:
            segs = {ln.split(None, 5)[-1].strip() for ln in f if "memfd:" in ln or namespace in ln}
    except OSError:
        return None
    mb = {k: round(int(v) / 1024, 1) for k, v in st.items()}
    return {
        "rss": mb.get("VmRSS"),
        "anon": mb.get("RssAnon"),
        "shmem": mb.get("RssShmem"),
        "file": mb.get("RssFile"),
        "segments": len(segs),
    }


def request(ts: list[dict], rng: random.Random, newspec: payloads.Mix | None):
    """(path, headers, body) of one request drawn afresh; ``newspec``: a spec no table holds."""
    if newspec is not None:
        body = json.dumps(newspec.new_spec()).encode()
        return "/v1/rope", {"Accept": payloads.BINARY, "Content-Type": "application/json"}, body
    t, way = rng.choice(ts), rng.choice(mix.WAYS)
    sel = mix.selections(t, way, rng)
    if way.startswith("v1") and rng.random() < 0.25:  # a range in place of the list
        k = next(iter(sel))
        s = rng.randrange(2 * t["length"] - 64)
        sel = {**sel, k: {"start": s, "stop": s + rng.randrange(1, 32), "step": rng.choice((1, 1, 2, 3))}}
    return mix.encode(t["family"], t["spec"], way, sel)


RECONNECT = 500  # requests on one connection before it is closed and another opened


class Load(threading.Thread):
    """One keep-alive connection sending ``rate`` requests a second, paced."""

    def __init__(self, port: int, rate: float, new_per_s: float, seed: int, stop: threading.Event):
        super().__init__(daemon=True)
        self.port, self.rate, self.new_p, self.stop_ev = port, rate, new_per_s / rate, stop
        self.rng = random.Random(seed)
        self.spec_mix = payloads.Mix(payloads.load(), random.Random(seed + 1))
        self.ts = mix.tables()
        self.sent, self.bad = 0, []

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        due = time.monotonic()
        while not self.stop_ev.is_set():
            due += 1.0 / self.rate
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            path, headers, body = request(
                self.ts, self.rng, self.spec_mix if self.rng.random() < self.new_p else None
            )
            try:
                conn.request("POST", path, body, headers)
                r = conn.getresponse()
                content = r.read()
                ok = r.status == 200 and content
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                r, content, ok = None, repr(e).encode(), False
            self.sent += 1
            if self.sent % RECONNECT == 0:  # clients come and go: every worker gets connections
                conn.close()
            if not ok and len(self.bad) < 20:
                self.bad.append(
                    (path, body[:200].decode(errors="replace"), getattr(r, "status", 0), content[:200])
                )
        conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rate", type=float, default=200.0, help="requests a second, all connections together")
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--new-specs-per-s", type=float, default=0.5)
    ap.add_argument("--out", default="", help="write the samples as JSON here too")
    args = ap.parse_args()
    port, ns = servers.free_port(), f"bsoak-{uuid.uuid4().hex[:8]}"
    samples: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench_soak.") as tmp:
        site = os.path.join(tmp, "site")
        os.makedirs(site)
        with open(os.path.join(site, "sitecustomize.py"), "w") as f:
            f.write(SITECUSTOMIZE)
        env = {
            "PYTHONPATH": os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p),
            "BENCH_SOAK_DIR": tmp,
        }
        with servers.start_posenc(port, ns, workers=args.workers, env=env) as srv:
            srv.wait_ready()
            wait_for(
                lambda: len(workers(srv.proc.pid)) >= args.workers,
                timeout=60,
                interval=0.2,
                what=f"{args.workers} workers under posenc serve",
            )
            with open(os.path.join(tmp, "traced")):  # the claim is made at the worker's start
                pass
            stop = threading.Event()
            per = args.rate / args.connections
            load = [
                Load(port, per, args.new_specs_per_s / args.connections, k, stop)
                for k in range(args.connections)
            ]
            t0 = time.monotonic()
            for t in load:
                t.start()
            for minute in range(int(args.minutes) + 1):
                time.sleep(max(0.0, t0 + 60 * minute - time.monotonic()))  # paces the samples: a minute each
                row = {
                    "minute": minute,
                    "sent": sum(t.sent for t in load),
                    "bad": sum(len(t.bad) for t in load),
                }
                row["workers"] = {p: memory(p, ns) for p in workers(srv.proc.pid)}
                samples.append(row)
                w = " | ".join(
                    f"{p}: rss {m['rss']} anon {m['anon']} shm {m['shmem']} segs {m['segments']}"
                    for p, m in row["workers"].items()
                    if m
                )
                print(f"min {minute:3d} sent {row['sent']:7d} bad {row['bad']} | {w}", flush=True)
            stop.set()
            for t in load:
                t.join(timeout=70)
            heap = []
            try:
                with open(os.path.join(tmp, "heap.jsonl")) as f:
                    heap = [json.loads(ln) for ln in f]
            except FileNotFoundError:
                pass
        left, _ = servers.wait_shm_clean(ns)
        assert not left, f"left in /dev/shm: {left}"
    bad = [b for t in load for b in t.bad]
    print(f"\n{samples[-1]['sent']} requests, {len(bad)} not 200 with a body")
    for b in bad[:10]:
        print("  ", b)
    traced = next((h["pid"] for h in heap if "traced" in h), None)
    print(f"\nRSS per minute (MB; anon = heap, shm = table pages touched), traced worker: {traced}\n")
    pids = sorted({p for s in samples for p in s["workers"]})
    print("| minute | requests | " + " | ".join(f"worker {p} rss / anon / shm / segs" for p in pids) + " |")
    print("|---:|---:|" + "---:|" * len(pids))
    for s in samples:
        cells = []
        for p in pids:
            m = s["workers"].get(p)
            cells.append(
                f"{m['rss']:.0f} / {m['anon']:.0f} / {m['shmem']:.0f} / {m['segments']}" if m else ""
            )
        print(f"| {s['minute']} | {s['sent']} | " + " | ".join(cells) + " |")
    traced_recs = [h for h in heap if "traced" in h]
    if traced_recs:
        print(
            "\nTraced Python heap (MB) per minute:",
            " ".join(f"{h['traced'] / 2**20:.1f}" for h in traced_recs),
        )
        print("\nBiggest growers since the first snapshot (the last minute's):\n")
        for where, diff, size, count in traced_recs[-1]["top"]:
            print(f"  {diff / 1024:+9.1f} KiB  (now {size / 1024:.1f} KiB, {count:+d} blocks)  {where}")
    print("\nEach cache's fill per worker, last minute and largest seen:\n")
    for p in sorted({h["pid"] for h in heap}):
        recs = [h["caches"] for h in heap if h["pid"] == p]
        keys = sorted({k for r in recs for k in r})
        print(
            f"  worker {p}: "
            + ", ".join(f"{k} {recs[-1].get(k)} (max {max(r.get(k, 0) for r in recs)})" for k in keys)
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"samples": samples, "heap": heap, "bad": bad}, f)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
