"""The restart-to-ready time of a restarted engine, in ``posenc serve``'s log: from the moment
its predecessor was seen to exit until the new engine's manifest (a new generation) is published.
Runs in a thread of ``posenc serve`` after each restart; gives up after ``timeout`` seconds, or
when ``stopping()`` says the server stops."""

from __future__ import annotations

import logging
import threading
import time

from posenc.engine.store import segments as store

log = logging.getLogger("posenc.serve")


def generation_of(shm_dir: str, namespace: str):
    try:
        return (store.read_head(shm_dir, namespace) or {}).get("generation")  # (the head file: small)
    except (ValueError, OSError, RuntimeError):
        return None


def report_ready(
    shm_dir: str, namespace: str, old_generation, exited_at: float, stopping, timeout: float = 600.0
) -> float | None:
    """Seconds from ``exited_at`` (time.monotonic()) to a manifest of another generation; logged."""
    while not stopping() and time.monotonic() - exited_at < timeout:
        gen = generation_of(shm_dir, namespace)
        if gen is not None and gen != old_generation:
            took = time.monotonic() - exited_at
            log.warning(
                "engine restarted: generation %s ready %.2f s after the previous engine exited", gen, took
            )
            return took
        time.sleep(0.02)
    return None


def watch_restart(shm_dir: str, namespace: str, old_generation, exited_at: float, stopping) -> None:
    threading.Thread(
        target=report_ready,
        args=(shm_dir, namespace, old_generation, exited_at, stopping),
        daemon=True,
        name="posenc-engine-ready",
    ).start()
