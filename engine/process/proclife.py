"""Process life shared by the engine and the HTTP workers: die with the parent; descriptors."""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def exit_with_parent(sig: int = signal.SIGTERM, parent: int | None = None) -> bool:
    """Linux: get ``sig`` when the parent (posenc serve) dies, even by kill -9. ``parent``: the
    pid the caller was started by; if it is already gone (it died before the call), ``sig`` is
    raised now. False where the kernel offers no such thing."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig)) != 0:
            return False
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return False
    if parent is not None and os.getppid() != parent:
        signal.raise_signal(sig)
    return True


def descriptors() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (the engine and the keeper hold
    one descriptor per table) and return it (a very large number when unlimited)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # pragma: no cover - a hard limit we may not reach
            pass
    return 1 << 30 if soft == resource.RLIM_INFINITY else soft
