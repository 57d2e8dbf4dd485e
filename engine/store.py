"""Shared-memory segments and the manifest.

Each table is one file in ``shm_dir`` (``/dev/shm`` by default: tmpfs, i.e. POSIX shared memory)
named ``{namespace}.seg.{generation}.{digest}``, where the digest is a hash of the table's canonical
key. The engine writes it under a temporary name and renames it into place; then it rewrites the
manifest ``{namespace}.manifest.json`` (temporary file + rename, so readers see the old manifest or
the new one, never a torn one). The manifest is the only way readers find segments, so a reader
never sees a half-built table.

Readers open segments ``O_RDONLY`` and map them ``PROT_READ``: numpy views are not writable, and
no reader code path unlinks anything (plain files, not ``multiprocessing.shared_memory``, whose
resource tracker unlinks on a reader's exit before Python 3.13). A reader closes the descriptor as
soon as the segment is mapped (Python's ``mmap`` keeps a duplicate open for its life, so readers
map through libc), so a process holding thousands of tables holds no descriptor for them.

A segment's pages are reserved (``posix_fallocate``) before it is mapped for writing: on a full
tmpfs the build fails with ENOSPC, cleanly, instead of the writer dying of SIGBUS on the first
page that cannot be backed. Published segments are read-only files (0400, or 0440 with a group).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import zlib

import numpy as np
import orjson

MANIFEST_FORMAT = 1
ALIGN = 64


def manifest_path(shm_dir: str, namespace: str) -> str:
    return os.path.join(shm_dir, f"{namespace}.manifest.json")


def lock_path(shm_dir: str, namespace: str) -> str:
    return os.path.join(shm_dir, f"{namespace}.lock")


def socket_path(shm_dir: str, namespace: str) -> str:
    return os.path.join(shm_dir, f"{namespace}.sock")


def segment_prefix(namespace: str) -> str:
    return f"{namespace}.seg."


def segment_path(shm_dir: str, namespace: str, generation: int, digest: str) -> str:
    return os.path.join(shm_dir, f"{segment_prefix(namespace)}{generation}.{digest}")


def check_namespace(namespace: str) -> str:
    if not namespace or not all(c.isalnum() or c in "_-" for c in namespace) or len(namespace) > 64:
        raise ValueError(f"namespace must be 1-64 letters, digits, '_' or '-', got {namespace!r}")
    return namespace


def crc32(buf) -> int:
    return zlib.crc32(memoryview(buf).cast("B")) & 0xFFFFFFFF


def write_segment(path: str, arrays: dict[str, np.ndarray], mode: int = 0o600, gid: int | None = None) -> dict:
    """Write arrays into a new segment file atomically; returns {arrays, nbytes, crc32}."""
    def fill(views):
        for name, a in arrays.items():
            views[name][...] = a
    return create_segment(path, {k: (a.shape, a.dtype.name) for k, a in arrays.items()}, fill, mode, gid)


def plan(layout: dict) -> tuple[dict, int]:
    """(the manifest's ``arrays`` entry, the file's size) of a segment holding ``layout``
    ({name: (shape, dtype)}): each array at the next ALIGN-byte offset, in order."""
    entries, off = {}, 0
    for name, (shape, dtype) in layout.items():
        off += -off % ALIGN
        entries[name] = {"offset": off, "shape": list(shape), "dtype": np.dtype(dtype).name}
        off += int(np.prod(shape)) * np.dtype(dtype).itemsize
    return entries, max(off, 1)


def create_segment(path: str, layout: dict, fill, mode: int = 0o600, gid: int | None = None) -> dict:
    """Create a segment for ``layout`` ({name: (shape, dtype)}) under a temporary name, let
    ``fill(views)`` write into writable views of it, checksum it, then rename it into place.
    Returns {arrays, nbytes, crc32, meta} where meta is what fill returned."""
    entries, size = plan(layout)
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, mode)
    try:
        if gid is not None:
            os.fchown(fd, -1, gid)
        os.fchmod(fd, mode)  # umask must not widen or narrow what was asked for
        os.ftruncate(fd, size)
        reserve(fd, size)    # ENOSPC here, not SIGBUS while filling
        mm = mmap.mmap(fd, size, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        views = {name: np.frombuffer(mm, dtype=e["dtype"], count=int(np.prod(e["shape"])),
                                     offset=e["offset"]).reshape(e["shape"]) for name, e in entries.items()}
        meta = fill(views)
        del views
        checksum = crc32(mm)
        mm.close()
    except BaseException:
        # A failed fill's traceback may still reference views of the mapping, so it is left to
        # the garbage collector rather than closed here; the file itself goes now.
        os.close(fd)
        _unlink(tmp)
        raise
    try:
        os.fchmod(fd, mode & 0o444)   # published tables are never written again
    finally:
        os.close(fd)
    os.rename(tmp, path)
    return {"arrays": entries, "nbytes": size, "crc32": checksum, "meta": meta or {}}


def reserve(fd: int, size: int) -> None:
    """Back every page of a file now (tmpfs: allocate them), so that writing through a mapping
    cannot fault; OSError(ENOSPC) when the file system is full."""
    if hasattr(os, "posix_fallocate"):
        os.posix_fallocate(fd, 0, size)


def _libc_mmap():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):  # pragma: no cover - no libc mmap: Python's mmap below
        return None


_LIBC = _libc_mmap()
_MAP_FAILED = ctypes.c_void_p(-1).value


class _Mapping:
    """Owns one libc mapping; unmapped when the last buffer over it goes."""

    def __init__(self, addr: int, size: int):
        self.addr, self.size = addr, size

    def __del__(self):
        _LIBC.munmap(self.addr, self.size)


def map_readonly(fd: int, size: int):
    """A read-only buffer over a PROT_READ, MAP_SHARED mapping of ``fd`` that keeps no descriptor
    (the caller may close ``fd`` at once); numpy views of it can never be made writable."""
    if _LIBC is None:  # pragma: no cover
        return mmap.mmap(fd, size, prot=mmap.PROT_READ)
    addr = _LIBC.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr is None or addr == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    owner = _Mapping(addr, size)
    buf = (ctypes.c_char * size).from_address(addr)
    buf._owner = owner        # the ctypes array (and so every view of it) keeps the mapping
    return memoryview(buf).cast("B").toreadonly()


class Segment:
    """A read-only mapping of one segment and numpy views of its arrays."""

    def __init__(self, path: str, entry: dict):
        self.path = path
        self.entry = entry
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size != entry["nbytes"]:
                raise OSError(f"segment {path} is {size} bytes, manifest says {entry['nbytes']}")
            self.mm = map_readonly(fd, size)
        finally:
            os.close(fd)   # the mapping needs no descriptor
        self.arrays: dict[str, np.ndarray] = {}
        for name, e in entry["arrays"].items():
            dt = np.dtype(e["dtype"])
            count = int(np.prod(e["shape"])) if e["shape"] else 1
            a = np.frombuffer(self.mm, dtype=dt, count=count, offset=e["offset"]).reshape(e["shape"])
            self.arrays[name] = a  # read-only: the buffer is a PROT_READ mapping

    def verify(self) -> bool:
        return crc32(self.mm) == self.entry["crc32"]

    def __getitem__(self, name) -> np.ndarray:
        return self.arrays[name]


def read_manifest(shm_dir: str, namespace: str) -> dict | None:
    try:
        with open(manifest_path(shm_dir, namespace), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    m = orjson.loads(data)
    if m.get("format") != MANIFEST_FORMAT:
        raise RuntimeError(f"manifest format {m.get('format')} is not {MANIFEST_FORMAT}")
    return m


def manifest_stamp(shm_dir: str, namespace: str):
    """Cheap change detector: (inode, mtime_ns) of the manifest, or None."""
    try:
        st = os.stat(manifest_path(shm_dir, namespace))
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns)


def write_manifest(shm_dir: str, namespace: str, manifest: dict, mode: int = 0o600, gid: int | None = None) -> None:
    path = manifest_path(shm_dir, namespace)
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        if gid is not None:
            os.fchown(fd, -1, gid)
        os.fchmod(fd, mode)
        data = orjson.dumps(manifest)   # (orjson: the manifest is rewritten on every build)
        reserve(fd, len(data))          # ENOSPC before any byte is written
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.rename(tmp, path)


def our_files(shm_dir: str, namespace: str) -> list[str]:
    """Every file this namespace may have left in shm_dir (segments, temporaries, manifest,
    socket, lock)."""
    try:
        names = os.listdir(shm_dir)
    except FileNotFoundError:
        return []
    pre = segment_prefix(namespace)
    own = {os.path.basename(p) for p in (manifest_path(shm_dir, namespace), lock_path(shm_dir, namespace),
                                          socket_path(shm_dir, namespace))}
    return [os.path.join(shm_dir, n) for n in names
            if n.startswith(pre) or n in own or n.startswith(f"{namespace}.manifest.json.tmp")]


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


unlink = _unlink
