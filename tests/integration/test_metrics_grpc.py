"""/metrics of a real ``posenc serve`` with its gRPC server, scraped and parsed with
prometheus_client's text parser: the gRPC process is not an HTTP worker, gRPC answers count their
response bytes, and the status label is an HTTP status on every route (gRPC OK is 200)."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from posenc.service.metrics.counters import FLUSH_S
from tests.integration.kserve_cases import V2_CONFIG, serving_grpc
from tests.procs import wait_for


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with serving_grpc(tmp_path_factory, "metrics-grpc", V2_CONFIG, workers=2) as s:
        yield s


def scrape(srv) -> dict:
    """{(sample name, labels as a sorted tuple): value}."""
    text = httpx.get(srv.url + "/metrics", timeout=10).text
    return {
        (smp.name, tuple(sorted(smp.labels.items()))): smp.value
        for fam in text_string_to_metric_families(text)
        for smp in fam.samples
    }


def infer(c, head_dim: int, positions: list[int]):
    t = grpcclient.InferInput("positions", [len(positions)], "INT64")
    t.set_data_from_numpy(np.asarray(positions, dtype=np.int64))
    return c.infer("rope", [t], parameters={"spec": f'{{"head_dim": {head_dim}}}'})


def test_grpc_metrics_are_consistent_with_http(srv):
    c = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        answered = [
            infer(c, 64, list(range(n))) for n in (1, 100, 1000, 1000)
        ]  # full path, then the shortcut
        with pytest.raises(InferenceServerException):
            infer(c, 1, [1])  # head_dim below 2: INVALID_ARGUMENT
    finally:
        c.close()
    httpx.post(srv.url + "/v1/rope", json={"head_dim": 64, "positions": [1]}, timeout=10)
    route = "grpc ModelInfer rope"
    count = "posenc_request_duration_seconds_count"
    # both HTTP workers count themselves once each has started (readiness needs only one), and the
    # gRPC process's and the other HTTP worker's counts reach their files within FLUSH_S (later on
    # a loaded machine): wait for every answer given before comparing the rest
    got = wait_for(
        lambda: (
            (g := scrape(srv)).get(("posenc_workers", ())) == 2
            and g.get(("posenc_grpc_workers", ())) == 2
            and g.get((count, (("route", route), ("status", "400")))) == 1
            and g.get((count, (("route", route), ("status", "200")))) == 4
            and g.get((count, (("route", "/v1/rope"), ("status", "200"))), 0) >= 1
            and g
        ),
        30,
        2 * FLUSH_S,
        "both HTTP workers, the gRPC answers and the HTTP one counted",
    )

    assert got[("posenc_workers", ())] == 2  # the HTTP workers only
    assert got[("posenc_grpc_workers", ())] == 2  # --grpc-workers' default
    roles = {dict(k[1]).get("role") for k in got if k[0] == "process_resident_memory_bytes"}
    assert {"worker", "grpc"} <= roles, roles

    raw = sum(r.as_numpy("cos").nbytes + r.as_numpy("sin").nbytes for r in answered)
    sent = got[("posenc_response_bytes_total", (("route", route),))]
    assert raw <= sent < raw + 4096, (raw, sent)  # the messages: their arrays plus small headers

    statuses = {dict(k[1])["status"] for k in got if k[0] == "posenc_request_duration_seconds_count"}
    assert statuses <= {"200", "400", "404", "405", "406", "413", "422", "500", "503", "other"}, statuses
    assert got[(count, (("route", route), ("status", "200")))] == 4
    assert got[(count, (("route", route), ("status", "400")))] == 1
    assert got[("posenc_errors_total", (("route", route), ("status", "400")))] == 1
    assert got[(count, (("route", "/v1/rope"), ("status", "200")))] >= 1
