"""A uvicorn that lacks what the protocol (service/protocol/uvicorn_api.py) relies on: a real
``posenc serve`` whose every process imports a uvicorn whose ``HttpToolsProtocol._start_asgi_task``
takes another parameter (a release that changed it; releases before 0.45 lack it, and before 0.53 the head
differs), through a ``sitecustomize`` on PYTHONPATH. The server
runs uvicorn's own protocol, says why in its log and in /v1/tables, and answers every request
with the same bytes as a server on the full uvicorn."""

from __future__ import annotations

import httpx
import orjson
import pytest

from posenc.service.shortcut import templates
from tests.procs import Procs, child_env
from tests.service_cases import CONFIG

# the lane answers what the C shortcut answers: both servers run it, under the numpy backend too
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not templates.NATIVE, reason="the lane needs service._hot"),
]

PATCH = """
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
_start = HttpToolsProtocol._start_asgi_task
def _start_asgi_task(self, cycle, asgi_app):   # uvicorn itself still runs: it passes both by position
    return _start(self, cycle, asgi_app)
HttpToolsProtocol._start_asgi_task = _start_asgi_task
"""
BIN = {"accept": "application/x-safetensors"}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fallback")
    (tmp / "sitecustomize.py").write_text(PATCH)
    reg = Procs(tmp)
    try:
        old = reg.serve(
            CONFIG,
            workers=1,
            args=["--lane", "on"],
            env=child_env({"PYTHONPATH": str(tmp), "POSENC_SHORTCUT": "c"}),
        )
        new = reg.serve(CONFIG, workers=1, args=["--lane", "on"], env=child_env({"POSENC_SHORTCUT": "c"}))
        yield old, new
    finally:
        reg.cleanup()


def test_the_protocol_checks_fail_and_the_server_says_so(servers):
    old, new = servers
    with httpx.Client(base_url=f"http://127.0.0.1:{old.port}") as c:
        lane = c.get("/v1/tables").json()["lane"]
    assert lane.startswith("off: uvicorn ") and "_start_asgi_task" in lane, lane
    assert "running uvicorn's own protocol" in old.output() and "_start_asgi_task" in old.output()
    with httpx.Client(base_url=f"http://127.0.0.1:{new.port}") as c:
        c.post("/v1/rope", content=orjson.dumps({"head_dim": 64, "positions": [1]}), headers=BIN)
        assert c.get("/v1/tables").json()["lane"] == "on"


@pytest.mark.parametrize(
    "path,body,headers",
    [
        ("/v1/rope", {"head_dim": 64, "positions": [3, 1]}, BIN),
        ("/v1/rope", {"head_dim": 64, "positions": [5]}, {}),
        ("/v1/sinusoidal", {"d_model": 32, "positions": [0, 9]}, BIN),
        ("/v1/alibi", {"num_heads": 8, "query": [3], "key": {"start": 0, "stop": 4}}, BIN),
        ("/v1/rope", {"head_dim": -1, "positions": [1]}, BIN),
    ],
)
def test_every_answer_is_the_full_uvicorns(servers, path, body, headers):
    old, new = servers
    raw = orjson.dumps(body)
    got = []
    for s in servers:
        with httpx.Client(base_url=f"http://127.0.0.1:{s.port}") as c:
            rs = [c.post(path, content=raw, headers=headers) for _ in range(3)]  # learnt, then shortcut
        got.append([(r.status_code, r.headers.get("content-type"), r.content) for r in rs])
    assert got[0] == got[1]
