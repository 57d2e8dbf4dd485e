"""Table-build benchmark: posenc's exact float64-then-round-once builds beside a plain
torch float32 implementation of the same tables. A script, not a test:

    python tests/bench/bench_tables.py [--repeats 7]

Prints a markdown table of medians (of --repeats timings, best in brackets: on a shared,
noisy machine the best is the steadier number) and the ratio of medians posenc / torch
(above 1: posenc is slower). Cases:
- RoPE, head_dim 128, positions 0..131071 (a 131072 × 128 cos and sin), rope_theta 10000;
  torch: float32 ``outer(arange, inv_freq)`` → ``cat`` → ``cos``/``sin`` → ``.to(dtype)``.
- ALiBi decode block, 32 heads × 1 query (4095) × 4096 keys, causal;
  torch: ``slopes[:, None, None] * -(i - j)`` in float32 → ``.to(dtype)``.
torch's version is the float32 arithmetic transformers uses, i.e. less exact; the ratio is the
price of exactness (and of validation, which every posenc call includes).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from posenc.engine.answer.pipeline import compute  # noqa: E402

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
N_POS, HEAD_DIM = 131072, 128
HEADS, KEYS = 32, 4096


def median_time(fn, repeats, inner=1):
    fn()  # warm-up (imports, allocator, caches)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times), min(times)


def torch_rope(dtype):
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM))
    freqs = torch.outer(torch.arange(N_POS, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def torch_slopes(n):
    c = 2 ** math.floor(math.log2(n))
    s = [2.0 ** (-8.0 * j / c) for j in range(1, c + 1)]
    s += [2.0 ** (-4.0 * j / c) for j in range(1, 2 * (n - c), 2)]
    return torch.tensor(s[:n], dtype=torch.float32)


SLOPES = torch_slopes(HEADS)


def torch_alibi(dtype):
    i = torch.tensor([KEYS - 1], dtype=torch.float32)
    j = torch.arange(KEYS, dtype=torch.float32)
    return (SLOPES[:, None, None] * -(i[None, :, None] - j[None, None, :])).to(dtype)


def posenc_rope(dtype):
    return compute(
        "rope",
        {"head_dim": HEAD_DIM, "positions": {"start": 0, "stop": N_POS}, "dtype": dtype},
        max_bytes=2**30,
    )


def posenc_alibi(dtype):
    return compute(
        "alibi", {"num_heads": HEADS, "query": [KEYS - 1], "key": {"start": 0, "stop": KEYS}, "dtype": dtype}
    )


def fmt(seconds):
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} µs"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7, help="timings per case; the median is shown")
    args = ap.parse_args(argv)
    try:
        from posenc.engine.kernels import info

        backend = info()
    except Exception:  # the kernels may not exist in every checkout
        backend = {"backend": "n/a"}
    print(
        f"# posenc table builds — {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"python {platform.python_version()}, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"posenc backend {backend.get('backend')} {backend.get('features', '')}, median of {args.repeats}"
    )
    print()
    print("| case | dtype | posenc median (best) | torch float32 median (best) | posenc / torch |")
    print("|---|---|---:|---:|---:|")
    cases = [
        (f"RoPE {N_POS} × {HEAD_DIM} (cos+sin)", posenc_rope, torch_rope, 1),
        (f"ALiBi {HEADS} heads × 1 × {KEYS} (decode)", posenc_alibi, torch_alibi, 50),
    ]
    for name, ours, theirs, inner in cases:
        for dt, tdt in DTYPES.items():
            a, a_best = median_time(lambda: ours(dt), args.repeats, inner)
            b, b_best = median_time(lambda: theirs(tdt), args.repeats, inner)
            print(
                f"| {name} | {dt} | {fmt(a)} ({fmt(a_best)}) | {fmt(b)} ({fmt(b_best)}) | {a / b:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
