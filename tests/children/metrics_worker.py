"""A worker that counts N C-path answers of /v1/rope of 10 bytes into the metrics of (shm_dir, namespace),
waits until its flusher has written them to its file (every FLUSH_S: what a kill -9 can lose is what
came after the last write), says so on stdout, then exits through close() ("exit") or holds still until
it is killed ("hang").

    python -m tests.children.metrics_worker SHM_DIR NAMESPACE N exit|hang
"""

from __future__ import annotations

import json
import signal
import sys

import numpy as np

from posenc.service.metrics.counters import Metrics
from posenc.service.metrics.layout import NB
from tests.waits import wait_for


def written(path: str, base: int) -> float:
    """The answers counted at ``base`` in the worker's file (its buckets' sum), as a scrape reads them."""
    return float(np.fromfile(path, dtype=np.float64)[base : base + NB].sum())


def main() -> None:
    shm, ns, n, how = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    m = Metrics(shm, ns)
    base = Metrics.path_index("/v1/rope", "c")
    for _ in range(n):
        m.observe_at(base, 30e-6, 10)
    wait_for(
        lambda: written(m.path, base) == n,
        what=f"the flusher to write the {n} counts to {m.path}",
        seen=lambda: written(m.path, base),
    )
    print(json.dumps({"counted": n}), flush=True)
    if how == "exit":
        m.close()
        return
    while True:
        signal.pause()  # until killed


if __name__ == "__main__":
    main()
