"""Which route a request the raw front hands on is counted under (service/front/front.py): every
path metrics/layout.py names by itself (PATH_ROUTES), /v1/models included, is its own route, and
any other path is "other". Counted in-process into a private directory, read back through the
Prometheus text parser."""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client.parser import text_string_to_metric_families

from posenc.service.core.settings import Settings
from posenc.service.front.app import create_app
from posenc.service.metrics.counters import Metrics


async def _get_all(app, paths) -> dict[str, int]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        return {p: (await c.get(p)).status_code for p in paths}


def _routes(text: str) -> dict[str, float]:
    """posenc_request_duration_seconds_count by route, every status together."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "posenc_request_duration_seconds_count" and s.value:
                out[s.labels["route"]] = out.get(s.labels["route"], 0) + s.value
    return out


def test_each_named_path_is_its_own_route_and_the_rest_are_other(tmp_path):
    front = create_app(Settings(shm_dir=str(tmp_path), namespace="routes", shortcut="off"))
    front.metrics = Metrics(str(tmp_path), "routes")
    try:
        paths = ("/v1/models", "/healthz", "/docs", "/nowhere", "/v1/nothing")
        statuses = asyncio.run(_get_all(front, paths))
        assert statuses["/v1/models"] == 200 and statuses["/healthz"] == 200, statuses
        assert statuses["/nowhere"] == 404 and statuses["/v1/nothing"] == 404, statuses
        assert _routes(front.metrics.render()) == {"/v1/models": 1, "/healthz": 1, "/docs": 1, "other": 2}
    finally:
        front.metrics.close()
