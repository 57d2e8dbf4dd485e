"""Run locust headless for a bounded time (CSV + HTML) and read its per-request-type summary."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

from ..servers import pinned

LOCUSTFILE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "workloads", "locustfile.py"
)


def run(
    host: str,
    out_prefix: str,
    users: int = 32,
    spawn_rate: float | None = None,
    run_time: float = 20.0,
    processes: int = 1,
    cpus: str | None = None,
    weights: str | None = None,
    payloads: str | None = None,
    extra: list[str] | None = None,
    log_path: str | None = None,
) -> dict:
    """Locust headless against ``host``; returns ``summary(out_prefix)``. Stops by itself."""
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        LOCUSTFILE,
        "--headless",
        "-u",
        str(users),
        "-r",
        f"{spawn_rate or users:g}",
        "-t",
        f"{max(1, round(run_time))}s",
        "--stop-timeout",
        "5",
        "--host",
        host,
        "--csv",
        out_prefix,
        "--html",
        out_prefix + ".html",
        "--only-summary",
        "--loglevel",
        "WARNING",
        "--exit-code-on-error",
        "0",
    ]
    if processes != 1:
        cmd += ["--processes", str(processes)]
    if weights:
        cmd += ["--posenc-weights", weights]
    if payloads:
        cmd += ["--posenc-payloads", os.path.abspath(payloads)]
    cmd += extra or []
    with open(log_path or os.devnull, "wb") as log:
        p = subprocess.run(
            pinned(cmd, cpus), stdout=log, stderr=subprocess.STDOUT, timeout=run_time + 60, check=False
        )
    if p.returncode != 0:
        raise RuntimeError(f"locust exited with {p.returncode}" + (f"; see {log_path}" if log_path else ""))
    return summary(out_prefix)


def _num(v: str) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return 0.0


def summary(out_prefix: str) -> dict:
    """{name: {requests, failures, rps, p50_ms, p95_ms, p99_ms, avg_ms, max_ms, avg_bytes}}, 'Aggregated' last."""
    rows = {}
    with open(out_prefix + "_stats.csv", newline="") as f:
        for r in csv.DictReader(f):
            rows[r["Name"]] = {
                "type": r["Type"],
                "requests": int(_num(r["Request Count"])),
                "failures": int(_num(r["Failure Count"])),
                "rps": _num(r["Requests/s"]),
                "p50_ms": _num(r["50%"]),
                "p95_ms": _num(r["95%"]),
                "p99_ms": _num(r["99%"]),
                "avg_ms": _num(r["Average Response Time"]),
                "max_ms": _num(r["Max Response Time"]),
                "avg_bytes": _num(r["Average Content Size"]),
            }
    return rows
