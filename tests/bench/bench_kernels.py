"""Kernel benchmark: the simd backend against the numpy reference and against a plain
copy of the same number of output bytes, all in one run.

    python tests/bench/bench_kernels.py            # the table in docs/benchmarks.md
    python tests/bench/bench_kernels.py --quick    # fewer repeats, while developing

Each cell is the median of --repeat timings (each timing averages enough calls to last at least
--min-time seconds); simd, numpy and copy take turns within each repeat. "x numpy" is numpy time / simd time;
"% copy" is copy time / simd time, i.e. the share of plain-copy bandwidth the kernel reaches for the bytes it
writes (the copy is np.copyto between two buffers of the output's size).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from timing import calibrate  # noqa: E402  (tests/bench/timing.py, beside this script)

from posenc.engine.kernels import numpy_impl  # noqa: E402

try:
    from posenc.engine.kernels import _native  # noqa: E402
except ImportError:  # pragma: no cover - the table then has numpy and copy columns only
    _native = None


def timeit_interleaved(fns: dict, repeat: int, min_time: float) -> dict:
    """Median seconds per call of each callable. The callables take turns within every repeat,
    so load from other processes on a shared machine hits all of them alike and the ratios
    stay meaningful even when the absolute times drift."""
    numbers = {k: calibrate(f, min_time) for k, f in fns.items()}
    times = {k: [] for k in fns}
    for _ in range(repeat):
        for k, f in fns.items():
            t0 = time.perf_counter()
            for _ in range(numbers[k]):
                f()
            times[k].append((time.perf_counter() - t0) / numbers[k])
    return {k: statistics.median(v) for k, v in times.items()}


def cases(rng):
    """(name, out_bytes, {backend: callable}) for every benchmarked kernel call."""
    half = {  # the lead's design keeps tables in the output dtype: a gather is a copy + expand
        "float16": rng.standard_normal((131072, 64)).astype(np.float16),
        "bfloat16": rng.integers(0, 2**16, (131072, 64), dtype=np.uint16),
    }
    rows = rng.integers(0, 131072, 4096).astype(np.int64)
    for dt, tab in half.items():
        for layout in ("half_split", "interleaved"):
            out = np.empty((4096, 128), tab.dtype)
            yield (
                f"rope gather {dt} 4096x128 {layout}",
                out.nbytes,
                lambda m, t=tab, o=out, lay=layout: m.rope_expand(t, rows, o, lay),
            )
    full = rng.standard_normal((131072, 128)).astype(np.float16)
    out = np.empty((4096, 128), np.float16)
    yield "gather_rows float16 4096x128", out.nbytes, lambda m: m.gather_rows(full, rows, out)

    slopes = 2.0 ** (-8.0 * np.arange(1, 33) / 32)  # ALiBi, 32 heads
    for dt, st in (("float32", np.float32), ("float16", np.float16), ("bfloat16", np.uint16)):
        q, k = np.array([8191], np.int64), np.arange(8192, dtype=np.int64)
        out = np.empty((32, 1, 8192), st)
        yield (
            f"alibi decode 32x1x8192 {dt}",
            out.nbytes,
            lambda m, o=out, d=dt: m.alibi_block(slopes, q, k, o, d, False, False),
        )
    for dt, st in (("float32", np.float32), ("float16", np.float16), ("bfloat16", np.uint16)):
        p = np.arange(512, dtype=np.int64)
        out = np.empty((32, 512, 512), st)
        yield (
            f"alibi prefill 32x512x512 {dt} masked",
            out.nbytes,
            lambda m, o=out, d=dt: m.alibi_block(slopes, p, p, o, d, False, True),
        )

    lut = rng.integers(0, 32, 257).astype(np.int32)  # radius 128 (T5 max_distance)
    p = np.arange(512, dtype=np.int64)
    out = np.empty((512, 512), np.int32)
    yield "t5 512x512", out.nbytes, lambda m: m.t5_block(lut, p, p, out, 128)

    src = rng.standard_normal(1 << 20) * 100.0
    for dt, st in (("float32", np.float32), ("float16", np.float16), ("bfloat16", np.uint16)):
        out = np.empty(1 << 20, st)
        yield f"round_into 1M {dt}", out.nbytes, lambda m, o=out, d=dt: m.round_into(src, o, d)

    freqs = 1.0 / 10000.0 ** (np.arange(0, 128, 2) / 128)
    pos = np.arange(131072, dtype=np.int64)
    for dt, st in (("float32", np.float32), ("bfloat16", np.uint16)):
        oc, os_ = np.empty((131072, 64), st), np.empty((131072, 64), st)
        yield (
            f"sincos 131072x64 {dt}",
            2 * oc.nbytes,
            lambda m, c=oc, s=os_, d=dt: m.sincos(freqs, pos, 1.0, c, s, d),
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.05)
    ap.add_argument("--quick", action="store_true", help="--repeat 3 --min-time 0.01")
    ap.add_argument("--only", default="", help="substring filter on case names")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeat, args.min_time = 3, 0.01
    rng = np.random.default_rng(5)
    feats = ",".join(_native.FEATURES) if _native else "not built"
    print(
        f"# {platform.machine()}, {os.cpu_count()} cpus, numpy {np.__version__}, "
        f"simd features: {feats}; median of {args.repeat}, times in ms"
    )
    head = (
        f"| {'kernel':44} | {'out MB':>6} | {'simd':>8} | {'numpy':>8} | {'copy':>7} | "
        f"{'x numpy':>7} | {'% copy':>6} |"
    )
    print(head)
    print("|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|")
    for name, nbytes, call in cases(rng):
        if args.only not in name:
            continue
        a, b = np.ones(nbytes, np.uint8), np.empty(nbytes, np.uint8)
        fns = {"copy": lambda: np.copyto(b, a), "numpy": lambda: call(numpy_impl)}
        if _native:
            fns["simd"] = lambda: call(_native)
        t = timeit_interleaved(fns, args.repeat, args.min_time)
        t_copy, t_np, t_simd = t["copy"], t["numpy"], t.get("simd")
        cells = [
            f"{nbytes / 1e6:6.2f}",
            f"{t_simd * 1e3:8.3f}" if t_simd else f"{'-':>8}",
            f"{t_np * 1e3:8.3f}",
            f"{t_copy * 1e3:7.3f}",
            f"{t_np / t_simd:7.1f}" if t_simd else f"{'-':>7}",
            f"{100 * t_copy / t_simd:5.0f}%" if t_simd else f"{'-':>6}",
        ]
        print(f"| {name:44} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
