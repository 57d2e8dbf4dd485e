"""h2load (C, nghttp2-client) as the gRPC client of the load test and the benchmarks: it sends
gRPC frames as HTTP/2 request bodies, so a C client measures posenc's gRPC server (and the gRPC
floor) without a Python client's own cost in the figures. h2load does not read gRPC trailers:
callers check one answer with a real client first.

    run("http://127.0.0.1:8001/inference.GRPCInferenceService/ModelInfer", "req.bin", n=3000, log=...)
"""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess

import numpy as np

from ..servers import pinned

GRPC_HEADERS = ("content-type: application/grpc", "te: trailers")
INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"


def available() -> str | None:
    return shutil.which("h2load")


def grpc_frame(message: bytes) -> bytes:
    """One gRPC length-prefixed message (uncompressed)."""
    return b"\0" + len(message).to_bytes(4, "big") + message


def write_frames(path: str, messages: list[bytes]) -> str:
    """A request body file: the messages framed one after another (one stream of them)."""
    with open(path, "wb") as f:
        f.write(b"".join(grpc_frame(m) for m in messages))
    return path


def run(
    url: str,
    data: str,
    *,
    n: int | None = None,
    seconds: float | None = None,
    c: int = 1,
    m: int = 1,
    log: str | None = None,
    cpus: str | None = None,
) -> dict:
    """{"rps"} (and with ``log``: "p50_us", "p99_us" from h2load's per-request log) of ``n``
    requests or ``seconds`` of them, on ``c`` connections with ``m`` streams each."""
    cmd = ["h2load", "-c", str(c), "-m", str(m), "-d", data]
    for h in GRPC_HEADERS:
        cmd += ["-H", h]
    cmd += ["-n", str(n)] if n else ["-D", f"{seconds:g}", "--warm-up-time", "1"]
    if log:
        cmd += ["--log-file", log]
    p = subprocess.run(pinned([*cmd, url], cpus), capture_output=True, text=True, timeout=600, check=False)
    out = p.stdout
    found = re.search(r"finished in [\d.]+\w*, ([\d.]+) req/s", out)
    counts = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", out)
    if not (found and counts) or int(counts.group(1)) == 0 or counts.group(1) != counts.group(2):
        raise RuntimeError(f"h2load failed (rc {p.returncode}) on {data}: {out[-800:]} {p.stderr[-300:]}")
    r = {"rps": float(found.group(1)), "connections": c, "streams": m}
    if log:
        with open(log) as f:
            times = [int(line.split("\t")[2]) for line in f if line.strip()]
        r["p50_us"] = statistics.median(times)
        r["p99_us"] = float(np.percentile(times, 99))
    return r
