"""The engine's upkeep of its tables: room before a build, and integrity after it.

Room. Sealed segments (engine/store/segments.py) live in memory, not in ``shm_dir``'s file system: their
pages are reserved before they are written (store.reserve: no memory is ENOSPC/ENOMEM, a clean
refusal of that one build, never a SIGBUS). Before an on-demand build the engine refuses a table
larger than the memory available (``MemAvailable`` less ``SLACK``) before evicting anything, then
evicts least-recently-asked unpinned tables until the new one fits the memory budget. An evicted
table that a reader still maps frees its pages only when the reader lets go of it.

Integrity. Nobody can write, truncate or grow a sealed segment, and none is in ``shm_dir`` to be
unlinked or replaced; the sweep is a guard on that promise rather than a repair shop: every
``verify_interval_s`` it checks each table's descriptor (still sealed, its size) and checksum
(``verify`` on the socket runs one at once). It works from the engine's own state under the
engine's lock (a duplicate of each descriptor, taken with the entry it belongs to), so a table
evicted or grown meanwhile is never mistaken for a damaged one; a table found damaged is rebuilt
with everything its entry had (name, spec, pin) under a new segment name, and readers remap it.
"""

from __future__ import annotations

import errno
import os
import threading
import time

from ..core.errors import NotStored
from ..store import segments as store

SLACK = 1 << 20  # bytes of free space kept for the manifest and metrics files
STAT_S = 1.0  # seconds between two checks that every segment is still there
# Failures of a build that mean "no room" (or no descriptor, or no memory), not a bad table: the
# build is refused (NotStored) and the request computed.
RESOURCE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EFBIG}
)


def available_bytes() -> int:
    """Memory the kernel says is available for new pages (MemAvailable), or a very large number
    where it cannot say."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 1 << 62


def is_resource_error(exc: BaseException) -> bool:
    return isinstance(exc, (OSError, MemoryError)) and (
        isinstance(exc, MemoryError) or exc.errno in RESOURCE_ERRNOS
    )


def make_room(eng, nbytes: int) -> None:
    """Before an on-demand build: refuse (NotStored) a table larger than the memory available,
    before anything is evicted; else evict least-recently-asked unpinned tables until it fits
    the engine's budget."""
    room = available_bytes() - SLACK
    if nbytes > room:
        raise NotStored(f"table of {nbytes} bytes exceeds the memory available ({max(room, 0)} bytes)")
    with eng.lock:
        eng._evict_for(nbytes)


def damaged(fd: int, entry: dict, checksum: bool) -> str | None:
    """Why a held segment no longer holds its table (None: it does)."""
    why = store.check_sealed(fd, entry["nbytes"])
    if why is not None:
        return why
    if checksum and store.crc32(store.map_readonly(fd, entry["nbytes"])) != entry["crc32"]:
        return "changed"
    return None


class Sweep:
    """Periodic checks of an engine's segments (run from its main loop)."""

    def __init__(self, engine, verify_interval_s: float, log):
        self.engine, self.log = engine, log
        self.verify_interval_s = verify_interval_s
        self._crc_at = time.monotonic()
        self.last: dict = {}  # the last full check: {"tables", "bytes", "seconds", "repaired"}
        self.repairs = 0  # tables rebuilt by this engine's sweeps
        self._one = threading.Lock()  # the main loop's sweeps and asked-for ones never overlap

    def tick(self) -> None:
        now = time.monotonic()
        if self.verify_interval_s > 0 and now - self._crc_at >= self.verify_interval_s:
            self._crc_at = now
            self.run(checksum=True)

    def run(self, checksum: bool) -> dict:
        with self._one:
            return self._run(checksum)

    def _run(self, checksum: bool) -> dict:
        eng = self.engine
        t0 = time.perf_counter()
        with eng.lock:
            digests = list(eng.tables)
        repaired, n, nbytes = [], 0, 0
        for digest in digests:
            with eng.lock:  # the entry and a descriptor of the very segment it names, together
                entry = eng.tables.get(digest)
                if entry is None:
                    continue  # evicted meanwhile
                fd = os.dup(eng.fds[digest])
            try:
                why = damaged(fd, entry, checksum)
            finally:
                os.close(fd)
            n, nbytes = n + 1, nbytes + entry["nbytes"]
            if why is not None and self.repair(digest, entry, why):
                repaired.append(entry["name"])
        report = {
            "tables": n,
            "bytes": nbytes,
            "seconds": round(time.perf_counter() - t0, 4),
            "repaired": repaired,
            "checksum": checksum,
        }
        if checksum:
            self.last = report
        return report

    def repair(self, digest: str, entry: dict, why: str) -> bool:
        """Rebuild a damaged table under a new name, with its name, spec and pin; False if it could
        not (no room: dropped, and its requests are computed)."""
        eng = self.engine
        t = eng.defs.get(digest)
        if t is None:
            return False
        with eng.lock:
            if eng.tables.get(digest) is not entry:  # replaced meanwhile: that one is checked next time
                return False
        self.log(f"table {entry['name']} ({entry['file']}) is {why}; rebuilding it")
        self.repairs += 1
        try:
            eng._build(t, entry["pinned"], entry["name"], rev=entry.get("rev", 0) + 1, spec=entry.get("spec"))
        except Exception as e:
            if not is_resource_error(e):
                raise
            self.log(f"could not rebuild {entry['name']}: {e}; dropping it (its requests are computed)")
            with eng.lock:
                if eng.tables.get(digest) is entry:
                    eng._evict(digest, "(damaged, no room to rebuild it)")
            return False
        return True
