"""Multi-axis RoPE and sinusoidal-grid rows through the answer pipeline, against a plain RoPE row
measured in the same run (in process: parse with the spec cache, gather from an in-memory table
built as the engine builds it, encode safetensors). The template shortcut does not serve these
requests yet (docs/benchmarks.md, "Multi-axis"), so this is the path they take today.

    python tests/bench/bench_multiaxis.py [--repeat 5] [--min-time 0.2] [--seed 1]

Each case draws its positions at random over the whole table and past its end (a tenth of the
requests), several specs per case, a fresh body per call.
"""

from __future__ import annotations

import argparse

import numpy as np
import orjson

from posenc.engine.answer import pipeline
from posenc.engine.core.encode import encode
from tests.bench.timing import timeit
from tests.service.shortcut.test_templates_in_memory import view_of

LENGTH = 8192
CASES = {
    "plain rope": [{"head_dim": 128, "rope_theta": t} for t in (1e4, 1e6)],
    "mrope (Qwen2.5-VL)": [
        {"head_dim": 128, "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
        {"head_dim": 128, "rope_theta": 5e6, "mrope_section": [24, 20, 20], "mrope_interleaved": True},
    ],
    "axes (Flux)": [{"head_dim": 128, "axes_dim": [16, 56, 56], "layout": "interleaved"}],
    "grid (SD3)": [
        {"embed_dim": 1536, "grid_size": 192, "base_size": 64},
        {"embed_dim": 1152, "grid_size": 96, "base_size": 64},
    ],
}


def bodies(case: str, rng, rows: int, count: int = 64) -> list[tuple[str, bytes]]:
    out = []
    for i in range(count):
        spec = CASES[case][i % len(CASES[case])]
        past = rng.random() < 0.1
        if case.startswith("grid"):
            n_rows = spec["grid_size"] ** 2
            out.append(
                (
                    "sinusoidal-grid",
                    orjson.dumps({**spec, "positions": rng.integers(0, n_rows, rows).tolist()}),
                )
            )
            continue
        hi = 4 * LENGTH if past else LENGTH
        if case == "plain rope":
            sel = {"positions": rng.integers(0, hi, rows).tolist()}
        else:
            sel = {"position_ids": rng.integers(0, hi, (3, rows)).tolist()}
        out.append(("rope", orjson.dumps({**spec, **sel})))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    p = pipeline.Pipeline(length=LENGTH)
    print("| case | rows | µs per request | ratio to plain rope |\n|---|---|---|---|")
    for rows in (1, 64):
        base = None
        for case in CASES:
            work = bodies(case, rng, rows)
            for fam, raw in work:  # tables built before timing, as the engine has them
                r = p.request(fam, orjson.loads(raw))
                if r.table is not None:
                    view_of(r.table)
            it = iter(work * 1000000)

            def one():
                fam, raw = next(it)
                req = p.request(fam, orjson.loads(raw))
                pipeline.check(req)
                encode(
                    req.family,
                    pipeline.arrays(req, view_of(req.table) if req.table else None),
                    req.dtype,
                    "safetensors",
                )

            t = timeit(one, args.repeat, args.min_time) * 1e6
            base = base or t
            print(f"| {case} | {rows} | {t:.1f} | {t / base:.2f} |")


if __name__ == "__main__":
    main()
