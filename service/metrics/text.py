"""The request metrics in Prometheus' text format, from every worker's counts (service/metrics/counters.py,
folded across worker restarts by service/metrics/fold.py); prometheus_client writes the text.

- ``posenc_request_duration_seconds`` (histogram by route and status): every request, whichever
  way it was answered (the shortcut's rows are added to their route);
- ``posenc_response_bytes_total`` (by route): response body bytes;
- ``posenc_errors_total`` (by route and status): responses with a status of 400 and up (and
  statuses outside the list, e.g. 401 or 499, as "other");
- ``posenc_answer_path_total`` (by route and path): each answer of a route that may take a C path
  (/v1 families, v2 REST inference, gRPC ModelInfer and ModelStreamInfer), counted once, under the
  way it was made (layout.py ``PATHS``): ``c``, the hot lane's one C call from the request's bytes
  to the response's; ``shortcut``, the C template answering a request Python read (the lane after
  httptools and the raw ASGI front, through the front's one door; the gRPC server); ``python``, the
  full path and every refusal. Its three paths add up to the route's request count;
- ``posenc_hot_path_total`` (by /v1 route and path), kept from before the counter above:
  ``shortcut`` is its ``c`` + ``shortcut``, ``full`` its ``python``;
- ``posenc_workers``: HTTP worker processes counting now; ``posenc_grpc_workers``: gRPC server
  processes counting now.

The ``status`` label is an HTTP status on every route: a gRPC call counts under its code's
(layout.py: OK is 200, INVALID_ARGUMENT 400, RESOURCE_EXHAUSTED 413, ...), and its response bytes
are the serialized response message's.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from posenc.engine.tables import FAMILIES
from posenc.service.metrics.fold import collect
from posenc.service.metrics.layout import (
    ANSWER_ROUTES,
    BUCKETS_S,
    NB,
    PATH_ROW,
    PATHS,
    ROUTE_INDEX,
    ROUTES,
    STATUSES,
)


class _Families:
    def __init__(self, families):
        self.families = families

    def collect(self):
        return self.families


def to_text(families) -> str:
    registry = CollectorRegistry()
    registry.register(_Families(families))
    return generate_latest(registry).decode()


def _status_label(status: int) -> str:
    return str(status) if status else "other"


def request_families(total, procs: list[tuple[str, int]]) -> list:
    """The request families from the counts ``total``; ``procs``: (kind, pid) of the live counters."""
    total = total.copy()
    ways = {}  # route -> {path: answers}; the C paths' answers are their route's too
    for route in ANSWER_ROUTES:
        ri = ROUTE_INDEX[route]
        ways[route] = {"python": total[ri, :, :NB].sum()}
        for path in PATHS[:2]:
            row = PATH_ROW[route, path]
            ways[route][path] = total[row, :, :NB].sum()
            total[ri] += total[row]
    dur = HistogramMetricFamily(
        "posenc_request_duration_seconds",
        "Time from request start to the last response byte (status: the HTTP "
        "status; a gRPC call's code as its HTTP status, OK 200).",
        labels=["route", "status"],
    )
    nbytes = CounterMetricFamily("posenc_response_bytes", "Response body bytes.", labels=["route"])
    errors = CounterMetricFamily(
        "posenc_errors",
        "Responses with an error status (400 and up; other: statuses not listed, e.g. 401, 499).",
        labels=["route", "status"],
    )
    paths = CounterMetricFamily(
        "posenc_answer_path",
        "Answers by the way they were made: c (the hot lane's "
        "one C call from the request's bytes), shortcut (the C template, the request "
        "read by Python), python (the full path, refusals included).",
        labels=["route", "path"],
    )
    hot = CounterMetricFamily(
        "posenc_hot_path",
        "/v1 family requests answered by a C path (shortcut: "
        "posenc_answer_path's c + shortcut) or the full path (its python).",
        labels=["route", "path"],
    )
    for route, w in ways.items():
        for path in PATHS:
            paths.add_metric([route, path], w[path])
        if route.startswith("/v1/"):
            hot.add_metric([route, "shortcut"], w["c"] + w["shortcut"])
            hot.add_metric([route, "full"], w["python"])
    for ri, route in enumerate(ROUTES):
        rows = total[ri]
        n_route = rows[:, :NB].sum()
        if n_route == 0:
            continue
        nbytes.add_metric([route], rows[:, NB + 1].sum())
        for si, status in enumerate(STATUSES):
            row = rows[si]
            n = row[:NB].sum()
            if n == 0:
                continue
            label = _status_label(status)
            cum, buckets = 0.0, []
            for bi, le in enumerate(BUCKETS_S):
                cum += row[bi]
                buckets.append((f"{le:g}", cum))
            buckets.append(("+Inf", n))
            dur.add_metric([route, label], buckets, row[NB])
            if status == 0 or status >= 400:
                errors.add_metric([route, label], n)
    kinds = [k for k, _ in procs]
    workers_g = GaugeMetricFamily(
        "posenc_workers", "HTTP worker processes reporting metrics.", kinds.count("http")
    )
    grpc_g = GaugeMetricFamily(
        "posenc_grpc_workers", "gRPC server processes reporting metrics.", kinds.count("grpc")
    )
    return [dur, nbytes, errors, paths, hot, workers_g, grpc_g]


def render(metrics, extra: str = "") -> str:
    total, procs = collect(metrics.shm_dir, metrics.namespace, metrics.path)
    return to_text(request_families(total, procs)) + extra


assert all(f"/v1/{name}" in ROUTE_INDEX for name in FAMILIES)
