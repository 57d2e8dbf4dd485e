"""The resolved lookup (``Client.handle``, engine/reader/lookup.py) against its floors, all ratios from one
run, on a running engine's 131072-row RoPE tables:

    python tests/bench/bench_lookup.py            # the section in docs/benchmarks.md
    python tests/bench/bench_lookup.py --quick    # fewer repeats

What is timed (each cell: median of --repeat timings; each timing averages enough calls to last
--min-time seconds; every call takes the next positions of a pool drawn at random, seeds 25-27):
- first, in a fresh child process (``fresh_process``): the README's ``Client.lookup`` of a seen
  spec, no ``handle()`` call and the allocator as it comes, one row as a list and as a numpy
  array against the raw gather of the row, and 4,096 rows allocating their answer against a copy
  of the same bytes into one new array;
- one row: ``handle.lookup(p)`` (full width [1, 128] cos and sin, new arrays) against the raw
  gather of the same row out of the Client's mapped view (``view.cos[p], view.sin[p]``, half width,
  target lookup ≤ 1.5× it) and against torch computing it as transformers does (float32
  ``outer(p, inv_freq)``, ``cos``, ``sin``; target ≤ 0.5× it); positions inside the table, then
  with one in ten past it (computed exactly: no raw gather exists there);
- 4,096 rows into preallocated outputs against ``np.copyto`` of a contiguous block of the same
  bytes (the 2-4 MiB the lookup writes) from the same table, into the same outputs (target ≥ 0.7
  of its bandwidth). Both write into buffers already written (no first-touch page faults on either
  side); each lookup takes the next of 256 position sets (a million rows: the table does not stay
  in the caches between calls), each copy the next of 16 blocks spread over the table; the
  lookup's and the copy's timings are taken in turn, so that both see the same machine load;
- a [32, 128] batch in one call against 32 one-row lookups and against 32 lookups of 128 rows
  (rows/s; target ≥ 10× the one-row lookups);
for two specs: plain RoPE float32 half_split, and Llama-3.1's llama3 scaling bfloat16 interleaved;
then the 4,096-row gather against the copy for the plain spec in every dtype and layout.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "bench")]

from bench_engine import engine_client, fmt, steady_malloc  # noqa: E402  (beside this script)
from timing import calibrate, timeit  # noqa: E402

from posenc.engine.reader.client import Client  # noqa: E402

N_ROWS = 131072
SPECS = {
    "rope float32 half_split": {"head_dim": 128, "rope_theta": 10000.0, "dtype": "float32"},
    "llama3 bfloat16 interleaved": {
        "head_dim": 128,
        "rope_theta": 500000.0,
        "max_position_embeddings": 131072,
        "layout": "interleaved",
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        "dtype": "bfloat16",
    },
}
POOL = 256  # position sets per case, taken in turn
DTYPES = ("float32", "float16", "bfloat16")


def _pool(rng, shape, past: float):
    """POOL int64 arrays of ``shape``: positions uniform over the table, a share ``past`` of them
    uniform over [N_ROWS, 2**31) (past the table: computed)."""
    out = []
    for _ in range(POOL):
        p = rng.integers(0, N_ROWS, shape)
        far = rng.random(shape) < past
        p[far] = rng.integers(N_ROWS, 2**31, int(far.sum()))
        out.append(p.astype(np.int64))
    return out


def _cycling(fn, pool):
    it = itertools.cycle(pool)
    return lambda: fn(next(it))


def alternating(fa, fb, repeat: int, min_time: float) -> tuple[float, float]:
    """Median seconds per call of ``fa`` and of ``fb``, their timings taken in turn (on a loaded
    machine both then see the same load; timing.timeit takes one's timings, then the other's)."""
    na, nb = calibrate(fa, min_time), calibrate(fb, min_time)
    ta, tb = [], []
    for _ in range(repeat):
        for f, number, ts in ((fa, na, ta), (fb, nb, tb)):
            t0 = time.perf_counter()
            for _ in range(number):
                f()
            ts.append((time.perf_counter() - t0) / number)
    return statistics.median(ta), statistics.median(tb)


def gather_vs_copy(h, view, rng, past: float, repeat: int, min_time: float, copy=True, n=4096):
    """(seconds per ``h.lookup`` of n random rows into preallocated outputs, seconds per copy of
    the same bytes from contiguous rows of the same table into the same outputs, the outputs);
    the two timed in turn."""
    outs = tuple(np.empty((n, h.width[k]), h.np_dtype) for k in h.names)
    lookup = _cycling(lambda p: h.lookup(p, out=outs), _pool(rng, (n,), past))
    if not copy:
        return timeit(lookup, repeat, min_time), None, outs
    half = view.cos.shape[1]
    flat = tuple(o.reshape(-1, half) for o in outs)  # the same bytes, as half-width table rows
    rows = flat[0].shape[0]
    starts = [int(s) * rows for s in rng.permutation(view.cos.shape[0] // rows)[:16]]

    def copy_block(s):
        np.copyto(flat[0], view.cos[s : s + rows])
        np.copyto(flat[1], view.sin[s : s + rows])

    return (*alternating(lookup, _cycling(copy_block, starts), repeat, min_time), outs)


def bench_spec(client: Client, name: str, spec: dict, repeat: int, min_time: float) -> None:
    import torch

    h = client.handle("rope", spec)
    view = client.table(
        "rope", {k: v for k, v in spec.items() if k not in ("dtype", "layout")}, dtype=spec["dtype"]
    )
    assert h.fast, "the handle has no C plan (numpy backend?)"
    inv_t = torch.from_numpy(np.array(view.inv_freq))
    rng = np.random.default_rng(25)
    t = {}
    one_in, one_mixed = _pool(rng, (1,), 0.0), _pool(rng, (1,), 0.1)
    t["lookup 1"] = timeit(_cycling(h.lookup, one_in), repeat, min_time)
    t["lookup 1 mixed"] = timeit(_cycling(h.lookup, one_mixed), repeat, min_time)
    t["raw 1"] = timeit(_cycling(lambda p: (view.cos[p], view.sin[p]), one_in), repeat, min_time)
    one_t = [torch.from_numpy(p.astype(np.float32)) for p in one_in]

    def on_the_fly(p):
        ang = torch.outer(p, inv_t)
        return ang.cos(), ang.sin()

    t["torch 1"] = timeit(_cycling(on_the_fly, one_t), repeat, min_time)
    body = {**spec, "positions": [int(one_in[0][0])]}
    client.lookup("rope", body)  # seen: Client.lookup now takes the handle
    bodies = [{**spec, "positions": p.tolist()} for p in one_in]
    t["Client.lookup 1"] = timeit(_cycling(lambda b: client.lookup("rope", b), bodies), repeat, min_time)

    t["lookup 4096"], t["memcpy 4096"], outs = gather_vs_copy(h, view, rng, 0.0, repeat, min_time)
    t["lookup 4096 mixed"] = gather_vs_copy(h, view, rng, 0.01, repeat, min_time, copy=False)[0]

    batch = _pool(rng, (32, 128), 0.0)[:32]
    bouts = tuple(np.empty((32, 128, 128), h.np_dtype) for _ in h.names)
    t["batch 32x128"] = timeit(_cycling(lambda p: h.lookup(p, out=bouts), batch), repeat, min_time)
    rows128 = [p[0] for p in batch]
    t["lookup 128"] = timeit(_cycling(h.lookup, rows128), repeat, min_time)

    nbytes = sum(o.nbytes for o in outs)
    print(f"### {name} ({h.dtype}, 131072-row table, full width 128)")
    print()
    print("| measure | median | floor | floor median | ratio | target |")
    print("|---|---:|---|---:|---:|---|")
    print(
        f"| 1 row, inside | {fmt(t['lookup 1'])} | raw gather `view.cos[p], view.sin[p]` | {fmt(t['raw 1'])} "
        f"| {t['lookup 1'] / t['raw 1']:.2f}× | ≤ 1.5× |"
    )
    print(
        f"| 1 row, inside | {fmt(t['lookup 1'])} | torch computing it | {fmt(t['torch 1'])} "
        f"| {t['lookup 1'] / t['torch 1']:.2f}× | ≤ 0.5× |"
    )
    print(
        f"| 1 row, 1 in 10 past the table | {fmt(t['lookup 1 mixed'])} | torch computing it | {fmt(t['torch 1'])} "
        f"| {t['lookup 1 mixed'] / t['torch 1']:.2f}× | |"
    )
    print(
        f"| 1 row, `Client.lookup` (the README's call) | {fmt(t['Client.lookup 1'])} | raw gather "
        f"| {fmt(t['raw 1'])} | {t['Client.lookup 1'] / t['raw 1']:.2f}× | |"
    )
    print(
        f"| 4096 rows into `out=`, inside | {fmt(t['lookup 4096'])} | np.copyto of {nbytes / 2**20:.0f} MiB "
        f"| {fmt(t['memcpy 4096'])} | {t['memcpy 4096'] / t['lookup 4096']:.2f} of its bandwidth | ≥ 0.7 |"
    )
    print(
        f"| 4096 rows into `out=`, 1 in 100 past | {fmt(t['lookup 4096 mixed'])} | np.copyto "
        f"| {fmt(t['memcpy 4096'])} | {t['memcpy 4096'] / t['lookup 4096 mixed']:.2f} of its bandwidth | |"
    )
    rate = {k: rows / t[k] for k, rows in (("batch 32x128", 4096), ("lookup 1", 1), ("lookup 128", 128))}
    print(
        f"| [32, 128] batch, rows/s | {rate['batch 32x128'] / 1e6:.1f} M/s ({fmt(t['batch 32x128'])}) "
        f"| 32 one-row lookups | {rate['lookup 1'] / 1e6:.2f} M/s | {rate['batch 32x128'] / rate['lookup 1']:.0f}× "
        f"| ≥ 10× |"
    )
    print(
        f"| [32, 128] batch, rows/s | {rate['batch 32x128'] / 1e6:.1f} M/s | 32 lookups of 128 rows "
        f"| {rate['lookup 128'] / 1e6:.1f} M/s | {rate['batch 32x128'] / rate['lookup 128']:.2f}× | |"
    )
    print()


def bench_gathers(client: Client, spec: dict, repeat: int, min_time: float) -> None:
    """4,096 random rows against the copy of the same bytes, for every dtype and layout."""
    rng = np.random.default_rng(26)
    table_spec = {k: v for k, v in spec.items() if k not in ("dtype", "layout")}
    print("### 4096 random rows of the plain table (half width 64 stored, full width 128 answered)")
    print()
    print(
        "| dtype | layout | lookup into `out=` | np.copyto of the same bytes | share of its bandwidth | target |"
    )
    print("|---|---|---:|---:|---:|---|")
    for dtype in DTYPES:
        view = client.table("rope", table_spec, dtype=dtype)
        for layout in ("half_split", "interleaved"):
            h = client.handle("rope", {**table_spec, "dtype": dtype, "layout": layout})
            assert h.fast, "the handle has no C plan (numpy backend?)"
            t_lookup, t_copy, outs = gather_vs_copy(h, view, rng, 0.0, repeat, min_time)
            mib = sum(o.nbytes for o in outs) / 2**20
            print(
                f"| {dtype} | {layout} | {fmt(t_lookup)} | {fmt(t_copy)} ({mib:.0f} MiB) "
                f"| {t_copy / t_lookup:.2f} | ≥ 0.7 |"
            )
    print()


def fresh_process(ns: str, repeat: int, min_time: float) -> dict:
    """Run in a new Python process (``--fresh NS``): the README's ``Client.lookup`` as a user's
    process calls it, no ``handle()`` call before and glibc's allocator as it comes. For each spec,
    after its first lookup: one row as a list and as a numpy array against the raw gather of that
    row from the mapped view; 4,096 random rows (a numpy array, allocating the answer) against a
    copy of the same number of contiguous bytes of the table into one new array; then, timed
    alone, the other forms: one row with one in ten past the table, 4,096 with one in a hundred
    past it, 16-row ranges inside the table (alternated with lists of the same rows) and over twice
    the table. Returns {spec: {measure: seconds}}."""
    client = Client(namespace=ns)
    client.wait_ready(10)
    rng = np.random.default_rng(27)
    out = {}
    for name, spec in SPECS.items():
        table = {k: v for k, v in spec.items() if k not in ("dtype", "layout")}
        view = client.table("rope", table, dtype=spec["dtype"])
        client.lookup("rope", {**spec, "positions": [0]})  # seen: from now on its handle answers
        ones = _pool(rng, (1,), 0.0)
        lists = [{**spec, "positions": p.tolist()} for p in ones]
        arrays = [{**spec, "positions": p} for p in ones]
        for b, q in zip(lists, ones):  # one pass over the pool first: each row's page of the
            client.lookup("rope", b)  # table faults in once, for the lookup and the gather alike
            view.cos[q], view.sin[q]
        t = {}
        t["list"], t["raw"] = alternating(
            _cycling(lambda b: client.lookup("rope", b), lists),
            _cycling(lambda p: (view.cos[p], view.sin[p]), ones),
            repeat,
            min_time,
        )
        t["array"], t["raw for array"] = alternating(
            _cycling(lambda b: client.lookup("rope", b), arrays),
            _cycling(lambda p: (view.cos[p], view.sin[p]), ones),
            repeat,
            min_time,
        )
        many = [{**spec, "positions": p} for p in _pool(rng, (4096,), 0.0)]
        rows = 4096 * 128 // view.cos.shape[1]  # stored half-width rows: the bytes of one output
        starts = [int(s) * rows for s in rng.permutation(view.cos.shape[0] // rows)[:16]]

        def copy_new(s):  # one new array of the answer's bytes, filled from the table
            return np.concatenate((view.cos[s : s + rows], view.sin[s : s + rows]))

        t["4096"], t["copy new"] = alternating(
            _cycling(lambda b: client.lookup("rope", b), many), _cycling(copy_new, starts), repeat, min_time
        )
        assert client.lookup("rope", many[0])["cos"].nbytes * 2 == copy_new(0).nbytes
        # the other forms a user sends (a pool of their own, seed 28: the figures above stay put):
        # rows past the table (computed), and ranges: inside the table against a list of the same
        # 16 rows, and over twice the table (half of them computed rows)
        other = np.random.default_rng(28)
        starts16 = other.integers(0, N_ROWS - 16, POOL)
        in_ranges = [{**spec, "positions": {"start": int(s), "stop": int(s) + 16}} for s in starts16]
        in_lists = [{**spec, "positions": list(range(int(s), int(s) + 16))} for s in starts16]
        t["range 16 in"], t["list 16 in"] = alternating(
            _cycling(lambda b: client.lookup("rope", b), in_ranges),
            _cycling(lambda b: client.lookup("rope", b), in_lists),
            repeat,
            min_time,
        )
        mixed = [{**spec, "positions": p.tolist()} for p in _pool(other, (1,), 0.1)]
        t["list mixed"] = timeit(_cycling(lambda b: client.lookup("rope", b), mixed), repeat, min_time)
        far = [{**spec, "positions": p} for p in _pool(other, (4096,), 0.01)]
        t["4096 mixed"] = timeit(_cycling(lambda b: client.lookup("rope", b), far), repeat, min_time)
        ranges = [
            {**spec, "positions": {"start": int(s), "stop": int(s) + 16}}
            for s in other.integers(0, 2 * N_ROWS, POOL)
        ]
        t["range 16"] = timeit(_cycling(lambda b: client.lookup("rope", b), ranges), repeat, min_time)
        out[name] = t
    return out


def print_fresh(ns: str, repeat: int, min_time: float) -> None:
    import json
    import subprocess

    argv = [sys.executable, __file__, "--fresh", ns, "--repeat", str(repeat), "--min-time", str(min_time)]
    got = json.loads(subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True).stdout)
    print("### `Client.lookup` in a fresh process (no `handle()` call, the allocator as it comes)")
    print()
    print("| measure | " + " | ".join(got) + " | target |")
    print("|---|" + "---:|" * len(got) + "---|")
    rows = [
        ("1 row as a list / raw gather of the row", lambda t: f"{t['list'] / t['raw']:.2f}×", "≤ 1.5×"),
        (
            "1 row as a numpy array / raw gather",
            lambda t: f"{t['array'] / t['raw for array']:.2f}×",
            "≤ 1.5×",
        ),
        ("1 row as a list, median", lambda t: fmt(t["list"]), ""),
        ("raw gather of the row, median", lambda t: fmt(t["raw"]), ""),
        ("1 row as a list, 1 in 10 past the table, median", lambda t: fmt(t["list mixed"]), ""),
        (
            "16 rows inside the table as a range / as a list of the same rows",
            lambda t: f"{t['range 16 in'] / t['list 16 in']:.2f}× ({fmt(t['range 16 in'])})",
            "",
        ),
        ("16 rows as a range in 0 .. 2 × the table, median", lambda t: fmt(t["range 16"]), ""),
        ("4,096 rows, 1 in 100 past the table, allocating, median", lambda t: fmt(t["4096 mixed"]), ""),
        (
            "4,096 rows, allocating: share of a copy into a new array",
            lambda t: f"{t['copy new'] / t['4096']:.2f}",
            "≥ 0.7",
        ),
        ("4,096 rows, allocating, median", lambda t: fmt(t["4096"]), ""),
    ]
    for label, cell, target in rows:
        print(f"| {label} | " + " | ".join(cell(t) for t in got.values()) + f" | {target} |")
    print()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--min-time", type=float, default=0.05)
    ap.add_argument("--quick", action="store_true", help="3 repeats of 20 ms")
    ap.add_argument("--fresh", metavar="NAMESPACE", help=argparse.SUPPRESS)  # print_fresh's child
    args = ap.parse_args()
    if args.quick:
        args.repeat, args.min_time = 3, 0.02
    if args.fresh:
        import json

        print(json.dumps(fresh_process(args.fresh, args.repeat, args.min_time)))
        return 0

    import torch

    from posenc.engine import kernels_info

    torch.set_num_threads(1)
    malloc = steady_malloc()
    print(
        f"# bench_lookup: {platform.machine()}, {os.cpu_count()} cpus, python {platform.python_version()}, "
        f"numpy {np.__version__}, torch {torch.__version__} (1 thread), backend {kernels_info()}, "
        f"malloc thresholds raised: {malloc}, load average {os.getloadavg()[0]:.1f}"
    )
    print()
    tables = [
        {
            "family": "rope",
            "spec": {k: v for k, v in s.items() if k not in ("dtype", "layout")},
            "dtypes": list(DTYPES) if name.startswith("rope") else [s["dtype"]],
        }
        for name, s in SPECS.items()
    ]
    with engine_client({"length": N_ROWS, "tables": tables}, "bench_lookup") as (_, eng, client):
        print_fresh(client.namespace, args.repeat, args.min_time)
        for name, spec in SPECS.items():
            bench_spec(client, name, spec, args.repeat, args.min_time)
        bench_gathers(client, SPECS["rope float32 half_split"], args.repeat, args.min_time)
        assert eng.stop() == 0, eng.logs()
    print(f"load average at the end {os.getloadavg()[0]:.1f}; nothing of the namespace left in /dev/shm")
    return 0


if __name__ == "__main__":
    sys.exit(main())
