"""The float32 JSON text of the C shortcut (service/shortcut/hot_f32text.c, ``_hot.f32_json``)
against orjson (the full path's writer) on the same arrays, in one run. A script, not a test:

    python tests/bench/bench_f32_text.py [--n 1048576] [--reps 15]

Arrays: ALiBi cells as the realistic mix asks them (-slope_h * d in float32, 32 heads' slopes,
distances d < 131,072) and uniform values in [-1, 1). Printed: ns per float, best of --reps, for
each writer, and their ratio. The texts are checked equal first (tests/tools/f32_text_exhaustive.py
checks every bit pattern).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import orjson

from posenc.service.shortcut import _hot


def best_ns(call, n: int, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--reps", type=int, default=15)
    a = ap.parse_args()
    rng = np.random.default_rng(1)
    slopes = 2.0 ** (-8 * np.arange(1, 33) / 32)
    arrays = {
        "alibi cells": (-(slopes[rng.integers(0, 32, a.n)] * rng.integers(0, 131072, a.n))).astype(
            np.float32
        ),
        "uniform -1..1": rng.uniform(-1, 1, a.n).astype(np.float32),
    }
    for name, x in arrays.items():
        assert _hot.f32_json(x) == orjson.dumps(x, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1], name
        ours = best_ns(lambda: _hot.f32_json(x), a.n, a.reps)
        theirs = best_ns(lambda: orjson.dumps(x, option=orjson.OPT_SERIALIZE_NUMPY), a.n, a.reps)
        print(
            f"{name:<14} hot_f32text {ours:5.1f} ns/float, orjson {theirs:5.1f} ns/float, ratio {ours / theirs:.2f}"
        )


if __name__ == "__main__":
    main()
