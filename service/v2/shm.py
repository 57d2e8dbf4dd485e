"""The system shared-memory extension (Triton's, which ``tritonclient.utils.shared_memory``
speaks): a co-located client registers a POSIX shared-memory object of its own
(``/dev/shm/<key>``) under a name, and asks for outputs (or gives inputs) at an offset in it.

Registrations are shared by every process of the server, the HTTP workers and the gRPC
processes alike (a region registered over gRPC serves REST requests), in one small JSON file in
the namespace (``{ns}.v2-regions.json``, replaced atomically; changes under ``flock`` of
``{ns}.v2-regions.lock``). Each process maps a region when a request first uses it.

Trust: as with Triton, any client that reaches the server may make it write into a shared-memory
object its user can open. posenc refuses keys that name posenc's own files (any namespace's
segments, manifest, metrics); serve on 127.0.0.1 (the default) unless every client is trusted.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import re

import numpy as np
import orjson

from posenc.service.v2.errors import BadRequest

REGION_DIR = "/dev/shm"          # where shm_open(3) objects live on Linux
# posenc's own files, in any namespace (engine/store.py, service/metrics/counters.py, this module)
_POSENC_FILE = re.compile(r"^[A-Za-z0-9_-]{1,64}\.(seg\.|manifest\.json|lock$|sock$|metrics\.|v2-regions)")


def registry_path(shm_dir: str, namespace: str) -> str:
    return os.path.join(shm_dir, f"{namespace}.v2-regions.json")


def remove_registry(shm_dir: str, namespace: str) -> None:
    """At server exit: forget every registration (the clients' regions are theirs to remove)."""
    for path in (registry_path(shm_dir, namespace), registry_path(shm_dir, namespace)[:-5] + ".lock"):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


class _Mapped:
    __slots__ = ("entry", "fd", "mm")

    def __init__(self, entry: tuple, fd: int, mm: mmap.mmap):
        self.entry, self.fd, self.mm = entry, fd, mm


class Regions:
    def __init__(self, shm_dir: str, namespace: str, region_dir: str = REGION_DIR):
        self.path = registry_path(shm_dir, namespace)
        self.lock_path = self.path[:-5] + ".lock"
        self.region_dir = region_dir
        self._stamp = None
        self._entries: dict[str, dict] = {}
        self._mapped: dict[str, _Mapped] = {}

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
        path = self._key_path(key)
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as e:
            raise BadRequest("key", f"unable to open shared memory object {key!r}: {e.strerror}") from None
        try:
            size = os.fstat(fd).st_size
        finally:
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

    def _key_path(self, key) -> str:
        stem = key.lstrip("/") if isinstance(key, str) else ""
        if not stem or "/" in stem or stem in (".", "..") or "\0" in stem:
            raise BadRequest("key", f"must name a POSIX shared memory object (e.g. '/my_region'), got {key!r}")
        if _POSENC_FILE.match(stem):
            raise BadRequest("key", f"{key!r} is one of posenc's own files")
        return os.path.join(self.region_dir, stem)

    # -- using regions -----------------------------------------------------------------------------
    def _span(self, name, offset, byte_size, path: str) -> tuple[_Mapped, int, int]:
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
        return self._map(name, e), e["offset"] + offset, byte_size

    def read(self, name, offset, byte_size, path: str) -> bytes:
        """An input's bytes, copied out of the client's region (the client may change it while
        the request runs; posenc never reads a position twice)."""
        m, start, n = self._span(name, offset, byte_size, path)
        self._check_size(m, start + n, name, path)
        return m.mm[start:start + n]

    def write(self, name, offset, byte_size, array: np.ndarray, path: str) -> None:
        """An output's bytes into the client's region, refused (400) when it does not fit."""
        dst = self.view(name, offset, byte_size, array.nbytes, path)
        np.copyto(dst.view(array.dtype).reshape(array.shape), array)

    def view(self, name, offset, byte_size, nbytes: int, path: str) -> np.ndarray:
        """The ``nbytes`` of the client's region where an output of that size goes (uint8,
        writable), refused (400) when it does not fit."""
        m, start, n = self._span(name, offset, byte_size, path)
        if nbytes > n:
            raise BadRequest(f"{path}.shared_memory_byte_size",
                             f"the output is {nbytes} bytes, more than the {n} bytes given in region {name!r}")
        self._check_size(m, start + nbytes, name, path)
        return np.frombuffer(m.mm, np.uint8, nbytes, start)

    def _check_size(self, m: _Mapped, end: int, name: str, path: str) -> None:
        # A client may shrink its object after registering it: touching pages past its end
        # would kill this process (SIGBUS), so the size is checked at every use.
        if os.fstat(m.fd).st_size < end or len(m.mm) < end:
            raise BadRequest(f"{path}.shared_memory_region", f"region {name!r} is smaller than when it was registered")

    def _map(self, name: str, e: dict) -> _Mapped:
        m = self._mapped.get(name)
        if m is not None and m.entry == _entry(e):
            return m
        path = self._key_path(e["key"])
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as err:
            raise BadRequest("shared_memory_region", f"region {name!r}: cannot open {e['key']!r}: {err.strerror}") from None
        try:
            mm = mmap.mmap(fd, e["offset"] + e["byte_size"])
        except (OSError, ValueError) as err:
            os.close(fd)
            raise BadRequest("shared_memory_region", f"region {name!r}: cannot map {e['key']!r}: {err}") from None
        self._unmap(name)
        m = self._mapped[name] = _Mapped(_entry(e), fd, mm)
        return m

    def _unmap(self, name: str) -> None:
        m = self._mapped.pop(name, None)
        if m is not None:
            os.close(m.fd)   # the mapping itself goes when the last view of it does


def _entry(e: dict | None):
    return None if e is None else (e["key"], e["offset"], e["byte_size"])
