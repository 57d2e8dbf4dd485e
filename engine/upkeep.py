"""The engine's upkeep of its shared memory: room before a build, and integrity after it.

Room. tmpfs fails a write that it cannot back with SIGBUS, not an error; every segment's pages
are therefore reserved before they are written (store.reserve: ENOSPC becomes a clean refusal of
that one build), and before an on-demand build the engine evicts least-recently-asked unpinned
tables until the new one fits both the memory budget and the free space of the file system (less
``SLACK`` kept for the manifest and the workers' metrics files). An evicted table that a reader
still maps frees its pages only when the reader lets go of it, so the build may still find no
room: it is refused (``NotStored``) and the request is computed exactly.

Integrity. The engine owns its segments and their directory entries. Another process of the same
user can still unlink a segment, or chmod and write into one; ``Sweep`` notices and repairs it:
every ``STAT_S`` seconds it stats each segment (gone, or another file under its name: rebuilt),
and every ``verify_interval_s`` it checksums them all (changed bytes: rebuilt). A rebuilt table
gets a new file name and the manifest is rewritten, so readers drop their mapping of the damaged
file and map the new one. ``verify`` on the engine's socket runs a full check at once (workers ask
for one when a checksum they verify at start does not match).
"""

from __future__ import annotations

import errno
import os
import threading
import time

from . import store

SLACK = 1 << 20          # bytes of free space kept for the manifest and metrics files
STAT_S = 1.0             # seconds between two checks that every segment is still there
# Failures of a build that mean "no room" (or no descriptor, or no memory), not a bad table: the
# build is refused (NotStored) and the request computed.
RESOURCE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE, errno.ENOMEM,
                             errno.EFBIG})


def free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def is_resource_error(exc: BaseException) -> bool:
    return isinstance(exc, (OSError, MemoryError)) and (
        isinstance(exc, MemoryError) or exc.errno in RESOURCE_ERRNOS)


def make_room(eng, nbytes: int) -> None:
    """Before an on-demand build: evict least-recently-asked unpinned tables until ``nbytes``
    fits the engine's budget and the free space (less SLACK)."""
    with eng.lock:
        eng._evict_for(nbytes)
        free = free_bytes(eng.opts.shm_dir)
        if free >= nbytes + SLACK:
            return
        victims = sorted((e["last_used"], d) for d, e in eng.tables.items() if not e["pinned"])
        while victims and free < nbytes + SLACK:
            eng._evict(victims.pop(0)[1], "to make room in shared memory")
            before, free = free, free_bytes(eng.opts.shm_dir)
            if free <= before:   # still mapped by readers: its pages return when they let go,
                break            # so evicting more now would only cost rebuilds


def damaged(shm_dir: str, entry: dict, checksum: bool) -> str | None:
    """Why a published segment no longer holds its table (None: it does)."""
    path = os.path.join(shm_dir, entry["file"])
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return "unlinked"
    try:
        st = os.fstat(fd)
        if st.st_ino != entry.get("inode", st.st_ino) or st.st_size != entry["nbytes"]:
            return "replaced"
        if checksum and store.crc32(store.map_readonly(fd, st.st_size)) != entry["crc32"]:
            return "overwritten"
    finally:
        os.close(fd)
    return None


class Sweep:
    """Periodic checks of an engine's segments (run from its main loop)."""

    def __init__(self, engine, verify_interval_s: float, log):
        self.engine, self.log = engine, log
        self.verify_interval_s = verify_interval_s
        self._stat_at = self._crc_at = time.monotonic()
        self.last: dict = {}     # the last full check: {"tables", "bytes", "seconds", "repaired"}
        self._one = threading.Lock()   # the main loop's sweeps and asked-for ones never overlap

    def tick(self) -> None:
        now = time.monotonic()
        if self.verify_interval_s > 0 and now - self._crc_at >= self.verify_interval_s:
            self._crc_at = self._stat_at = now
            self.run(checksum=True)
        elif now - self._stat_at >= STAT_S:
            self._stat_at = now
            self.run(checksum=False)

    def run(self, checksum: bool) -> dict:
        with self._one:
            return self._run(checksum)

    def _run(self, checksum: bool) -> dict:
        eng = self.engine
        t0 = time.perf_counter()
        with eng.lock:
            entries = list(eng.tables.items())
        repaired = []
        for digest, entry in entries:
            why = damaged(eng.opts.shm_dir, entry, checksum)
            if why is not None and self.repair(digest, entry, why):
                repaired.append(entry["name"])
        report = {"tables": len(entries), "bytes": sum(e["nbytes"] for _, e in entries),
                  "seconds": round(time.perf_counter() - t0, 4), "repaired": repaired, "checksum": checksum}
        if checksum:
            self.last = report
        return report

    def repair(self, digest: str, entry: dict, why: str) -> bool:
        """Rebuild a damaged table under a new name; False if it could not (no room: dropped,
        and its requests are computed)."""
        eng = self.engine
        t = eng.defs.get(digest)
        if t is None:
            return False
        self.log(f"table {entry['name']} ({entry['file']}) was {why}; rebuilding it")
        try:
            new = eng._build(t, entry["pinned"], entry["name"], rev=entry.get("rev", 0) + 1)
        except Exception as e:
            if not is_resource_error(e):
                raise
            self.log(f"could not rebuild {entry['name']}: {e}; dropping it (its requests are computed)")
            with eng.lock:
                if eng.tables.get(digest) is entry:
                    eng.tables.pop(digest)
                    eng._write_manifest()
            store.unlink(os.path.join(eng.opts.shm_dir, entry["file"]))
            return False
        if new["file"] != entry["file"]:
            store.unlink(os.path.join(eng.opts.shm_dir, entry["file"]))
        return True
