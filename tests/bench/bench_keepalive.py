"""The keep-alive race, reproduced. A script, not a test:

    python tests/bench/bench_keepalive.py [--keepalive 1] [--probes 300] [--spread 0.03]

A real ``posenc serve`` (1 worker, no gRPC; ``POSENC_KEEPALIVE_S=--keepalive``, short so that a
run is short) on 127.0.0.1, kept busy by a load thread on other connections. Each probe is what
a pooled client does: one request on a fresh keep-alive connection, then an idle of the
keep-alive timeout plus an offset (uniform in ±--spread s), then, if the connection does not read
as closed (the check geventhttpclient and urllib3 make before reusing one), the next request on
it. Counted by offset, before/after the timeout:

- ``failed``: the request was sent and the connection closed (EOF or reset) without an answer:
  what tritonclient.http reports as ``HTTPConnectionClosed`` (a POST is not retried);
- ``seen closed``: the client saw the close before reusing the connection (no failure).

A request sent before the server's timeout must never fail: it reached the server while the
connection was open. One sent after it may (the server's close crossed it on the wire): the
reason the default timeout (75 s) is longer than clients keep idle connections.
"""

from __future__ import annotations

import argparse
import os
import random
import select
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.procs import Procs  # noqa: E402
from tests.shm import unique_namespace  # noqa: E402

BODY = b'{"head_dim": 64, "positions": [1, 2, 3]}'


def request(port: int) -> bytes:
    return (
        b"POST /v1/rope HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-type: application/json\r\n"
        b"accept: application/x-safetensors\r\ncontent-length: %d\r\n\r\n" % (port, len(BODY))
    ) + BODY


def read_answer(s: socket.socket) -> bool:
    """One whole answer (True), or the connection closed first (False)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        try:
            got = s.recv(65536)
        except (ConnectionResetError, TimeoutError):
            return False
        if not got:
            return False
        buf += got
    head, _, rest = buf.partition(b"\r\n\r\n")
    n = int(
        next(
            line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
    )
    while len(rest) < n:
        got = s.recv(65536)
        if not got:
            return False
        rest += got
    return True


def probe(port: int, idle: float) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        req = request(port)
        s.sendall(req)
        if not read_answer(s):
            return "first failed"
        time.sleep(idle)
        if select.select([s], [], [], 0)[0]:  # readable while idle: closed (the pool's check)
            return "seen closed"
        try:
            s.sendall(req)
        except (BrokenPipeError, ConnectionResetError):
            return "failed"
        return "ok" if read_answer(s) else "failed"


def load(port: int, stop: threading.Event) -> None:
    req = request(port) * 8  # pipelined: the worker's loop is busy in bursts
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                for _ in range(50):
                    s.sendall(req)
                    for _ in range(8):
                        if not read_answer(s):
                            break
        except OSError:
            pass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keepalive", type=int, default=1)
    ap.add_argument("--probes", type=int, default=300)
    ap.add_argument("--spread", type=float, default=0.03)
    ap.add_argument("--parallel", type=int, default=8)
    a = ap.parse_args()
    procs = Procs(Path(tempfile.mkdtemp(prefix="bench-keepalive-")))
    counts = {"before": {}, "after": {}}
    try:
        server = procs.serve(
            {"length": 2048, "tables": [{"name": "r", "family": "rope", "spec": {"head_dim": 64}}]},
            workers=1,
            namespace=unique_namespace("bench"),
            env={**os.environ, "POSENC_KEEPALIVE_S": str(a.keepalive)},
        )
        stop = threading.Event()
        loaders = [threading.Thread(target=load, args=(server.port, stop), daemon=True) for _ in range(2)]
        for t in loaders:
            t.start()
        rng = random.Random(1)
        lock, left = threading.Lock(), [a.probes]

        def prober():
            while True:
                with lock:
                    if left[0] == 0:
                        return
                    left[0] -= 1
                off = rng.uniform(-a.spread, a.spread)
                got = probe(server.port, a.keepalive + off)
                with lock:
                    side = counts["before" if off < 0 else "after"]
                    side[got] = side.get(got, 0) + 1

        probers = [threading.Thread(target=prober) for _ in range(a.parallel)]
        for t in probers:
            t.start()
        for t in probers:
            t.join()
        stop.set()
        server.stop()
    finally:
        procs.cleanup()
    print(
        f"keep-alive timeout {a.keepalive} s, {a.probes} probes idling it ±{a.spread * 1000:.0f} ms, "
        f"the worker under load:"
    )
    for side in ("before", "after"):
        c = counts[side]
        print(
            f"  sent {side} the timeout: {sum(c.values())} probes: "
            + ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
