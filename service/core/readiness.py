"""What /readyz says (docs/deploy.md, "Readiness"):

- 503 ``{"status": "starting"}`` until this worker has mapped every table of the engine's
  manifest and verified its checksum, once;
- then 200 ``{"status": "ready", ...}`` for the worker's life: it can answer every request. A
  table it has mapped answers from shared memory, and one it has not (a new spec, or any table
  while the engine restarts or is down) is computed exactly in the worker, within the same size
  limits, so nothing waits on the engine. ``engine`` says whether the engine answers a ping on
  its socket within 0.25 s ("up") or not ("down": restarting, or gone); ``generation`` is the
  manifest's. A ping, not the manifest's pid: a sidecar engine's pid means nothing in another
  container's pid namespace.

Taking a worker out of rotation while the engine restarts would only move its load onto the
others, which are in the same state: they share the engine.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio

from posenc.engine.core.errors import EngineUnavailable

log = logging.getLogger("posenc.service")


PING_TIMEOUT_S = 0.25


def engine_up(client, timeout: float = PING_TIMEOUT_S) -> bool:
    """The engine answers a ping on its socket within ``timeout``."""
    try:
        return bool(client.call({"op": "ping"}, timeout=timeout).get("ok"))
    except (EngineUnavailable, ValueError):
        return False


def readiness(svc) -> tuple[int, dict]:
    """(status, body) of /readyz; blocks up to PING_TIMEOUT_S (run it off the event loop)."""
    if not svc.ready:
        return 503, {"status": "starting"}
    m = svc.client.manifest() or {}
    return 200, {
        "status": "ready",
        "generation": m.get("generation"),
        "engine": "up" if engine_up(svc.client) else "down",
        # configured tables the engine could not store (no memory): answered by name, computed
        "computed": [e["name"] for e in m.get("named", ()) if not e.get("stored")],
    }


async def attach_when_up(attach: Callable[[], int]) -> int:
    """Run ``attach`` (map and verify every table: readiness) in a thread until it succeeds,
    retrying every 0.2 s while the engine starts or restarts; what it returns."""
    level = logging.INFO  # the first wait is news; its repeats (every 0.2 s) are debug
    while True:
        try:
            return await anyio.to_thread.run_sync(attach)
        except Exception as e:  # engine not up yet, or restarting (cancellation passes through)
            log.log(level, "waiting for the engine: %s", e)
            level = logging.DEBUG
            await anyio.sleep(0.2)
