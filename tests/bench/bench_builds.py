"""Build rate against the number of tables held: the manifest's update cost. A script, not a test:

    python tests/bench/bench_builds.py [--at 100,1000,3000] [--builds 200]

An engine (``python -m posenc.engine.process.main``) holding small on-demand tables (RoPE
head_dim 8, a different rope_theta each, asked for over the engine's socket as readers ask
them), and co-located readers in this process as the service's workers are: a Python ``Client``
re-reading the manifest every 50 ms (its recheck; a refresh that found changes is timed) and the
C reader's ``posenc_changed`` /
``posenc_refresh`` (engine/reader/, through ctypes) every 50 ms. At each count of --at tables,
--builds new tables are built one after another (ensure round trips, 2 askers); printed per count:
builds/s, the median Python refresh and C refresh, and the bytes a build writes (the table log's
line; with ``--no-c`` against an engine of format 1, its whole manifest's size). The
build rate should not depend on the tables held (target: within 20% from 100 to 3,000).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from posenc.engine.reader.client import Client  # noqa: E402
from posenc.engine.store import segments as store  # noqa: E402
from tests.procs import Procs  # noqa: E402
from tests.shm import unique_namespace  # noqa: E402


def c_reader(tmp: Path):
    so = tmp / "libposenc_shm.so"
    subprocess.run(
        [
            "cc",
            "-std=c11",
            "-O2",
            "-shared",
            "-fPIC",
            str(ROOT / "engine/reader/posenc_shm.c"),
            "-o",
            str(so),
            "-lm",
        ],
        check=True,
    )
    lib = ctypes.CDLL(str(so))
    lib.posenc_connect.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    for f in ("posenc_changed", "posenc_refresh", "posenc_close"):
        getattr(lib, f).argtypes = [ctypes.c_void_p]
    return lib


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--at", default="100,1000,3000")
    ap.add_argument("--builds", type=int, default=200)
    ap.add_argument("--no-c", action="store_true", help="no C reader (an engine of another manifest format)")
    a = ap.parse_args()
    counts = [int(x) for x in a.at.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bench-builds-"))
    procs, ns = Procs(tmp), unique_namespace("bench")
    lib = None if a.no_c else c_reader(tmp)
    changes_file = getattr(store, "log_path", store.manifest_path)  # (what a build writes)
    rows, stop = [], threading.Event()
    py_t: list[float] = []
    c_t: list[float] = []
    try:
        eng = procs.engine(
            {"length": 64, "tables": [{"name": "t0", "family": "rope", "spec": {"head_dim": 8}}]},
            ns,
            args=["--memory-budget", str(8 * 2**30), "--verify-interval", "0"],
            timeout=60,
        )
        asker = Client(namespace=ns)
        reader = Client(namespace=ns)
        reader.wait_ready()
        conn = ctypes.c_void_p()
        assert lib is None or lib.posenc_connect(None, ns.encode(), ctypes.byref(conn)) == 0

        def python_reader():
            while not stop.is_set():
                before = reader._manifest
                t0 = time.perf_counter()
                m = reader.manifest()
                if m is not before:  # (a refresh that found changes)
                    py_t.append(time.perf_counter() - t0)
                time.sleep(0.05)

        def c_reader_loop():
            while lib is not None and not stop.is_set():
                if lib.posenc_changed(conn):
                    t0 = time.perf_counter()
                    lib.posenc_refresh(conn)
                    c_t.append(time.perf_counter() - t0)
                time.sleep(0.05)

        readers = [
            threading.Thread(target=python_reader, daemon=True),
            threading.Thread(target=c_reader_loop, daemon=True),
        ]
        for t in readers:
            t.start()
        k = 0

        def build(n: int) -> None:
            nonlocal k
            lock = threading.Lock()

            def one():
                nonlocal k
                while True:
                    with lock:
                        if n == 0 or k >= goal:
                            return
                        theta = 1000.0 + k
                        k += 1
                    asker._ensure(
                        asker.resolve("rope", {"head_dim": 8, "rope_theta": theta, "positions": [0]}).table,
                        16,
                    )

            goal = k + n
            ts = [threading.Thread(target=one) for _ in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()

        for target in counts:
            build(max(0, target - k))  # (untimed) up to this many tables
            del py_t[:], c_t[:]
            size0 = os.stat(changes_file("/dev/shm", ns)).st_size
            t0 = time.perf_counter()
            build(a.builds)
            took = time.perf_counter() - t0
            size1 = os.stat(changes_file("/dev/shm", ns)).st_size
            per_line = (size1 - size0) / a.builds if changes_file is not store.manifest_path else size1
            rows.append(
                (
                    target,
                    a.builds / took,
                    statistics.median(py_t) if py_t else 0.0,
                    statistics.median(c_t) if c_t else 0.0,
                    per_line,
                )
            )
        stop.set()
        for t in readers:
            t.join(5)
        if lib is not None:
            lib.posenc_close(conn)
        held = len(reader.manifest(force=True)["tables"])
        assert eng.stop() == 0
    finally:
        stop.set()
        procs.cleanup()
    left = [n for n in os.listdir("/dev/shm") if n.startswith(f"{ns}.")]
    print(
        f"# bench_builds: {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}; {held} tables at the end"
    )
    print()
    print(
        "| tables held | builds/s | vs the first | Python reader refresh (median) | C reader refresh (median) "
        "| bytes written per build |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for n, rate, py, c, line in rows:
        print(
            f"| {n} | {rate:.0f} | {rate / rows[0][1]:.2f} | {py * 1e6:.0f} µs | {c * 1e6:.0f} µs | {line:.0f} |"
        )
    print(f"\nleft in /dev/shm: {left or 'nothing'}")
    return 0 if not left else 1


if __name__ == "__main__":
    sys.exit(main())
