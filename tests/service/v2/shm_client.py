"""A shared-memory client's side, for the tests of service/v2/shm.py (in process and on real
servers): objects of its own in /dev/shm, and the attack of shrinking one while a server uses it."""

from __future__ import annotations

import contextlib
import os
import threading
import uuid

SHM_DIR = "/dev/shm"

MAX_SHRINKS = 5_000_000  # a bound, whatever the block's own bound


def client_object(size: int, prefix: str = "posenc_test_") -> tuple[str, str]:
    """A new object of ``size`` bytes, made as shm_open(3) makes it: (key, path)."""
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    path = os.path.join(SHM_DIR, name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)
    return "/" + name, path


@contextlib.contextmanager
def shrinking(path: str, size: int):
    """While the block runs, a thread truncates the object at ``path`` to 0 bytes and back to
    ``size``, as fast as it can; after it, the object is ``size`` bytes again."""
    fd, stop = os.open(path, os.O_RDWR), threading.Event()

    def run():
        for _ in range(MAX_SHRINKS):
            if stop.is_set():
                return
            os.ftruncate(fd, 0)
            os.ftruncate(fd, size)

    t = threading.Thread(target=run, daemon=True, name="shrink")
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(10)
        os.ftruncate(fd, size)
        os.close(fd)
