"""A worker that counts N C-path answers of /v1/rope of 10 bytes into the metrics of (shm_dir, namespace),
waits for its counts to reach its file (the flusher writes them every FLUSH_S: what a kill -9
can lose is the last FLUSH_S), says so on stdout, then exits through close() ("exit") or waits to be killed ("hang").

    python -m tests.children.metrics_worker SHM_DIR NAMESPACE N exit|hang
"""

from __future__ import annotations

import json
import sys
import time

from posenc.service.metrics.counters import FLUSH_S, Metrics


def main() -> None:
    shm, ns, n, how = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    m = Metrics(shm, ns)
    base = Metrics.path_index("/v1/rope", "c")
    for _ in range(n):
        m.observe_at(base, 30e-6, 10)
    time.sleep(3 * FLUSH_S)
    print(json.dumps({"counted": n}), flush=True)
    if how == "exit":
        m.close()
        return
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
