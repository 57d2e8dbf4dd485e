"""The generation of the manifest an engine of ``posenc serve`` published last (its head file), for
the restart-to-ready line of serve's log (serve.py ``EngineChild``)."""

from __future__ import annotations

from posenc.engine.store import segments as store


def generation_of(shm_dir: str, namespace: str):
    """The head file's generation, or None (no file: not published yet, or no room for it)."""
    try:
        return (store.read_head(shm_dir, namespace) or {}).get("generation")  # (the head file: small)
    except (ValueError, OSError, RuntimeError):
        return None
