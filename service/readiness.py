"""What /readyz says (docs/deploy.md, "Readiness"):

- 503 ``{"status": "starting"}`` until this worker has mapped every table of the engine's
  manifest and verified its checksum, once;
- then 200 ``{"status": "ready", ...}`` for the worker's life: it can answer every request. A
  table it has mapped answers from shared memory, and one it has not (a new spec, or any table
  while the engine restarts or is down) is computed exactly in the worker, within the same size
  limits, so nothing waits on the engine. ``engine`` says whether the engine that wrote the
  manifest is alive ("up") or not ("down": restarting, or gone); ``generation`` is the manifest's.

Taking a worker out of rotation while the engine restarts would only move its load onto the
others, which are in the same state: they share the engine.
"""

from __future__ import annotations

import os


def engine_state(manifest: dict | None) -> str:
    pid = (manifest or {}).get("pid")
    if not pid:
        return "down"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "down"
    except PermissionError:   # another user's engine (a sidecar): it exists
        pass
    return "up"


def readiness(svc) -> tuple[int, dict]:
    if not svc.ready:
        return 503, {"status": "starting"}
    m = svc.client.manifest()
    return 200, {"status": "ready", "generation": (m or {}).get("generation"), "engine": engine_state(m)}
