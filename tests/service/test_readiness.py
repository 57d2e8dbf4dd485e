"""/readyz's meaning (service/readiness.py, docs/deploy.md): 503 while starting, then 200 with
the engine's state, which follows whether the manifest's engine process is alive."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

from posenc.service.readiness import engine_state, readiness


def svc(ready: bool, manifest):
    return SimpleNamespace(ready=ready, client=SimpleNamespace(manifest=lambda: manifest))


def test_starting_then_ready_with_the_engine_state():
    assert readiness(svc(False, None)) == (503, {"status": "starting"})
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        status, body = readiness(svc(True, {"pid": p.pid, "generation": 7}))
        assert (status, body) == (200, {"status": "ready", "generation": 7, "engine": "up"})
    finally:
        p.kill()
        p.wait()
    assert readiness(svc(True, {"pid": p.pid, "generation": 7}))[1]["engine"] == "down"   # still 200
    assert readiness(svc(True, {"pid": p.pid, "generation": 7}))[0] == 200
    assert engine_state(None) == "down"
