"""The request metrics in Prometheus' text format, from every worker's counts (service/metrics/counters.py,
folded across worker restarts by service/metrics/fold.py); prometheus_client writes the text.

- ``posenc_request_duration_seconds`` (histogram by route and status): every request, whichever
  way it was answered (the shortcut's rows are added to their route);
- ``posenc_response_bytes_total`` (by route): response body bytes;
- ``posenc_errors_total`` (by route and status): responses with a status of 400 and up (and
  statuses outside the list, e.g. 401 or 499, as "other");
- ``posenc_hot_path_total`` (by route and path): family requests answered by the C shortcut
  (the hot lane below ASGI, or the raw front's shortcut) or by the full path;
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

from posenc.service.metrics.layout import NB, BUCKETS_S, ROUTE_INDEX, ROUTES, SHORTCUT_ROW, STATUSES
from posenc.service.metrics.fold import collect


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
    shortcut = {}
    for name, row in SHORTCUT_ROW.items():   # the shortcut's answers are their route's too
        route = f"/v1/{name}"
        shortcut[route] = total[row, :, :NB].sum()
        total[ROUTE_INDEX[route]] += total[row]
    dur = HistogramMetricFamily("posenc_request_duration_seconds",
                                "Time from request start to the last response byte (status: the HTTP "
                                "status; a gRPC call's code as its HTTP status, OK 200).",
                                labels=["route", "status"])
    nbytes = CounterMetricFamily("posenc_response_bytes", "Response body bytes.", labels=["route"])
    errors = CounterMetricFamily("posenc_errors", "Responses with an error status (400 and up; other: "
                                 "statuses not listed, e.g. 401, 499).", labels=["route", "status"])
    hot = CounterMetricFamily("posenc_hot_path", "Family requests by the way they were answered: the C "
                              "shortcut (hot lane or raw front) or the full path.", labels=["route", "path"])
    for ri, route in enumerate(ROUTES):
        rows = total[ri]
        n_route = rows[:, :NB].sum()
        if route in shortcut:
            hot.add_metric([route, "shortcut"], shortcut[route])
            hot.add_metric([route, "full"], n_route - shortcut[route])
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
    workers_g = GaugeMetricFamily("posenc_workers", "HTTP worker processes reporting metrics.", kinds.count("http"))
    grpc_g = GaugeMetricFamily("posenc_grpc_workers", "gRPC server processes reporting metrics.", kinds.count("grpc"))
    return [dur, nbytes, errors, hot, workers_g, grpc_g]


def render(metrics, extra: str = "") -> str:
    total, procs = collect(metrics.shm_dir, metrics.namespace, metrics.path)
    return to_text(request_families(total, procs)) + extra


assert all(f"/v1/{name}" in ROUTE_INDEX for name in FAMILIES)
