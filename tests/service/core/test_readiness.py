"""/readyz's meaning (service/core/readiness.py, docs/deploy.md): 503 while starting, then 200 for
the worker's life, with the engine's state from a ping on its socket."""

from __future__ import annotations

from types import SimpleNamespace

from posenc.engine.core.errors import EngineUnavailable
from posenc.service.core.readiness import readiness


class FakeClient:
    def __init__(self, up: bool):
        self.up = up

    def manifest(self):
        return {
            "pid": 1,
            "generation": 7,
            "named": [{"name": "a", "stored": True}, {"name": "b", "stored": False}],
        }

    def call(self, msg, timeout=None):
        assert msg == {"op": "ping"} and timeout is not None and timeout <= 0.5
        if not self.up:
            raise EngineUnavailable("no engine")
        return {"ok": True}


def test_starting_then_ready_whatever_the_engine_state():
    assert readiness(SimpleNamespace(ready=False, client=FakeClient(True))) == (503, {"status": "starting"})
    assert readiness(SimpleNamespace(ready=True, client=FakeClient(True))) == (
        200,
        {"status": "ready", "generation": 7, "engine": "up", "computed": ["b"]},
    )
    assert readiness(SimpleNamespace(ready=True, client=FakeClient(False))) == (
        200,
        {"status": "ready", "generation": 7, "engine": "down", "computed": ["b"]},
    )
