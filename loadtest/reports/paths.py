"""Which way posenc answered a measurement's requests: ``/metrics``
``posenc_answer_path_total{route, path}`` read before and after it, the differences. Each answer of
a family route (/v1/<family>, v2 REST infer, gRPC ModelInfer) is counted once under the way it was
made (service/metrics/layout.py ``PATHS``):

- ``c``: the hot lane's one C call from the request's bytes to the response's;
- ``shortcut``: the C template answering a request Python read (the lane after httptools, the raw
  ASGI front, the gRPC server);
- ``python``: the full path (refusals too).

Also ``/v1/tables`` ``lane_answers``: requests the lane answered below ASGI (``c``, and the
``shortcut`` answers the lane made after httptools read the head), for the share below ASGI; it is
the answering worker's count, so the report shows it only for a server of one worker (its default).

Workers write their counts every FLUSH_S (service/metrics/counters.py) and the worker answering a
scrape writes its own first: ``scrape`` reads until two reads FLUSH_S apart agree, so a read after
a measurement holds all of its answers.
"""

from __future__ import annotations

import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from posenc.service.metrics.counters import FLUSH_S
from posenc.service.metrics.layout import PATHS

from ..servers import http_json

ANSWER_PATH = "posenc_answer_path_total"
SETTLE_READS = 20  # at most this many reads, 2 x FLUSH_S apart, for the counts to settle


def _read(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            text = r.read().decode()
    except (OSError, ValueError):
        return None
    answers = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == ANSWER_PATH:
                answers[(s.labels["route"], s.labels["path"])] = s.value
    return answers


def scrape(url: str) -> dict | None:
    """The answers by (route, path) once they have settled, and ``lane_answers``; None where
    /metrics cannot be read or has no ``posenc_answer_path_total`` (a server elsewhere behind a
    token, an older posenc): the report then leaves the paths out."""
    answers = _read(url)
    for _ in range(SETTLE_READS):
        if not answers:
            return None
        time.sleep(2 * FLUSH_S)
        again = _read(url)
        if again == answers:
            break
        answers = again
    return {"answers": answers, "lane": http_json(url + "/v1/tables").get("lane_answers", 0)}


def shares(before: dict, after: dict) -> dict:
    """Answers between two scrapes: counts and shares by path (``counts``), by route and path
    (``by_route``, the routes that answered), and the share the lane answered below ASGI."""
    a, b = before["answers"], after["answers"]
    diff = {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b)}
    counts = dict.fromkeys(PATHS, 0)
    by_route: dict[str, dict] = {}
    for (route, path), n in diff.items():
        counts[path] = counts.get(path, 0) + int(n)
        if n:
            w = by_route.setdefault(route, dict.fromkeys(PATHS, 0))
            w[path] = w.get(path, 0) + int(n)
    total = sum(counts.values())
    lane = int(after["lane"] - before["lane"])
    return {
        "requests": total,
        "counts": counts,
        "by_route": by_route,
        "shares": {k: (v / total if total else 0.0) for k, v in counts.items()},
        "lane": lane,
        "lane_share": lane / total if total else 0.0,
    }


def record(into: dict, key: str, before: dict | None, after: dict | None) -> None:
    """``into[key]``: the shares between two scrapes, when both were read."""
    if before is not None and after is not None:
        into[key] = shares(before, after)
