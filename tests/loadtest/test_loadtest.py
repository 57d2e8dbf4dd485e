"""Smoke run of the load tests (issue #6), so they cannot rot: a real ``posenc serve`` with a tiny
table config, locust headless for a few seconds on every user class, the open-loop probe at a low
rate, and the one-command report in miniature. Bounded: about 30 s in all.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.loadtest.loadtest_cases import require_installed

require_installed("locust", "hdrh", "uvicorn")

from posenc.loadtest.drivers import locustrun, probe
from posenc.loadtest.workloads import payloads
from tests.loadtest.loadtest_cases import PAYLOADS, TABLES
from tests.procs import PYTHON, Procs
from tests.shm import shm_files


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("loadtest")
    (d / "tables.json").write_text(json.dumps(TABLES))
    (d / "payloads.json").write_text(json.dumps(PAYLOADS))
    return d


@pytest.fixture(scope="module")
def posenc(files):
    reg = Procs(files / "procs")
    srv = reg.serve(str(files / "tables.json"), workers=2, grpc=True)
    try:
        yield srv, srv.namespace
    finally:
        rc = srv.stop()
        reg.cleanup()
        assert rc == 0, srv.output()
        assert shm_files(srv.namespace) == [], "/dev/shm leftovers after SIGTERM"


@pytest.mark.slow
def test_locust_mix_runs_without_failures(posenc, files):
    srv, _ = posenc
    prefix = str(files / "locust")
    stats = locustrun.run(
        srv.url,
        prefix,
        users=6,
        run_time=4,
        weights="decode=1,pipeline=1,json=1,newspec=1,v2rest=1,grpc=1",
        payloads=str(files / "payloads.json"),
        log_path=str(files / "locust.log"),
        extra=["--posenc-grpc", srv.grpc_url],
    )
    assert os.path.exists(prefix + "_stats.csv") and os.path.exists(prefix + ".html")
    agg = stats["Aggregated"]
    assert agg["requests"] > 0
    assert agg["failures"] == 0, (files / "locust.log").read_text()[-2000:]
    # Every user class got to send (NewSpecUser paces itself: one request on start).
    for kind in ("rope-row", "alibi-decode", "json-rope", "new-spec", "v2-rope-row", "grpc-rope-row"):
        assert stats.get(kind, {}).get("requests", 0) > 0, (kind, sorted(stats))
    assert any(stats.get(k, {}).get("requests", 0) for k in ("pipeline-rope", "pipeline-sinusoidal"))


def test_probe_low_rate_reports_percentiles(posenc, files):
    srv, _ = posenc
    cfg = payloads.load(str(files / "payloads.json"))
    [step] = probe.sweep(
        srv.url, [200], duration=1.5, kinds="rope-row:1,alibi-decode:1", connections=8, warmup=0.3, cfg=cfg
    )
    assert step.errors == 0 and step.timeouts == 0, step.status_counts
    # Open loop: every request scheduled in the window was sent and answered (how fast is a
    # benchmark's question, not this test's).
    assert step.sent == int(200 * 1.5) and step.completed == step.sent, (step.sent, step.completed)
    p = step.percentiles_us
    assert set(p) == {"p50", "p90", "p99", "p99.9"}
    assert 0 < p["p50"] <= p["p90"] <= p["p99"] <= p["p99.9"]
    assert set(step.by_kind) == {"rope-row", "alibi-decode"}


@pytest.mark.slow
def test_report_command_end_to_end(procs, files, tmp_path):
    """``python -m posenc.loadtest report`` in miniature, run from a scratch directory: its own server, floor, wrk,
    h2load, probe, locust, report. A missing wrk or h2load fails it: the report would silently leave their
    sections out."""
    for tool, package in (("wrk", "wrk"), ("h2load", "nghttp2-client")):
        assert shutil.which(tool), (
            f"{tool} is not installed: `apt-get install -y {package}` (.ci/run installs it)"
        )
    out = tmp_path / "report"
    cmd = [
        PYTHON,
        "-m",
        "posenc.loadtest",
        "report",
        "--tables",
        str(files / "tables.json"),
        "--payloads",
        str(files / "payloads.json"),
        "--out",
        str(out),
        "--server-cpus",
        "",
        "--client-cpus",
        "",
        "--saturation",
        "400",
        "--fractions",
        "0.5",
        "--probe-duration",
        "0.5",
        "--probe-warmup",
        "0.2",
        "--connections",
        "8",
        "--wrk-duration",
        "1",
        "--locust-time",
        "5",  # (its gRPC user's first call waited out 2 s on a loaded machine: no gRPC row)
        "--locust-users",
        "4",
        "--locust-weights",
        "decode=1,pipeline=1,json=1,newspec=0",
        "--idle-budget",
        "0",
    ]
    p = procs.run(cmd, timeout=180, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    for name in ("summary.md", "latency.png", "locust.html", "locust_stats.csv", "results.json"):
        assert (out / name).exists(), name
    res = json.loads((out / "results.json").read_text())
    assert res["shm_leftovers"] == []
    assert [s["rate"] for s in res["probe"]["posenc"]] == [200.0, 320.0]
    assert [s["rate"] for s in res["probe"]["bare"]] == [200.0, 320.0]  # the machine's tail, each rate
    for s in res["probe"]["posenc"] + res["probe"]["floor"] + res["probe"]["bare"]:
        assert s["percentiles_us"]["p99"] > 0 and s["errors"] == 0
    assert res["locust"]["Aggregated"]["failures"] == 0
    assert res["wrk"]["posenc_rtt"]["failures"] == 0 and res["wrk"]["floor_max"]["rps"] > 0
    md = (out / "summary.md").read_text()
    assert "at 50% of saturation" in md and "latency.png" in md
    assert "posenc ÷ bare p99 / p99.9" in md and "| bare |" in md
    assert res["locust"]["grpc-rope-row"]["requests"] > 0 and res["locust"]["v2-rope-row"]["requests"] > 0
    assert res["grpc"]["posenc_rtt"]["p50_us"] > 0 and res["grpc"]["floor_max"]["rps"] > 0
    assert res["grpc"]["sync_floor_rtt"]["p50_us"] > 0 and res["grpc"]["sync_floor_max"]["rps"] > 0
    assert "| grpcio sync floor | 4 x 16 |" in md
    assert "## gRPC (KServe v2 ModelInfer" in md
