"""Adoption at scale. A script, not a test:

    python tests/bench/bench_adopt.py [--tables 2000] [--rows 4096] [--rounds 3]

An engine (``python -m posenc.engine.engine_main``, as ``posenc serve`` runs it) with ``--tables``
configured RoPE tables (head_dim 64, a different rope_theta each: ``--rows`` x 256 bytes, 1 MiB
each by default, 2 GiB in all), its keeper being this process (engine/keeper.py's ``Keeper``, the
one ``posenc serve`` holds). Each round SIGKILLs the engine and starts the next one, timing
process start to ready (its ``--ready-fd``): it adopts every table the keeper held. Baseline in the
same run: the cold start of the same config (nothing held). Medians over ``--rounds``; nothing is
left in /dev/shm.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from posenc.engine.keeper import Keeper

LOG = open(os.environ.get("BENCH_ENGINE_LOG", os.devnull), "ab")   # the engines' stderr


def start(config: str, ns: str, keeper: Keeper) -> tuple[subprocess.Popen, float]:
    r, w = os.pipe()
    channel = keeper.channel()
    t0 = time.perf_counter()
    with channel:
        p = subprocess.Popen([sys.executable, "-m", "posenc.engine.engine_main", "--tables", config,
                              "--namespace", ns, "--ready-fd", str(w), "--keeper-fd", str(channel.fileno()),
                              "--verify-interval", "0"], pass_fds=(w, channel.fileno()), stderr=LOG)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        if f.readline() != b"ready\n":
            raise RuntimeError(f"engine exited with {p.wait()}")
    return p, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tables", type=int, default=2000)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    ns = f"bench-{uuid.uuid4().hex[:8]}"
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"length": a.rows, "tables": [{"name": f"t{k}", "family": "rope",
                                                  "spec": {"head_dim": 64, "rope_theta": 1000.0 + k}}
                                                 for k in range(a.tables)]}, f)
    cold, adopt = [], []
    try:
        for _ in range(a.rounds):
            keeper = Keeper()
            p, t = start(f.name, ns, keeper)
            cold.append(t)
            for _ in range(a.rounds):
                p.send_signal(signal.SIGKILL)
                p.wait()
                p, t = start(f.name, ns, keeper)
                adopt.append(t)
            held = keeper.tables()
            p.send_signal(signal.SIGTERM)
            p.wait()
            keeper.close()
    finally:
        os.unlink(f.name)
    left = [n for n in os.listdir("/dev/shm") if n.startswith(ns)]
    mib = a.tables * a.rows * 256 / 2**20
    print(f"{a.tables} tables, {mib:.0f} MiB, held by the keeper: {held}")
    print(f"cold start to ready:          median {statistics.median(cold):.3f} s over {len(cold)}")
    print(f"restart after kill -9, adopt: median {statistics.median(adopt):.3f} s over {len(adopt)} "
          f"(max {max(adopt):.3f} s; {statistics.median(cold) / statistics.median(adopt):.1f}x faster than cold)")
    print(f"left in /dev/shm: {left or 'nothing'}")
    return 0 if not left else 1


if __name__ == "__main__":
    sys.exit(main())
