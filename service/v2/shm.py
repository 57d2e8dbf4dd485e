"""The system shared-memory extension (Triton's, which ``tritonclient.utils.shared_memory``
speaks): a co-located client registers a POSIX shared-memory object of its own
(``/dev/shm/<key>``) under a name, and asks for outputs (or gives inputs) at an offset in it.

Registrations are shared by every process of the server, the HTTP workers and the gRPC
processes alike (a region registered over gRPC serves REST requests), in an append-only log in
the namespace (``{ns}.v2-regions.log``: one JSON record per registration or unregistration,
appended under ``flock`` of ``{ns}.v2-regions.lock``). Each process applies the records it has
not seen yet (a ``stat`` per use tells), so registering costs the same with 1 region or 1,000;
the log is rewritten with only the live regions when it holds more than twice as many records.

What a client can make a server process do (docs/kserve.md, "The system shared-memory extension"):
write an output (``os.pwrite``) or read an input (``os.pread``) within a region it registered, in
a regular file of /dev/shm with exactly one name. Nothing else:
- regions are never mapped: a client that shrinks its object while posenc writes gets a 400
  ("too small") or, at worst, its object grown back to the registered size, never a process
  killed by SIGBUS;
- keys are opened with O_NOFOLLOW (a symbolic link is refused), must be regular files (no FIFOs,
  devices or directories), must have one link (a hard link to a table segment, or to anything
  else, is refused: posenc cannot tell whose file it is) and must not be named like a posenc
  file of any namespace. Each check is made on the opened descriptor, at registration and again
  whenever a process opens the key to use it;
- resources are bounded: at most ``MAX_REGIONS`` registrations (refused past it:
  ``TooManyRegions``, 400 / RESOURCE_EXHAUSTED), and each process keeps at most
  ``OPEN_REGIONS`` region descriptors open (least recently used closed first).

Trust: as with Triton, any client that reaches the server may make it write into a shared-memory
object the server's user can open; serve on 127.0.0.1 (the default) unless every client is trusted.
"""

from __future__ import annotations

import collections
import errno
import fcntl
import os
import re
import stat
import threading
import uuid

import grpc
import numpy as np
import orjson

from posenc.service.core.settings import Settings
from posenc.service.v2.errors import BadRequest

REGION_DIR = "/dev/shm"  # where shm_open(3) objects live on Linux
MAX_REGIONS = Settings.max_shm_regions  # registrations per server, all processes together
OPEN_REGIONS = Settings.open_shm_regions  # region descriptors each server process keeps open (an LRU)
MAX_NAME = 256  # characters of a region's name
MAX_KEY = 255  # bytes of a key's file name (NAME_MAX)
# posenc's own files, in any namespace (engine/store/segments.py, service/metrics/, service/supervise/serve.py,
# this module): a namespace is not checked for dots, so the suffix is looked for anywhere
_POSENC_FILE = re.compile(r"\.(seg\.|manifest\.json|manifest\.log|lock$|sock$|metrics\.|v2-regions)")
_OPEN = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


class TooManyRegions(BadRequest):
    """A registration past ``MAX_REGIONS``: REST 400, gRPC RESOURCE_EXHAUSTED."""

    grpc_status = grpc.StatusCode.RESOURCE_EXHAUSTED


def registry_path(shm_dir: str, namespace: str) -> str:
    return os.path.join(shm_dir, f"{namespace}.v2-regions.log")


def _lock_path(shm_dir: str, namespace: str) -> str:
    return os.path.join(shm_dir, f"{namespace}.v2-regions.lock")


def remove_registry(shm_dir: str, namespace: str) -> None:
    """At server exit: forget every registration (the clients' regions are theirs to remove),
    and a rewrite of the log that a killed process left (``{log}.{pid}.tmp``)."""
    log = registry_path(shm_dir, namespace)
    tmp = os.path.basename(log) + "."
    try:
        left = [
            os.path.join(shm_dir, n) for n in os.listdir(shm_dir) if n.startswith(tmp) and n.endswith(".tmp")
        ]
    except FileNotFoundError:
        left = []
    for path in (log, _lock_path(shm_dir, namespace), *left):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


class _Region:
    """One registration: ``id`` tells two registrations of one name and key apart (the client
    may have made a new object under the key in between)."""

    __slots__ = ("key", "offset", "byte_size", "id")

    def __init__(self, key: str, offset: int, byte_size: int, id: str):
        self.key, self.offset, self.byte_size, self.id = key, offset, byte_size, id


class _Handle:
    """An open region: ``users`` requests are writing or reading through ``fd``; a handle dropped
    from the LRU meanwhile is closed by the last of them."""

    __slots__ = ("fd", "region", "users", "dropped")

    def __init__(self, fd: int, region: _Region):
        self.fd, self.region, self.users, self.dropped = fd, region, 0, False


class Regions:
    def __init__(
        self,
        shm_dir: str,
        namespace: str,
        region_dir: str = REGION_DIR,
        max_regions: int = MAX_REGIONS,
        open_regions: int = OPEN_REGIONS,
    ):
        self.path = registry_path(shm_dir, namespace)
        self.lock_path = _lock_path(shm_dir, namespace)
        self.region_dir = region_dir
        self.max_regions = max_regions
        self.open_regions = open_regions
        self._mutex = threading.Lock()  # requests run on the event loop and in worker threads
        self._regions: dict[str, _Region] = {}
        self._log: tuple[int, int] | None = None  # (fd, inode) of the log this process reads
        self._applied = 0  # bytes of it applied
        self._records = 0  # records in it
        self._open: collections.OrderedDict[str, _Handle] = collections.OrderedDict()

    # -- the shared registry ---------------------------------------------------------------------
    def _sync(self) -> None:
        """Apply the log's records this process has not seen (caller holds ``_mutex``)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None
        if self._log is not None and (st is None or st.st_ino != self._log[1] or st.st_size < self._applied):
            self._forget()
        if st is None:
            return
        if self._log is None:
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except FileNotFoundError:
                return
            self._log = (fd, os.fstat(fd).st_ino)
            st = os.fstat(fd)
        if st.st_size > self._applied:
            data = os.pread(self._log[0], st.st_size - self._applied, self._applied)
            end = data.rfind(b"\n") + 1  # a record being appended is applied next time
            for line in data[:end].splitlines():
                try:
                    self._apply(orjson.loads(line))
                except (ValueError, IndexError, TypeError):  # not a record of this module: skipped
                    pass
            self._applied += end

    def _forget(self) -> None:
        os.close(self._log[0])
        self._log, self._applied, self._records = None, 0, 0
        self._regions.clear()
        for name in list(self._open):
            self._drop(name)

    def _apply(self, rec: list) -> None:
        self._records += 1
        op = rec[0]
        if op == "+":
            self._regions[rec[1]] = _Region(*rec[2:6])
        elif op == "-":
            self._regions.pop(rec[1], None)
        else:  # "*": every region
            self._regions.clear()
            for name in list(self._open):
                self._drop(name)
            return
        if rec[1] in self._open:
            self._drop(rec[1])

    def _change(self, change) -> None:
        """``change(regions)`` -> the records to append (or None), under the registry's lock."""
        lock = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            with self._mutex:
                self._sync()
                records = change(self._regions)
                if not records:
                    return
                if self._records + len(records) > 2 * (len(self._regions) + len(records)) + 64:
                    self._compact(records)
                else:
                    fd = os.open(
                        self.path,
                        os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                        0o600,
                    )
                    try:
                        os.write(fd, b"".join(orjson.dumps(r) + b"\n" for r in records))
                    finally:
                        os.close(fd)
                self._sync()
        finally:
            os.close(lock)

    def _compact(self, records: list) -> None:
        """Replace the log by the live regions plus ``records`` (its readers see a new inode and
        read it whole)."""
        live = [["+", n, r.key, r.offset, r.byte_size, r.id] for n, r in self._regions.items()]
        tmp = f"{self.path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, b"".join(orjson.dumps(r) + b"\n" for r in live + records))
        finally:
            os.close(fd)
        os.replace(tmp, self.path)

    def register(self, name, key, offset, byte_size) -> None:
        if not isinstance(name, str) or not name or len(name) > MAX_NAME or not _utf8(name):
            raise BadRequest("name", f"must be a non-empty string of at most {MAX_NAME} characters")
        for field, v, lo in (("offset", offset, 0), ("byte_size", byte_size, 1)):
            if type(v) is not int or v < lo:
                raise BadRequest(field, f"must be an integer >= {lo}, got {v!r}")
        fd, size = self._open_key(key, "key")
        os.close(fd)
        if offset + byte_size > size:
            raise BadRequest(
                "byte_size",
                f"offset {offset} + byte_size {byte_size} is past the end of {key!r} ({size} bytes)",
            )

        def add(regions):
            if name in regions:
                raise BadRequest("name", f"shared memory region {name!r} is already registered")
            if len(regions) >= self.max_regions:
                raise TooManyRegions(
                    "name",
                    f"{len(regions)} regions are registered, the most this server "
                    f"holds ({self.max_regions} regions); unregister one first",
                )
            return [["+", name, key, offset, byte_size, uuid.uuid4().hex[:16]]]

        self._change(add)

    def unregister(self, name: str | None) -> None:
        """Forget ``name`` (an unknown name is no error, as in Triton), or every region."""

        def remove(regions):
            if name is None:
                return [["*"]] if regions else None
            return [["-", name]] if name in regions else None

        self._change(remove)

    def status(self, name: str | None = None) -> list[dict]:
        with self._mutex:
            self._sync()
            regions = dict(self._regions)
        if name is not None and name not in regions:
            raise BadRequest("name", f"unknown shared memory region {name!r}")
        return [
            {"name": n, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}
            for n, r in regions.items()
            if name is None or n == name
        ]

    def _open_key(self, key, field: str) -> tuple[int, int]:
        """(an open descriptor, the size) of a key's object, refused (400 naming ``field``) unless
        it is a regular file with one name, not posenc's and not reached through a link."""
        stem = key[1:] if isinstance(key, str) and key.startswith("/") else key
        if (
            not isinstance(stem, str)
            or not stem
            or "/" in stem
            or stem in (".", "..")
            or "\0" in stem
            or not _utf8(stem)
            or len(stem.encode()) > MAX_KEY
        ):
            raise BadRequest(
                field,
                f"must name a POSIX shared memory object (e.g. '/my_region', at most "
                f"{MAX_KEY} bytes), got {key!r}",
            )
        if _POSENC_FILE.search(stem):
            raise BadRequest(field, f"{key!r} is named like one of posenc's own files")
        try:
            fd = os.open(os.path.join(self.region_dir, stem), _OPEN)
        except OSError as e:
            why = (
                "it is a symbolic link (posenc opens only the object itself)"
                if e.errno == errno.ELOOP
                else e.strerror
            )
            raise BadRequest(field, f"unable to open shared memory object {key!r}: {why}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise BadRequest(field, f"shared memory object {key!r} is not a regular file")
            if st.st_nlink != 1:
                raise BadRequest(
                    field,
                    f"shared memory object {key!r} has {st.st_nlink} links; posenc writes only "
                    "into an object with one name (a hard link may be another's file)",
                )
        except BaseException:
            os.close(fd)
            raise
        return fd, st.st_size

    # -- using regions -----------------------------------------------------------------------------
    def _span(self, name, offset, byte_size, path: str) -> tuple[str, _Region, int, int]:
        with self._mutex:
            self._sync()
            r = self._regions.get(name) if isinstance(name, str) else None
            if r is None:
                names = ", ".join(list(self._regions)[:8]) + (", ..." if len(self._regions) > 8 else "")
                raise BadRequest(
                    f"{path}.shared_memory_region",
                    f"unknown shared memory region {name!r}; registered: {names or 'none'}",
                )
        offset = 0 if offset is None else offset
        for field, v in (("shared_memory_offset", offset), ("shared_memory_byte_size", byte_size)):
            if type(v) is not int or v < 0:
                raise BadRequest(f"{path}.{field}", f"must be an integer >= 0, got {v!r}")
        if offset + byte_size > r.byte_size:
            raise BadRequest(
                f"{path}.shared_memory_byte_size",
                f"offset {offset} + byte_size {byte_size} is past the end of region {name!r} "
                f"({r.byte_size} bytes)",
            )
        return name, r, r.offset + offset, byte_size

    def _acquire(self, name: str, r: _Region, path: str) -> _Handle:
        with self._mutex:
            h = self._open.get(name)
            if h is not None and h.region is r:
                self._open.move_to_end(name)
                h.users += 1
                return h
        fd, _ = self._open_key(r.key, f"{path}.shared_memory_region")
        with self._mutex:
            if self._regions.get(name) is not r:  # unregistered meanwhile: use it once, keep nothing
                h = _Handle(fd, r)
                h.dropped = True
            else:
                if name in self._open:
                    self._drop(name)
                h = self._open[name] = _Handle(fd, r)
                while len(self._open) > self.open_regions:
                    self._drop(next(iter(self._open)))
            h.users += 1
            return h

    def _release(self, h: _Handle) -> None:
        with self._mutex:
            h.users -= 1
            if h.dropped and h.users == 0:
                os.close(h.fd)

    def _drop(self, name: str) -> None:
        h = self._open.pop(name)
        h.dropped = True
        if h.users == 0:
            os.close(h.fd)

    def _too_small(self, name: str, r: _Region, size: int, end: int, path: str) -> BadRequest:
        return BadRequest(
            f"{path}.shared_memory_region",
            f"region {name!r} is too small: {r.key!r} holds {size} bytes now, the request needs {end}",
        )

    def read(self, name, offset, byte_size, path: str) -> bytes:
        """An input's bytes, copied out of the client's region (the client may change it while
        the request runs; posenc never reads a position twice)."""
        name, r, start, n = self._span(name, offset, byte_size, path)
        h = self._acquire(name, r, path)
        try:
            data = os.pread(h.fd, n, start)
            if len(data) < n:
                raise self._too_small(name, r, os.fstat(h.fd).st_size, start + n, path)
            return data
        finally:
            self._release(h)

    def write(self, name, offset, byte_size, data, path: str) -> None:
        """An output's bytes (an array, or any contiguous buffer) into the client's region,
        refused (400) when they do not fit in the span asked or the object is too small now."""
        mv = _bytes(data)
        name, r, start, n = self._span(name, offset, byte_size, path)
        if mv.nbytes > n:
            raise BadRequest(
                f"{path}.shared_memory_byte_size",
                f"the output is {mv.nbytes} bytes, more than the {n} bytes given in region {name!r}",
            )
        h = self._acquire(name, r, path)
        try:
            end = start + mv.nbytes
            size = os.fstat(h.fd).st_size
            if size < end:
                raise self._too_small(name, r, size, end, path)
            # A client may shrink its object at any time: a write past its end grows it again (to
            # at most the registered size) where a store through a mapping would be a SIGBUS.
            done = 0
            while done < mv.nbytes:
                k = os.pwrite(h.fd, mv[done:], start + done)
                if k <= 0:
                    raise OSError(errno.EIO, "short write")
                done += k
        except OSError as e:  # ENOSPC, EFBIG (the server's RLIMIT_FSIZE), EIO
            raise BadRequest(
                f"{path}.shared_memory_region", f"cannot write into region {name!r}: {e.strerror}"
            ) from None
        finally:
            self._release(h)


def _utf8(s: str) -> bool:
    try:
        s.encode()
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def _bytes(data) -> memoryview:
    """``data``'s bytes as a flat memoryview (a C-contiguous copy of a strided array)."""
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    mv = memoryview(data)
    return mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")
