"""Sealed shared-memory segments and the manifest.

Each table is one anonymous shared-memory file from ``memfd_create``: the engine sizes it,
reserves its pages (``posix_fallocate``: no memory is ENOSPC/ENOMEM, a clean refusal of that one
build, never a SIGBUS while filling), maps it writable and seals its size and every other way of
writing to it (``FILLING_SEALS``: nobody can shrink it under the engine while it fills), fills
it through that mapping, unmaps that, and seals it with ``F_SEAL_WRITE | F_SEAL_SHRINK |
F_SEAL_GROW | F_SEAL_SEAL``. From then on nobody (the
engine, another process of the same user, root) can write, truncate or grow it; and nothing of it
is in ``shm_dir``, so there is no file to unlink, replace or truncate. Readers get its descriptor
from the engine over the engine's socket (``SCM_RIGHTS``, engine/process/socket.py), check the seals
and size (``check_sealed``: a descriptor that is not sealed as ours is refused), map it
``PROT_READ`` and close the descriptor at once (``Segment``): a process holding thousands of
tables holds no descriptor for them. The memory goes back when the engine (and ``posenc serve``'s
keeper, engine/process/keeper.py) has closed its descriptor and the last reader has unmapped it.

``shm_dir`` keeps small plain files only, none of them mapped by anyone (docs/shm-format.md): the
manifest's head ``{namespace}.manifest.json`` (everything but the tables; rewritten by temporary
file + rename when the engine starts and when the configured tables' ``stored`` change), the
table log ``{namespace}.manifest.log`` (a snapshot of the tables, then one line appended per
table built, rebuilt or evicted: a build costs one append whatever the number of tables; written
anew, by rename, once it holds twice the lines it needs), the engine's socket and its lock.
Readers ``stat`` the log to notice changes, then ask the engine's socket what changed since the
sequence number they have (``changes``), never reading entries from a file.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import zlib

import numpy as np
import orjson

MANIFEST_FORMAT = 2
ALIGN = 64


def manifest_path(shm_dir: str, namespace: str) -> str:
    return os.path.join(shm_dir, f"{namespace}.manifest.json")


def log_path(shm_dir: str, namespace: str) -> str:
    return os.path.join(shm_dir, f"{namespace}.manifest.log")


def lock_path(shm_dir: str, namespace: str) -> str:
    return os.path.join(shm_dir, f"{namespace}.lock")


def socket_path(shm_dir: str, namespace: str) -> str:
    return os.path.join(shm_dir, f"{namespace}.sock")


def check_namespace(namespace: str) -> str:
    if not namespace or not all(c.isalnum() or c in "_-" for c in namespace) or len(namespace) > 64:
        raise ValueError(f"namespace must be 1-64 letters, digits, '_' or '-', got {namespace!r}")
    return namespace


def crc32(buf) -> int:
    return zlib.crc32(memoryview(buf).cast("B")) & 0xFFFFFFFF


SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
# While a segment is filled its descriptor is already in /proc/PID/fd, where another process of
# the same user can reopen it: these seals go on before the first byte is written, so nobody can
# shrink it under the engine's writable mapping (the engine's write would fault: SIGBUS), grow it,
# or write to it other than through that mapping. F_SEAL_FUTURE_WRITE (Linux 5.1; fcntl names it
# from Python 3.13) refuses write(2) and new writable mappings but leaves the existing one working.
F_SEAL_FUTURE_WRITE = getattr(fcntl, "F_SEAL_FUTURE_WRITE", 0x0010)
FILLING_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | F_SEAL_FUTURE_WRITE


def plan(layout: dict) -> tuple[dict, int]:
    """(the manifest's ``arrays`` entry, the file's size) of a segment holding ``layout``
    ({name: (shape, dtype)}): each array at the next ALIGN-byte offset, in order."""
    entries, off = {}, 0
    for name, (shape, dtype) in layout.items():
        off += -off % ALIGN
        entries[name] = {"offset": off, "shape": list(shape), "dtype": np.dtype(dtype).name}
        off += int(np.prod(shape)) * np.dtype(dtype).itemsize
    return entries, max(off, 1)


def create_segment(name: str, layout: dict, fill) -> tuple[int, dict]:
    """A new sealed segment for ``layout`` ({name: (shape, dtype)}): ``fill(views)`` writes into
    writable views of it, then it is checksummed, unmapped and sealed. Returns (its descriptor, the
    caller's to close; {arrays, nbytes, crc32, inode, meta} where meta is what fill returned)."""
    entries, size = plan(layout)
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        # the one writable mapping, then the filling seals at once (F_SEAL_FUTURE_WRITE allows no
        # later one): until then another process of the user could resize the file through
        # /proc/PID/fd, so the window is these three calls, not the page reservation's milliseconds
        mm = mmap.mmap(fd, size, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        seal_for_filling(fd, size)
        reserve(fd, size)  # no memory: ENOSPC/ENOMEM here, not SIGBUS while filling (sealed: within size)
        views = {
            k: np.frombuffer(
                mm, dtype=e["dtype"], count=int(np.prod(e["shape"])), offset=e["offset"]
            ).reshape(e["shape"])
            for k, e in entries.items()
        }
        meta = fill(views)  # (if it fails, its traceback may still hold views: the collector unmaps)
        del views
        checksum = crc32(mm)
        mm.close()  # F_SEAL_WRITE needs no writable mapping left
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
        inode = os.fstat(fd).st_ino
    except BaseException:
        os.close(fd)
        raise
    return fd, {"arrays": entries, "nbytes": size, "crc32": checksum, "inode": inode, "meta": meta or {}}


def seal_for_filling(fd: int, size: int) -> None:
    """FILLING_SEALS on a new segment, then its size checked: a file another process truncated
    between ``ftruncate`` and the seals is refused (OSError) before anything is written to it."""
    try:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, FILLING_SEALS)
    except OSError as e:
        if e.errno != errno.EINVAL:  # EINVAL: a kernel before 5.1, without F_SEAL_FUTURE_WRITE
            raise
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    if os.fstat(fd).st_size != size:
        raise OSError(errno.EIO, f"the new segment was resized before it was sealed ({size} bytes asked)")


def check_sealed(fd: int, nbytes: int) -> str | None:
    """Why ``fd`` is not a segment a reader may map (None: it is): every seal set, and the size
    the entry says (a sealed file can never change size afterwards, so mapping it cannot fault)."""
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        st = os.fstat(fd)
    except OSError as e:
        return f"not a sealed segment ({e.strerror})"
    if seals & SEALS != SEALS:
        return "not sealed"
    if st.st_size != nbytes:
        return f"{st.st_size} bytes, its entry says {nbytes}"
    return None


def reserve(fd: int, size: int) -> None:
    """Back every page of a file now (tmpfs: allocate them), so that writing through a mapping
    cannot fault; OSError(ENOSPC) when the file system is full."""
    if hasattr(os, "posix_fallocate"):
        os.posix_fallocate(fd, 0, size)


def _libc_mmap():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
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
    buf._owner = owner  # the ctypes array (and so every view of it) keeps the mapping
    return memoryview(buf).cast("B").toreadonly()


class Segment:
    """A read-only mapping of one sealed segment and numpy views of its arrays; the descriptor
    is the caller's (it may close it at once: the mapping needs none)."""

    def __init__(self, fd: int, entry: dict):
        self.entry = entry
        why = check_sealed(fd, entry["nbytes"])
        if why is not None:
            raise OSError(f"segment {entry.get('file')}: {why}")
        self.mm = map_readonly(fd, entry["nbytes"])
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


def _read(path: str, limit: int | None = None) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read() if limit is None else f.read(limit)
    except FileNotFoundError:
        return None


def read_head(shm_dir: str, namespace: str) -> dict | None:
    """The manifest's head file (no tables): generation, pid, named...; None if there is none."""
    data = _read(manifest_path(shm_dir, namespace))
    if data is None:
        return None
    m = orjson.loads(data)
    if m.get("format") != MANIFEST_FORMAT:
        raise RuntimeError(f"manifest format {m.get('format')} is not {MANIFEST_FORMAT}")
    return m


def replay(head: dict, log: bytes | None) -> dict:
    """The whole manifest from its head and the table log of the same generation (lines of
    another generation, or a log that does not parse, leave ``tables`` as far as they got)."""
    m = {**head, "tables": {}, "seq": 0}
    gen = None
    for line in (log or b"").splitlines():
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            break
        if "generation" in rec:
            gen = rec["generation"]
            continue
        if gen != head.get("generation"):
            break
        if rec.get("digest") is None:
            pass  # a line of stats only
        elif rec.get("entry") is None:
            m["tables"].pop(rec.get("digest"), None)
        else:
            m["tables"][rec["digest"]] = rec["entry"]
        m["seq"] = rec.get("seq", m["seq"])
        if "stats" in rec:
            m["stats"] = rec["stats"]
    return m


def read_manifest(shm_dir: str, namespace: str) -> dict | None:
    """The manifest as the files say (head + table log replayed): for tools and tests. Readers
    never trust it (anyone of the engine's user can write the files): they ask the socket."""
    head = read_head(shm_dir, namespace)
    return None if head is None else replay(head, _read(log_path(shm_dir, namespace)))


def manifest_stamp(shm_dir: str, namespace: str):
    """Cheap change detector: (inode, size, mtime_ns) of the table log, or None. Every change of
    the manifest (a table, a new generation, the configured tables' ``stored``) appends to the log
    or replaces it."""
    try:
        st = os.stat(log_path(shm_dir, namespace))
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def write_file(path: str, data: bytes, mode: int = 0o600, gid: int | None = None, keep_open: bool = False):
    """Write ``data`` to ``path`` by temporary file + rename; with ``keep_open`` the descriptor
    (for appends, O_APPEND) is returned, else None."""
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        if gid is not None:
            os.fchown(fd, -1, gid)
        os.fchmod(fd, mode)
        reserve(fd, len(data))  # ENOSPC before any byte is written (it sizes the file: no
        write_all(fd, data)  # O_APPEND until the data is in)
        if keep_open:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
        os.rename(tmp, path)
    except BaseException:
        os.close(fd)
        _unlink(tmp)
        raise
    if keep_open:
        return fd
    os.close(fd)
    return None


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def log_snapshot(generation: int, seq: int, tables: dict, stats: dict | None = None) -> bytes:
    """A table log's text holding ``tables`` at sequence number ``seq``."""
    lines = [orjson.dumps({"generation": generation, "base": seq})]
    lines += [orjson.dumps({"seq": seq, "digest": d, "entry": e}) for d, e in tables.items()]
    if stats is not None:
        lines.append(orjson.dumps({"seq": seq, "digest": None, "entry": None, "stats": stats}))
    return b"\n".join(lines) + b"\n"


def log_line(seq: int, digest: str, entry: dict | None, stats: dict | None = None) -> bytes:
    rec = {"seq": seq, "digest": digest, "entry": entry}
    if stats is not None:
        rec["stats"] = stats
    return orjson.dumps(rec) + b"\n"


def our_files(shm_dir: str, namespace: str) -> list[str]:
    """Every file this namespace may have left in shm_dir (manifest head, table log and their
    temporaries, socket, lock; and segment files of a version before sealed segments)."""
    try:
        names = os.listdir(shm_dir)
    except FileNotFoundError:
        return []
    own = {
        os.path.basename(p)
        for p in (
            manifest_path(shm_dir, namespace),
            lock_path(shm_dir, namespace),
            socket_path(shm_dir, namespace),
            log_path(shm_dir, namespace),
        )
    }
    return [
        os.path.join(shm_dir, n)
        for n in names
        if n in own
        or n.startswith(
            (f"{namespace}.manifest.json.tmp", f"{namespace}.manifest.log.tmp", f"{namespace}.seg.")
        )
    ]


def remove_dead(shm_dir: str, namespace: str) -> list[str]:
    """Remove every file of the namespace (``our_files``) if no engine holds its lock: those of an
    engine that died before a successor took them over. Returns what was removed; nothing while a
    live engine holds the namespace."""
    path = lock_path(shm_dir, namespace)
    had_lock = os.path.exists(path)
    if not had_lock and not our_files(shm_dir, namespace):
        return []
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # as an engine takes it
    except OSError:
        return []
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return []
    try:
        files = our_files(shm_dir, namespace)
        for p in sorted(files, key=lambda p: p == path):  # the lock last, as an engine's shutdown
            _unlink(p)
        return [p for p in files if had_lock or p != path]
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


unlink = _unlink
