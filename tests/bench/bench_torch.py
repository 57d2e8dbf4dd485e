"""posenc.torch.RotaryEmbedding against the model's own rotary embedding, on CPU, in one run.

    python tests/bench/bench_torch.py              # the section in docs/benchmarks.md
    python tests/bench/bench_torch.py --quick

One forward for position_ids [8, 4096] (each row 0..4095, a prefill batch) at head_dim 128
(Llama: hidden 4096, 32 heads), returning cos and sin [8, 4096, 128]:
- ``transformers``: LlamaRotaryEmbedding.forward (float32 outer product, cat, cos, sin, cast);
- ``posenc local``: RotaryEmbedding with no engine (its own table, built once before timing);
- ``posenc shared``: RotaryEmbedding reading a running engine's table (started here as a
  subprocess under a unique namespace, removed at the end).
For x in float32 and bfloat16. The three take turns within every repeat, so load from other
sessions hits them alike; each cell is the median of --repeat timings, each averaging enough
calls to last --min-time seconds. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "bench")]

import torch  # noqa: E402
import transformers  # noqa: E402
from timing import calibrate  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402

from posenc.engine import kernels  # noqa: E402
from posenc.engine.reader.client import Client  # noqa: E402
from posenc.torch import RotaryEmbedding  # noqa: E402
from tests.procs import Procs, unique_namespace  # noqa: E402
from tests.shm import remove_leftovers  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.repeat, args.min_time = 3, 0.05
    config = transformers.LlamaConfig(hidden_size=4096, num_attention_heads=32, max_position_embeddings=8192)
    pos = torch.arange(4096).repeat(8, 1)
    ns = unique_namespace("pbench")
    procs = Procs(Path("/tmp") / ns)
    try:
        eng = procs.engine(
            {
                "length": 8192,
                "tables": [
                    {
                        "name": "llama",
                        "family": "rope",
                        "hf_config": config.to_dict(),
                        "dtypes": ["float32", "bfloat16"],
                    }
                ],
            },
            ns,
            timeout=120,
        )
        stock = LlamaRotaryEmbedding(config)
        local = RotaryEmbedding(config, client=Client(namespace=unique_namespace("pnone")))
        shared = RotaryEmbedding(config, namespace=ns)
        print(
            f"python {platform.python_version()}, torch {torch.__version__} ({torch.get_num_threads()} threads), "
            f"transformers {transformers.__version__}, posenc kernels {kernels.BACKEND}, "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
        )
        print(f"forward(x, position_ids [8, 4096]) -> cos, sin [8, 4096, 128]; median of {args.repeat}\n")
        print(
            "| x dtype | transformers | posenc local | posenc shared | transformers / local | transformers / shared |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.zeros(1, dtype=dtype)
            fns = {
                "transformers": lambda: stock(x, pos),
                "local": lambda: local(x, pos),
                "shared": lambda: shared(x, pos),
            }
            for f in fns.values():
                f()
            assert shared.source == "shared" and local.source == "local"
            number = {k: calibrate(f, args.min_time) for k, f in fns.items()}
            times = {k: [] for k in fns}
            for _ in range(args.repeat):
                for k, f in fns.items():
                    t0 = time.perf_counter()
                    for _ in range(number[k]):
                        f()
                    times[k].append((time.perf_counter() - t0) / number[k])
            med = {k: statistics.median(v) for k, v in times.items()}
            print(
                f"| {str(dtype).split('.')[1]} | {med['transformers'] * 1e3:.2f} ms | {med['local'] * 1e3:.2f} ms | "
                f"{med['shared'] * 1e3:.2f} ms | {med['transformers'] / med['local']:.2f} | "
                f"{med['transformers'] / med['shared']:.2f} |"
            )
        eng.stop(signal.SIGTERM)
    finally:
        procs.cleanup()
        left = remove_leftovers(ns)
        if left:
            print(f"removed leftovers of {ns}: {left}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
