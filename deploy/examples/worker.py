"""Example co-located worker: reads posenc tables from the pod's shared /dev/shm, zero-copy.

It runs as a third container beside the engine (deploy/k8s/overlays/colocated). A real consumer, such as
a model server with posenc installed, does the same: attach once, then slice the shared tables
for each batch instead of computing them or asking the HTTP service.

    python worker.py [--head-dim 128] [--rope-theta 500000] [--interval 30] [--once]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from posenc.engine.client import Client


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--rope-theta", type=float, default=500000.0)
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between reads")
    parser.add_argument("--once", action="store_true", help="read once and exit")
    parser.add_argument(
        "--ready-timeout",
        type=float,
        default=120.0,
        help="seconds to wait for the engine to publish its tables",
    )
    args = parser.parse_args(argv)

    client = Client(
        shm_dir=os.environ.get("POSENC_SHM_DIR", "/dev/shm"),
        namespace=os.environ.get("POSENC_NAMESPACE", "posenc"),
    )
    client.wait_ready(timeout=args.ready_timeout)
    # The spec fields of docs/reference.md (`rope`), without selections: the whole shared table.
    # One that is not in shared memory yet is built once by the engine, on request.
    spec = {"head_dim": args.head_dim, "rope_theta": args.rope_theta}
    while True:
        cos = client.table("rope", spec).cos
        # A read-only view of the engine's pages: nothing was copied, nothing can be written.
        print(
            f"rope cos {cos.shape} {cos.dtype} zero-copy={not cos.flags.owndata}"
            f" writeable={cos.flags.writeable}",
            flush=True,
        )
        if args.once:
            return 0
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
