"""Which way posenc answered a measurement's requests, from what the server exposes, read before and
after it (one worker, so its counts are the whole server's):

- ``/v1/tables`` ``lane_answers``: requests the hot lane answered below ASGI (C from the socket's
  bytes, or C after httptools parsed the head), /v1 and v2 REST alike;
- ``/metrics`` ``posenc_hot_path_total{route="/v1/...", path="shortcut"|"full"}``: /v1 family
  requests answered by the C shortcut (in the lane or the raw ASGI front) or the Python pipeline;
- ``/metrics`` ``posenc_request_duration_seconds_count``: every request by route, v2 included.

/v1 splits exactly into C and Python. A v2 REST request is counted by its route only; how many of
them C answered is not exposed, so the report gives it as an estimate: the lane's answers less the
/v1 C answers (exact when the raw front's shortcut answered no /v1 request, as with the lane on and
no pipelining). When the server exposes ``posenc_answer_path_total{route, path}`` (path: "whole"
for C from the socket's bytes, "lane" for C after httptools, "front" for C under ASGI, "python"),
that counter is used as it is and nothing is estimated.
"""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from .servers import http_json

ANSWER_PATH = "posenc_answer_path"


def _family_route(route: str) -> bool:
    return route.startswith("/v1/") and route != "/v1/tables" or (route.startswith("/v2/models/") and route.endswith("/infer"))


def scrape(url: str) -> dict | None:
    """The counters this module reads, now; None where /metrics cannot be read (a server elsewhere
    behind a token, say): the report then leaves the paths out."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            text = r.read().decode()
    except (OSError, ValueError):
        return None
    out = {"lane": http_json(url + "/v1/tables").get("lane_answers", 0), "routes": {}, "hot": {}, "answer": {}}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            route = s.labels.get("route", "")
            if s.name == "posenc_request_duration_seconds_count" and _family_route(route):
                out["routes"][route] = out["routes"].get(route, 0) + s.value
            elif s.name == "posenc_hot_path_total":
                out["hot"][(route, s.labels["path"])] = s.value
            elif s.name == ANSWER_PATH + "_total":
                out["answer"][(route, s.labels["path"])] = s.value
    return out


def _diff(a: dict, b: dict) -> dict:
    return {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b)}


def shares(before: dict, after: dict) -> dict:
    """Counts and shares of every family request between two scrapes."""
    routes = _diff(before["routes"], after["routes"])
    total = sum(routes.values())
    v1 = sum(n for r, n in routes.items() if r.startswith("/v1/"))
    res = {"requests": int(total), "v1": int(v1), "v2": int(total - v1), "lane": int(after["lane"] - before["lane"])}
    answer = _diff(before["answer"], after["answer"])
    if any(answer.values()):
        ways = {}
        for (_route, path), n in answer.items():
            ways[path] = ways.get(path, 0) + n
        res["exact"] = True
        res["counts"] = {k: int(v) for k, v in ways.items()}
    else:
        hot = _diff(before["hot"], after["hot"])
        c_v1 = sum(n for (_r, p), n in hot.items() if p == "shortcut")
        py_v1 = sum(n for (_r, p), n in hot.items() if p == "full")
        c_v2 = min(max(0, res["lane"] - c_v1), res["v2"])
        res["exact"] = False
        res["counts"] = {"c /v1": int(c_v1), "python /v1": int(py_v1), "c v2 (estimate)": int(c_v2),
                         "python v2 (estimate)": int(res["v2"] - c_v2)}
    res["shares"] = {k: (v / total if total else 0.0) for k, v in res["counts"].items()}
    res["lane_share"] = res["lane"] / total if total else 0.0
    return res


def record(into: dict, key: str, before: dict | None, after: dict | None) -> None:
    """``into[key]``: the shares between two scrapes, when both were read."""
    if before is not None and after is not None:
        into[key] = shares(before, after)
