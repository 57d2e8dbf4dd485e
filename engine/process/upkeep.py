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

The periodic sweep is off the request path. The workers read the tables without the engine, but
they share its cores, and a checksum of every table is CPU the whole time (the default tables,
215 MB: 0.14 s of a core): run on a worker's core at the engine's priority it took p99 at 15,000
requests/s from about 0.2 ms to 3.6 ms (tests/bench/bench_tail.py). So the sums are made by
the checksummer (checksummer.py), a child process at the scheduler's idle priority, which runs
only on cores nothing else wants; the sweep, in a thread of the engine's own, hands it one
segment at a time and compares. Where no checksummer runs (it could not start, or died), the
thread sums the segment itself, paced: slices of ``SLICE`` bytes (~60 µs of a core), each
followed by a pause of ``(1 - DUTY) / DUTY`` times its length. A sweep asked for on the socket
runs at once, in the asking thread, unpaced.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import threading
import time
import zlib

from ..core.errors import NotStored
from ..store import fdpass
from ..store import segments as store

SLACK = 1 << 20  # bytes of free space kept for the manifest and metrics files
STAT_S = 1.0  # seconds between two checks that every segment is still there
SLICE = 128 << 10  # bytes a paced checksum reads at once (about 60 µs of a core at 2 GB/s)
DUTY = 0.25  # the share of a core a paced sweep takes while it runs
# The checksummer's answer is awaited CRC_WAIT_S plus a second per CRC_MIN_RATE bytes (a slow
# idle-priority sum of a large table still counts); past that it is killed, as stuck (stopped),
# and the sweep sums the rest itself: a sweep, and a ``verify`` waiting behind it, never hang
CRC_WAIT_S = 2.0
CRC_MIN_RATE = 20 << 20
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


def paced_crc32(buf, stop: threading.Event | None = None) -> int | None:
    """The crc32 of ``buf`` (as store.crc32 computes it) SLICE bytes at a time, pausing after each
    slice so that the whole takes DUTY of a core; None when ``stop`` is set meanwhile."""
    mv, crc = memoryview(buf).cast("B"), 0
    rest = (1.0 - DUTY) / DUTY
    for at in range(0, len(mv), SLICE):
        t0 = time.perf_counter()
        crc = zlib.crc32(mv[at : at + SLICE], crc)  # releases the GIL over a slice this large
        if stop is not None and stop.wait(max(time.perf_counter() - t0, 1e-5) * rest):
            return None
    return crc & 0xFFFFFFFF


class Checksummer:
    """The engine's end of its checksummer process (checksummer.py), over a SOCK_SEQPACKET pair.
    ``start`` from the engine's main thread (the child dies with the thread that started it);
    ``crc32`` from one thread at a time; ``close`` from any."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.sock is not None

    def start(self) -> bool:
        """A running checksummer (started now if none is): False when it cannot start."""
        if self.alive():
            return True
        self.close()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "posenc.engine.process.checksummer",
                    str(theirs.fileno()),
                    str(os.getpid()),
                ],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
            )
        except OSError:
            ours.close()
            return False
        finally:
            theirs.close()
        self.sock = ours
        return True

    def crc32(self, fd: int, nbytes: int) -> int | None:
        """The checksum of segment ``fd``, or None: no checksummer, or it failed or was closed, or
        gave no answer within its deadline (then it is killed: the next sweep starts another)."""
        sock = self.sock
        if sock is None:
            return None
        try:
            sock.settimeout(CRC_WAIT_S + nbytes / CRC_MIN_RATE)
            fdpass.send_packet(sock, {"nbytes": nbytes}, fd)
            msg, _ = fdpass.recv_packet(sock)
        except TimeoutError:
            self.close(kill=True)
            return None
        except (OSError, ValueError):
            return None
        crc = msg.get("crc32") if msg else None
        return crc if isinstance(crc, int) else None

    def close(self, kill: bool = False) -> None:
        """End the checksummer: at the end of its stream, or (``kill``, or not within 2 s) killed."""
        sock, self.sock = self.sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a sweep waiting for its answer
            except OSError:
                pass
            sock.close()
        proc, self.proc = self.proc, None
        if proc is not None:
            try:
                if kill:
                    proc.kill()
                proc.wait(timeout=2.0)  # it exits at the end of its stream
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def whole_crc32(fd: int, nbytes: int) -> int:
    """The segment's checksum in one call, here (an asked-for sweep)."""
    return store.crc32(store.map_readonly(fd, nbytes))


def damaged(fd: int, entry: dict, checksum: bool, crc32=whole_crc32) -> str | None:
    """Why a held segment no longer holds its table (None: it does, or its sum was stopped).
    ``crc32(fd, nbytes)`` makes the sum (None: stopped before the end)."""
    why = store.check_sealed(fd, entry["nbytes"])
    if why is not None or not checksum:
        return why
    crc = crc32(fd, entry["nbytes"])
    return "changed" if crc is not None and crc != entry["crc32"] else None


class Sweep:
    """Checks of an engine's segments: periodic ones every ``verify_interval_s`` in a thread of
    their own, summed by the checksummer (both started by ``tick`` from the engine's main loop),
    and asked-for ones (``run``) at once."""

    def __init__(self, engine, verify_interval_s: float, log):
        self.engine, self.log = engine, log
        self.verify_interval_s = verify_interval_s
        self._crc_at = time.monotonic()
        self.last: dict = {}  # the last full check: {"tables", "bytes", "seconds", "repaired"}
        self.repairs = 0  # tables rebuilt by this engine's sweeps
        self._one = threading.Lock()  # the periodic sweeps and asked-for ones never overlap
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()  # set by stop(): a periodic sweep ends at its next step
        self.summer = Checksummer()

    def tick(self) -> None:
        now = time.monotonic()
        if self.verify_interval_s <= 0 or now - self._crc_at < self.verify_interval_s or self._stop.is_set():
            return
        if self._thread is not None and self._thread.is_alive():
            return  # the last one still runs (a sweep longer than the interval): counted from its end
        self._crc_at = now
        if not self.summer.start():
            self.log("no checksummer process: the sweep sums the tables itself, paced")
        self._thread = threading.Thread(target=self._paced, name="posenc-sweep", daemon=True)
        self._thread.start()

    def _paced(self) -> None:
        try:
            with self._one:
                self._run(checksum=True, stop=self._stop)
        except Exception as e:  # upkeep must never stop an engine that serves
            self.log(f"sweep failed, run again at the next interval: {type(e).__name__}: {e}")
        self._crc_at = time.monotonic()

    def stop(self) -> None:
        """End a periodic sweep in progress and the checksummer (at shutdown); start no more."""
        self._stop.set()
        self.summer.close()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _periodic_crc32(self, fd: int, nbytes: int) -> int | None:
        """A periodic sweep's sum: the checksummer's, or paced here (paced_crc32) where it gives
        none; None once stop() is called."""
        crc = self.summer.crc32(fd, nbytes)
        if crc is None and not self._stop.is_set():
            crc = paced_crc32(store.map_readonly(fd, nbytes), self._stop)
        return crc

    def run(self, checksum: bool) -> dict:
        """A sweep at once, unpaced (the socket's ``verify``): its report."""
        with self._one:
            return self._run(checksum)

    def _run(self, checksum: bool, stop: threading.Event | None = None) -> dict:
        eng = self.engine
        t0 = time.perf_counter()
        with eng.lock:
            digests = list(eng.tables)
        repaired, n, nbytes = [], 0, 0
        for digest in digests:
            if stop is not None and stop.is_set():
                break
            with eng.lock:  # the entry and a descriptor of the very segment it names, together
                entry = eng.tables.get(digest)
                if entry is None:
                    continue  # evicted meanwhile
                fd = os.dup(eng.fds[digest])
            try:
                why = damaged(fd, entry, checksum, whole_crc32 if stop is None else self._periodic_crc32)
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
            "periodic": stop is not None,
        }
        if checksum and not (stop is not None and stop.is_set()):  # (a stopped sweep checked only some)
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
