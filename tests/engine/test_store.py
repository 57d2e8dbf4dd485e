"""The engine's shared-memory store (posenc.engine.store.segments: sealed segments, checksums, the atomic
manifest, namespaces).

Everything here runs in-process against a temporary directory standing in for /dev/shm; the
process-level behaviour (engines, readers, signals) is in tests/integration/test_engine_*.py.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import stat
import subprocess
import sys
import threading
import zlib

import numpy as np
import pytest

from posenc.engine.process import manifest as published
from posenc.engine.store import segments as store


def _arrays():
    rng = np.random.default_rng(3)
    return {
        "cos": rng.standard_normal((37, 5)).astype(np.float32),
        "bits": rng.integers(0, 2**16, size=(11, 3), dtype=np.uint16),  # bfloat16 patterns
        "half": rng.standard_normal(9).astype(np.float16),
        "f64": rng.standard_normal(4),
        "lut": np.arange(-5, 6, dtype=np.int32),
    }


@pytest.fixture
def shm(tmp_path):
    d = tmp_path / "shm"
    d.mkdir()
    return str(d)


def _bytes(fd: int, n: int) -> bytes:
    return os.pread(fd, n, 0)


def write_segment(name: str, arrays: dict[str, np.ndarray]) -> tuple[int, dict]:
    """A sealed segment holding ``arrays``, built as the engine builds one (``create_segment``)."""

    def fill(views):
        for k, a in arrays.items():
            views[k][...] = a

    return store.create_segment(name, {k: (a.shape, a.dtype.name) for k, a in arrays.items()}, fill)


def write_manifest(shm_dir: str, namespace: str, manifest: dict, mode: int = 0o600, gid: int | None = None):
    """A whole manifest written by the engine's writer (engine/process/manifest.py): a table log
    holding its tables, then its head (the rest of it)."""
    gen, seq = manifest.get("generation"), manifest.get("seq", 0)
    tables, stats = manifest.get("tables", {}), manifest.get("stats")
    os.close(published.write_log(shm_dir, namespace, gen, seq, tables, stats, mode=mode, gid=gid))
    head = {k: v for k, v in manifest.items() if k not in ("tables", "seq")}
    published.write_head(shm_dir, namespace, head, mode=mode, gid=gid)


def test_segment_round_trip_and_crc(shm):
    arrays = _arrays()
    fd, info = write_segment("ns.seg.12.abc", arrays)
    try:
        assert os.listdir(shm) == []  # nothing of it in any directory
        assert os.readlink(f"/proc/self/fd/{fd}") == "/memfd:ns.seg.12.abc (deleted)"
        raw = _bytes(fd, info["nbytes"] + 1)
        assert info["nbytes"] == len(raw) == os.fstat(fd).st_size
        assert info["crc32"] == zlib.crc32(raw) & 0xFFFFFFFF
        for name, e in info["arrays"].items():
            assert e["offset"] % store.ALIGN == 0, (name, e)
            a = arrays[name]
            assert raw[e["offset"] : e["offset"] + a.nbytes] == a.tobytes()
        seg = store.Segment(fd, info)
    finally:
        os.close(fd)  # the mapping needs no descriptor
    assert seg.verify()
    for name, a in arrays.items():
        got = seg[name]
        assert got.dtype == a.dtype and got.shape == a.shape and got.tobytes() == a.tobytes()
        assert not got.flags.writeable
        with pytest.raises(ValueError):
            got.setflags(write=True)
        with pytest.raises(ValueError):
            got[...] = 0


def test_a_sealed_segment_cannot_be_written_truncated_or_grown_by_anyone(shm):
    """What F_SEAL_WRITE | SHRINK | GROW | SEAL promise, tried every way a process of the same
    user can reach it: the descriptor, a writable reopen through /proc, a writable mapping, and
    removing the seals."""
    fd, info = write_segment("ns.seg.1.d", _arrays())
    before = _bytes(fd, info["nbytes"])
    path = f"/proc/self/fd/{fd}"
    try:
        for attempt in (
            lambda: os.ftruncate(fd, 1),
            lambda: os.ftruncate(fd, info["nbytes"] * 2),
            lambda: os.truncate(path, 0),
            lambda: os.pwrite(fd, b"x", 0),
            lambda: os.posix_fallocate(fd, 0, info["nbytes"] * 2),
            lambda: mmap.mmap(fd, info["nbytes"], prot=mmap.PROT_READ | mmap.PROT_WRITE),
            lambda: fcntl.fcntl(fd, fcntl.F_ADD_SEALS, 0),
        ):
            with pytest.raises(OSError) as e:
                attempt()
            assert e.value.errno == errno.EPERM, e.value
        rw = os.open(path, os.O_RDWR)  # a reopen for writing is allowed, and writes nothing
        try:
            with pytest.raises(OSError):
                os.write(rw, b"x")
        finally:
            os.close(rw)
        assert _bytes(fd, info["nbytes"]) == before and store.check_sealed(fd, info["nbytes"]) is None
    finally:
        os.close(fd)


def test_only_a_sealed_segment_of_the_entry_size_is_mapped(shm):
    fd, info = write_segment("ns.seg.1.d", _arrays())
    try:
        with pytest.raises(OSError, match="entry says"):
            store.Segment(fd, {**info, "nbytes": info["nbytes"] + 64})
    finally:
        os.close(fd)
    plain = os.memfd_create("unsealed", os.MFD_ALLOW_SEALING)  # another process's fake table
    try:
        os.ftruncate(plain, info["nbytes"])
        with pytest.raises(OSError, match="not sealed"):
            store.Segment(plain, info)
        fcntl.fcntl(plain, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)  # a partial seal is not enough
        with pytest.raises(OSError, match="not sealed"):
            store.Segment(plain, info)
    finally:
        os.close(plain)
    with open(os.path.join(shm, "file"), "wb") as f:  # nor is a plain file
        f.write(b"\0" * info["nbytes"])
    with open(os.path.join(shm, "file"), "rb") as f:
        assert "not" in store.check_sealed(f.fileno(), info["nbytes"])


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o000])
def test_manifest_modes(shm, umask):
    old = os.umask(umask)
    try:
        write_manifest(shm, "m1", {"format": store.MANIFEST_FORMAT})
        write_manifest(shm, "m2", {"format": store.MANIFEST_FORMAT}, mode=0o640, gid=os.getgid())
    finally:
        os.umask(old)
    mode = {n: stat.S_IMODE(os.stat(os.path.join(shm, n)).st_mode) for n in os.listdir(shm)}
    assert mode == {
        "m1.manifest.json": 0o600,
        "m1.manifest.log": 0o600,
        "m2.manifest.json": 0o640,
        "m2.manifest.log": 0o640,
    }


def test_failed_build_leaves_nothing_and_keeps_its_error(shm):
    """A build that fails half way removes its temporary file and surfaces its own error (not a
    BufferError from closing a mapping that the failing fill's views still point into)."""

    def fill(views):
        views["x"][...] = 1
        raise RuntimeError("boom")

    before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(RuntimeError, match="boom"):
        store.create_segment("ns.seg.1.d", {"x": ((4, 4), "float32")}, fill)
    assert set(os.listdir("/proc/self/fd")) <= before  # its descriptor closed


ATTACK_WHILE_FILLING = r"""
import errno, mmap, os, sys
import numpy as np
from posenc.engine.process import manifest as published
from posenc.engine.store import segments as store

tried = {}

def fill(views):
    # another process of the same user reaches the segment being filled through /proc/PID/fd
    links = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            links[f"/proc/self/fd/{fd}"] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed since
            pass
    # (Python's mmap holds a duplicate of the descriptor: either reaches the same file)
    path = next(p for p, link in links.items() if link.startswith("/memfd:ns.seg.7.f"))
    for what, attempt in (("shrink", lambda: os.truncate(path, 0)),
                          ("grow", lambda: os.truncate(path, 1 << 24))):
        try:
            attempt()
            tried[what] = "done"
        except OSError as e:
            tried[what] = errno.errorcode[e.errno]
    own = os.open(path, os.O_RDWR)
    try:
        os.pwrite(own, bytes(64), 0)
        tried["write"] = "done"
    except OSError as e:
        tried["write"] = errno.errorcode[e.errno]
    try:
        mmap.mmap(own, 0, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        tried["map"] = "done"
    except OSError as e:
        tried["map"] = errno.errorcode[e.errno]
    os.close(own)
    views["x"][...] = np.arange(1 << 16, dtype=np.float32).reshape(256, 256)  # faults if shrunk

fd, info = store.create_segment("ns.seg.7.f", {"x": ((256, 256), "float32")}, fill)
print(sorted(tried.items()), info["crc32"] == store.crc32(mmap.mmap(fd, info["nbytes"], prot=mmap.PROT_READ)))
"""


def test_a_segment_being_filled_cannot_be_shrunk_grown_or_written_by_another(tmp_path):
    """Between memfd_create and the final seals a segment's descriptor is in /proc/PID/fd: a
    process of the same user that truncates it there would make the engine's next write through
    its mapping fault (SIGBUS kills the engine). Every such attempt is refused while it fills, and
    the build completes with the bytes it wrote. Run in a child process: a fault there fails this
    test instead of killing pytest."""
    r = subprocess.run(
        [sys.executable, "-c", ATTACK_WHILE_FILLING], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    refused = str(sorted({"grow": "EPERM", "map": "EPERM", "shrink": "EPERM", "write": "EPERM"}.items()))
    assert r.stdout.strip() == f"{refused} True", r.stdout


# ---------------------------------------------------------------------------------------------
# Manifest


def test_manifest_round_trip_and_atomic_replace(shm):
    assert store.read_manifest(shm, "ns") is None
    m1 = {"format": store.MANIFEST_FORMAT, "generation": 1, "tables": {"a": {"nbytes": 1}}, "seq": 0}
    write_manifest(shm, "ns", m1)
    assert store.read_manifest(shm, "ns") == m1
    ino = os.stat(store.manifest_path(shm, "ns")).st_ino
    stamp = store.manifest_stamp(shm, "ns")
    m2 = {**m1, "generation": 2}
    write_manifest(shm, "ns", m2)
    assert store.read_manifest(shm, "ns") == m2
    # Replaced by rename (a new inode), never rewritten in place; no temporary left.
    assert os.stat(store.manifest_path(shm, "ns")).st_ino != ino
    assert store.manifest_stamp(shm, "ns") != stamp
    assert sorted(os.listdir(shm)) == ["ns.manifest.json", "ns.manifest.log"]


def test_the_table_log_replays_appended_changes_and_stops_at_another_generation(shm):
    """What an engine appends (a table, a newer one, a drop, stats) replays onto the head; the
    stamp moves with each append; a log of another generation than the head adds no table."""
    write_manifest(
        shm,
        "ns",
        {
            "format": store.MANIFEST_FORMAT,
            "generation": 7,
            "seq": 3,
            "tables": {"a": {"nbytes": 1}, "b": {"nbytes": 2}},
        },
    )
    stamp = store.manifest_stamp(shm, "ns")
    with open(store.log_path(shm, "ns"), "ab") as f:
        f.write(store.log_line(4, "c", {"nbytes": 3}))
        f.write(store.log_line(5, "a", None, {"builds": 1}))
        f.write(store.log_line(6, "b", {"nbytes": 20}))
    assert store.manifest_stamp(shm, "ns") != stamp
    m = store.read_manifest(shm, "ns")
    assert m["tables"] == {"b": {"nbytes": 20}, "c": {"nbytes": 3}} and m["seq"] == 6
    assert m["stats"] == {"builds": 1}
    store.write_file(
        store.manifest_path(shm, "ns"), b'{"format": %d, "generation": 8}' % store.MANIFEST_FORMAT
    )
    assert store.read_manifest(shm, "ns")["tables"] == {}


def test_manifest_of_another_format_is_refused(shm):
    write_manifest(shm, "ns", {"format": store.MANIFEST_FORMAT + 1})
    with pytest.raises(RuntimeError):
        store.read_manifest(shm, "ns")


def test_concurrent_readers_never_see_a_torn_manifest(shm):
    """A writer replaces the manifest many times (head sizes from bytes to ~100 KB) while a reader
    reads its head in a loop: every read parses and is one whole version."""

    def version(i):
        return {"format": store.MANIFEST_FORMAT, "generation": i, "pad": list(range((i * 7919) % 20000))}

    write_manifest(shm, "ns", version(0))
    done = threading.Event()

    def writer():
        for i in range(1, 400):
            write_manifest(shm, "ns", version(i))
        done.set()

    t = threading.Thread(target=writer)
    t.start()
    reads, last = 0, -1
    while not done.is_set() or reads == 0:
        m = store.read_head(shm, "ns")
        assert m == version(m["generation"])
        assert m["generation"] >= last  # versions only move forward
        last = m["generation"]
        reads += 1
    t.join()
    assert store.read_manifest(shm, "ns")["generation"] == 399
    assert sorted(os.listdir(shm)) == ["ns.manifest.json", "ns.manifest.log"]


# ---------------------------------------------------------------------------------------------
# Names


def test_our_files_are_exactly_the_namespace_files(shm):
    mine = [
        "ns.seg.1.aa",
        "ns.seg.1.aa.tmp",
        "ns.seg.2.bb",
        "ns.manifest.json",
        "ns.manifest.json.tmp42",
        "ns.sock",
        "ns.lock",
    ]
    others = ["ns-2.seg.1.aa", "ns2.manifest.json", "nsx.lock", "other.seg.1.aa", "ns_seg.1"]
    for n in mine + others:
        open(os.path.join(shm, n), "w").close()
    assert sorted(os.path.basename(p) for p in store.our_files(shm, "ns")) == sorted(mine)
    assert store.our_files(os.path.join(shm, "absent"), "ns") == []


def test_remove_dead_leaves_a_live_engines_files_and_removes_a_dead_ones(shm):
    names = ["ns.lock", "ns.manifest.json", "ns.sock", "ns.manifest.json.tmp7", "ns.metrics.9", "other.lock"]
    for n in names:
        open(os.path.join(shm, n), "w").close()
    held = os.open(os.path.join(shm, "ns.lock"), os.O_RDWR)  # as a running engine holds it
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        assert store.remove_dead(shm, "ns") == []
        assert sorted(os.listdir(shm)) == sorted(names)
    finally:
        os.close(held)  # the engine died
    removed = store.remove_dead(shm, "ns")
    assert sorted(os.path.basename(p) for p in removed) == [
        "ns.lock",
        "ns.manifest.json",
        "ns.manifest.json.tmp7",
        "ns.sock",
    ]
    assert sorted(os.listdir(shm)) == ["ns.metrics.9", "other.lock"]  # (serve's own files are serve's)
    assert store.remove_dead(shm, "ns") == [] and sorted(os.listdir(shm)) == ["ns.metrics.9", "other.lock"]
    os.remove(os.path.join(shm, "other.lock"))
    open(os.path.join(shm, "ns.sock"), "w").close()  # a socket without its lock
    assert [os.path.basename(p) for p in store.remove_dead(shm, "ns")] == ["ns.sock"]
    assert os.listdir(shm) == ["ns.metrics.9"]
    assert store.remove_dead(os.path.join(shm, "absent"), "ns") == []


@pytest.mark.parametrize("name", ["posenc", "ptest-1a2b", "A_b-9", "x" * 64])
def test_namespace_accepted(name):
    assert store.check_namespace(name) == name


@pytest.mark.parametrize("name", ["", "a/b", "../x", ".", "a.b", "a b", "x" * 65])
def test_namespace_refused(name):
    with pytest.raises(ValueError):
        store.check_namespace(name)
