"""The system shared-memory extension (Triton's, which ``tritonclient.utils.shared_memory``
speaks): a co-located client registers a POSIX shared-memory object of its own
(``/dev/shm/<key>``) under a name, and asks for outputs (or gives inputs) at an offset in it.

Registrations are shared by every process of the server, the HTTP workers and the gRPC
processes alike (a region registered over gRPC serves REST requests), in one small JSON file in
the namespace (``{ns}.v2-regions.json``, replaced atomically; changes under ``flock`` of
``{ns}.v2-regions.lock``). Each process opens a region when a request first uses it.

Regions are never mapped: outputs are written with ``os.pwrite`` and inputs read with
``os.pread``. A client may shrink its object at any moment; a store through a mapping past its
new end would kill the server process (SIGBUS), where a write is refused as "too small" or, in
the instant between that check and the write, grows the object back.

A key is opened with O_NOFOLLOW (a symbolic link is refused) and must be a regular file (no
FIFO, device or directory) with one link (a hard link to a table segment, or to anything else, is
refused: posenc cannot tell whose file it is), not named like a posenc file of any namespace.
The checks are made on the opened descriptor, at registration and whenever a process opens the
key to use it, so a key swapped for a link after registration is refused at use.

Trust: as with Triton, any client that reaches the server may make it write into a shared-memory
object its user can open and that passes those checks; serve on 127.0.0.1 (the default) unless
every client is trusted.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat

import numpy as np
import orjson

from posenc.service.v2.errors import BadRequest

REGION_DIR = "/dev/shm"          # where shm_open(3) objects live on Linux
MAX_KEY = 255                    # bytes of a key's file name (NAME_MAX)
# posenc's own files, in any namespace (engine/store.py, service/metrics/, service/supervise/serve.py,
# this module): a namespace is not checked for dots, so the suffix is looked for anywhere
_POSENC_FILE = re.compile(r"\.(seg\.|manifest\.json|lock$|sock$|metrics\.|v2-regions)")
_OPEN = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


def registry_path(shm_dir: str, namespace: str) -> str:
    return os.path.join(shm_dir, f"{namespace}.v2-regions.json")


def remove_registry(shm_dir: str, namespace: str) -> None:
    """At server exit: forget every registration (the clients' regions are theirs to remove)."""
    for path in (registry_path(shm_dir, namespace), registry_path(shm_dir, namespace)[:-5] + ".lock"):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


class _Open:
    __slots__ = ("entry", "fd")

    def __init__(self, entry: tuple, fd: int):
        self.entry, self.fd = entry, fd


class Regions:
    def __init__(self, shm_dir: str, namespace: str, region_dir: str = REGION_DIR):
        self.path = registry_path(shm_dir, namespace)
        self.lock_path = self.path[:-5] + ".lock"
        self.region_dir = region_dir
        self._stamp = None
        self._entries: dict[str, dict] = {}
        self._mapped: dict[str, _Open] = {}

    # -- the shared registry ---------------------------------------------------------------------
    def entries(self) -> dict[str, dict]:
        try:
            st = os.stat(self.path)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp:
            try:
                with open(self.path, "rb") as f:
                    self._entries = orjson.loads(f.read())
            except (FileNotFoundError, orjson.JSONDecodeError):
                self._entries = {}
            self._stamp = stamp
            for name in [n for n, m in self._mapped.items() if _entry(self._entries.get(n)) != m.entry]:
                self._unmap(name)
        return self._entries

    def _change(self, change) -> None:
        with open(self.lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._stamp = None
            entries = dict(self.entries())
            change(entries)
            tmp = f"{self.path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(orjson.dumps(entries))
            os.replace(tmp, self.path)
            self._stamp = None

    def register(self, name, key, offset, byte_size) -> None:
        if not isinstance(name, str) or not name:
            raise BadRequest("name", "must be a non-empty string")
        for field, v, lo in (("offset", offset, 0), ("byte_size", byte_size, 1)):
            if type(v) is not int or v < lo:
                raise BadRequest(field, f"must be an integer >= {lo}, got {v!r}")
        fd, size = self._open_key(key, "key")
        os.close(fd)
        if offset + byte_size > size:
            raise BadRequest("byte_size", f"offset {offset} + byte_size {byte_size} is past the end of "
                                          f"{key!r} ({size} bytes)")

        def add(entries):
            if name in entries:
                raise BadRequest("name", f"shared memory region {name!r} is already registered")
            entries[name] = {"key": key, "offset": offset, "byte_size": byte_size}
        self._change(add)

    def unregister(self, name: str | None) -> None:
        """Forget ``name`` (an unknown name is no error, as in Triton), or every region."""
        self._change(lambda entries: entries.clear() if name is None else entries.pop(name, None))
        self.entries()

    def status(self, name: str | None = None) -> list[dict]:
        entries = self.entries()
        if name is not None and name not in entries:
            raise BadRequest("name", f"unknown shared memory region {name!r}")
        return [{"name": n, **e} for n, e in entries.items() if name is None or n == name]

    def _open_key(self, key, field: str) -> tuple[int, int]:
        """(an open descriptor, the size) of a key's object, refused (400 naming ``field``) unless
        it is a regular file with one name, not posenc's and not reached through a link."""
        stem = key[1:] if isinstance(key, str) and key.startswith("/") else key
        if (not isinstance(stem, str) or not stem or "/" in stem or stem in (".", "..") or "\0" in stem
                or not _utf8(stem) or len(stem.encode()) > MAX_KEY):
            raise BadRequest(field, f"must name a POSIX shared memory object (e.g. '/my_region', at most "
                                    f"{MAX_KEY} bytes), got {key!r}")
        if _POSENC_FILE.search(stem):
            raise BadRequest(field, f"{key!r} is named like one of posenc's own files")
        try:
            fd = os.open(os.path.join(self.region_dir, stem), _OPEN)
        except OSError as e:
            why = "it is a symbolic link (posenc opens only the object itself)" if e.errno == errno.ELOOP else e.strerror
            raise BadRequest(field, f"unable to open shared memory object {key!r}: {why}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise BadRequest(field, f"shared memory object {key!r} is not a regular file")
            if st.st_nlink != 1:
                raise BadRequest(field, f"shared memory object {key!r} has {st.st_nlink} links; posenc writes only "
                                        "into an object with one name (a hard link may be another's file)")
        except BaseException:
            os.close(fd)
            raise
        return fd, st.st_size

    # -- using regions -----------------------------------------------------------------------------
    def _span(self, name, offset, byte_size, path: str) -> tuple[_Open, int, int]:
        entries = self.entries()
        e = entries.get(name) if isinstance(name, str) else None
        if e is None:
            raise BadRequest(f"{path}.shared_memory_region", f"unknown shared memory region {name!r}; "
                             f"registered: {', '.join(entries) or 'none'}")
        offset = 0 if offset is None else offset
        for field, v in (("shared_memory_offset", offset), ("shared_memory_byte_size", byte_size)):
            if type(v) is not int or v < 0:
                raise BadRequest(f"{path}.{field}", f"must be an integer >= 0, got {v!r}")
        if offset + byte_size > e["byte_size"]:
            raise BadRequest(f"{path}.shared_memory_byte_size",
                             f"offset {offset} + byte_size {byte_size} is past the end of region {name!r} "
                             f"({e['byte_size']} bytes)")
        return self._map(name, e, path), e["offset"] + offset, byte_size

    def read(self, name, offset, byte_size, path: str) -> bytes:
        """An input's bytes, copied out of the client's region (the client may change it while
        the request runs; posenc never reads a position twice)."""
        m, start, n = self._span(name, offset, byte_size, path)
        data = os.pread(m.fd, n, start)
        if len(data) < n:
            raise _too_small(name, os.fstat(m.fd).st_size, start + n, path)
        return data

    def write(self, name, offset, byte_size, data, path: str) -> None:
        """An output's bytes (an array, or any contiguous buffer) into the client's region,
        refused (400) when they do not fit in the span asked or the object is too small now."""
        mv = _bytes(data)
        m, start, n = self._span(name, offset, byte_size, path)
        if mv.nbytes > n:
            raise BadRequest(f"{path}.shared_memory_byte_size",
                             f"the output is {mv.nbytes} bytes, more than the {n} bytes given in region {name!r}")
        end = start + mv.nbytes
        try:
            size = os.fstat(m.fd).st_size
            if size < end:
                raise _too_small(name, size, end, path)
            # shrunk between the check and the write: the write grows the object back (to at most
            # the registered span), where a store through a mapping would be a SIGBUS
            done = 0
            while done < mv.nbytes:
                k = os.pwrite(m.fd, mv[done:], start + done)
                if k <= 0:
                    raise OSError(errno.EIO, "short write")
                done += k
        except OSError as e:   # ENOSPC, EFBIG (the server's RLIMIT_FSIZE), EIO
            raise BadRequest(f"{path}.shared_memory_region",
                             f"cannot write into region {name!r}: {e.strerror}") from None

    def _map(self, name: str, e: dict, path: str) -> _Open:
        m = self._mapped.get(name)
        if m is not None and m.entry == _entry(e):
            return m
        fd, _ = self._open_key(e["key"], f"{path}.shared_memory_region")
        self._unmap(name)
        m = self._mapped[name] = _Open(_entry(e), fd)
        return m

    def _unmap(self, name: str) -> None:
        m = self._mapped.pop(name, None)
        if m is not None:
            os.close(m.fd)


def _entry(e: dict | None):
    return None if e is None else (e["key"], e["offset"], e["byte_size"])


def _utf8(s: str) -> bool:
    try:
        s.encode()
    except UnicodeEncodeError:   # a lone surrogate
        return False
    return True


def _too_small(name: str, size: int, end: int, path: str) -> BadRequest:
    return BadRequest(f"{path}.shared_memory_region",
                      f"region {name!r} is too small: it holds {size} bytes now, the request needs {end}")


def _bytes(data) -> memoryview:
    """``data``'s bytes as a flat memoryview (a C-contiguous copy of a strided array)."""
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    mv = memoryview(data)
    return mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")
