"""Engine and shared-memory benchmark: reading tables a running engine published, all
ratios measured in the same run.

    python tests/bench/bench_engine.py             # the section in docs/benchmarks.md
    python tests/bench/bench_engine.py --quick     # fewer repeats, no default-tables start

What is timed (each cell: median of --repeat timings; each timing averages enough calls to last
--min-time seconds):
- gathers of 1, 64 and 4096 random rows (cos and sin, [n, 64] float32 each) of a 131072 × 128
  RoPE table:
  * ``shm``: numpy fancy indexing on the Client's read-only view of the engine's segment;
  * ``local``: the same on a private in-process copy of the table (target ratio shm/local ≈ 1);
  * ``torch``: computing the rows on the fly as transformers does, float32
    ``outer(pos, inv_freq)`` then ``cos``/``sin`` (--torch-threads, default 1);
  * ``lookup``: ``Client.lookup`` end to end (validation, table lookup, gather, expansion to the
    full [n, 128] width, inv_freq);
- the 4096-row gather's bandwidth as a share of a plain ``np.copyto`` of a contiguous block of
  the same bytes from the same table (target ≥ 0.7): allocating (``a[rows]``), into a
  preallocated output (``np.take(..., out=)``), and with the engine's ``kernels.gather_rows``;
- an on-demand build: ``Client.table()`` on a new 131072 × 128 RoPE spec until the view is back;
- engine start → ready with the embedded default tables (~1.4 GiB), once.

The engine runs as a subprocess under a unique namespace; everything it created is removed at the
end (and checked).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import platform
import signal
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "bench")]

from timing import timeit  # noqa: E402  (tests/bench/timing.py, beside this script)

from posenc.engine.reader.client import Client  # noqa: E402
from tests.procs import Procs, unique_namespace  # noqa: E402
from tests.shm import remove_leftovers, shm_files  # noqa: E402

N_ROWS = 131072
HEAD_DIM = 128
SPEC = {"head_dim": HEAD_DIM, "rope_theta": 10000.0}


def steady_malloc() -> bool:
    """glibc serves blocks over 128 KiB with fresh mmaps and gives them back on free (until its
    threshold adapts, which depends on what ran before), so an allocating gather of a few MiB
    would time page faults of its new output, not the read. Keep such blocks in the heap for both
    the shared-memory and the in-process side."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    return bool(libc.mallopt(M_MMAP_THRESHOLD, 64 << 20)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 256 << 20))


@contextlib.contextmanager
def engine_client(cfg: dict, tag: str):
    """(procs, engine, Client) of an engine holding ``cfg`` under a unique namespace; afterwards
    everything is stopped and the namespace must have left nothing in /dev/shm."""
    procs = Procs(Path(os.environ.get("TMPDIR", "/tmp")) / f"{tag}.{os.getpid()}")
    ns = unique_namespace("pbench")
    try:
        eng = procs.engine(cfg, ns, timeout=120)
        client = Client(namespace=ns)
        client.wait_ready(10)
        yield procs, eng, client
    finally:
        procs.cleanup()
        left = remove_leftovers(ns)
    assert not left and not shm_files(ns), f"left in /dev/shm: {left}"


def fmt(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def bench_reads(client: Client, repeat: int, min_time: float) -> None:
    import torch

    from posenc.engine import kernels

    view = client.table("rope", SPEC)
    cos_v, sin_v = view.cos, view.sin  # read-only views of the segment
    cos_l, sin_l = np.array(cos_v), np.array(sin_v)  # private in-process copies
    inv_t = torch.from_numpy(np.array(view.inv_freq))
    rng = np.random.default_rng(3)
    print(
        f"table: rope {N_ROWS} x {HEAD_DIM} float32 (stored half width: cos, sin [{N_ROWS}, "
        f"{cos_v.shape[1]}]); random rows, seed 3; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    print()
    print(
        "| rows | shm gather | local gather | shm / local | torch on the fly | shm / torch "
        "| Client.lookup | lookup / torch |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in (1, 64, 4096):
        rows = rng.integers(0, N_ROWS, n).astype(np.int64)
        rows_t = torch.from_numpy(rows.astype(np.float32))
        req = {**SPEC, "positions": rows.tolist()}

        def shm():
            return cos_v[rows], sin_v[rows]

        def local():
            return cos_l[rows], sin_l[rows]

        def on_the_fly():
            ang = torch.outer(rows_t, inv_t)
            return ang.cos(), ang.sin()

        def lookup():
            return client.lookup("rope", req)

        t = {
            name: timeit(fn, repeat, min_time)
            for name, fn in (("shm", shm), ("local", local), ("torch", on_the_fly), ("lookup", lookup))
        }
        print(
            f"| {n} | {fmt(t['shm'])} | {fmt(t['local'])} | {t['shm'] / t['local']:.2f} | {fmt(t['torch'])} "
            f"| {t['shm'] / t['torch']:.2f} | {fmt(t['lookup'])} | {t['lookup'] / t['torch']:.2f} |"
        )

    # Bandwidth: the 4096-row gather against a plain copy of the same bytes from the same table.
    n = 4096
    rows = rng.integers(0, N_ROWS, n).astype(np.int64)
    dst_c, dst_s = np.empty((n, cos_v.shape[1]), cos_v.dtype), np.empty((n, sin_v.shape[1]), sin_v.dtype)
    start = int(rng.integers(0, N_ROWS - n))

    def copy_block():
        np.copyto(dst_c, cos_v[start : start + n])
        np.copyto(dst_s, sin_v[start : start + n])

    def gather_alloc():
        return cos_v[rows], sin_v[rows]

    def gather_into():
        np.take(cos_v, rows, axis=0, out=dst_c)
        np.take(sin_v, rows, axis=0, out=dst_s)

    def gather_kernel():
        kernels.gather_rows(cos_v, rows, dst_c)
        kernels.gather_rows(sin_v, rows, dst_s)

    nbytes = dst_c.nbytes + dst_s.nbytes
    tc = timeit(copy_block, repeat, min_time)
    ta = timeit(gather_alloc, repeat, min_time)
    ti = timeit(gather_into, repeat, min_time)
    tk = timeit(gather_kernel, repeat, min_time)
    print()
    print(f"4096-row gather, {nbytes / 2**20:.1f} MiB (cos + sin), from shared memory:")
    print()
    print("| operation | median | GB/s | share of copy bandwidth |")
    print("|---|---:|---:|---:|")
    for name, tt in (
        ("np.copyto of a contiguous block (reference)", tc),
        ("gather, allocating (`a[rows]`)", ta),
        ("gather into a preallocated output (`np.take(out=)`)", ti),
        (f"`engine.kernels.gather_rows` ({kernels.BACKEND}) into a preallocated output", tk),
    ):
        print(f"| {name} | {fmt(tt)} | {nbytes / tt / 1e9:.2f} | {tc / tt:.2f} |")


def bench_on_demand(client: Client, builds: int) -> None:
    times = []
    for i in range(builds):
        spec = {"head_dim": HEAD_DIM, "rope_theta": 20000.0 + i}  # a table nobody asked for yet
        t0 = time.perf_counter()
        view = client.table("rope", spec)
        times.append(time.perf_counter() - t0)
        assert view.length == N_ROWS and view.cos.shape == (N_ROWS, HEAD_DIM // 2)
    print()
    print(
        f"on-demand build, Client.table() on a new {N_ROWS} x {HEAD_DIM} RoPE float32 spec until the "
        f"view is back ({builds} builds): median {fmt(statistics.median(times))}, "
        f"min {fmt(min(times))}, max {fmt(max(times))}"
    )


def bench_default_start(procs: Procs) -> None:
    ns = unique_namespace("pbench")
    try:
        t0 = time.perf_counter()
        eng = procs.engine(None, ns, timeout=600)  # the embedded default tables
        t = time.perf_counter() - t0
        m = eng.manifest()
        total = sum(e["nbytes"] for e in m["tables"].values())
        log = [line for line in eng.stderr().splitlines() if "generation" in line]
        print()
        print(
            f"engine start -> ready, embedded default tables ({len(m['tables'])} tables, "
            f"{total / 2**30:.2f} GiB): {fmt(t)} (process start to complete manifest; engine log: "
            f"{log[-1].split(': ', 1)[1] if log else '?'})"
        )
        assert eng.stop(signal.SIGTERM, timeout=120) == 0, eng.logs()
    finally:
        left = remove_leftovers(ns)
        assert not left, f"default-table engine left {left}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--min-time", type=float, default=0.05)
    ap.add_argument("--builds", type=int, default=5)
    ap.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1, like the numpy gathers: on a few shared "
        "cores a second thread only adds hand-off latency to small ops)",
    )
    ap.add_argument("--quick", action="store_true", help="3 repeats, 2 builds, skip the default-table start")
    args = ap.parse_args()
    if args.quick:
        args.repeat, args.min_time, args.builds = 3, 0.02, 2

    import torch

    from posenc.engine import kernels_info

    torch.set_num_threads(args.torch_threads)
    malloc = steady_malloc()
    print(
        f"# bench_engine: {platform.machine()}, {os.cpu_count()} cpus, python {platform.python_version()}, "
        f"numpy {np.__version__}, torch {torch.__version__}, backend {kernels_info()}, "
        f"malloc thresholds raised: {malloc}, load average {os.getloadavg()[0]:.1f}"
    )
    print()
    cfg = {"length": N_ROWS, "tables": [{"family": "rope", "spec": SPEC, "name": "bench-rope"}]}
    with engine_client(cfg, "bench_engine") as (procs, eng, client):
        bench_reads(client, args.repeat, args.min_time)
        bench_on_demand(client, args.builds)
        assert eng.stop() == 0, eng.logs()
        if not args.quick:
            bench_default_start(procs)
    print(
        f"\nload average at the end {os.getloadavg()[0]:.1f}; nothing of the benchmark's namespaces left in /dev/shm"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
