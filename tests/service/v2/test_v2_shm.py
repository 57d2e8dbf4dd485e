"""The shared-memory registry (service/v2/shm.py) in process: what one process registers the
others see, outputs land at the offset asked, a client that shrinks its object gets a 400
("too small"), keys that lead anywhere but a client's own object are refused at registration and
at use, and a process holds a bounded number of registrations and descriptors."""

from __future__ import annotations

import os
import statistics
import threading
import uuid

import numpy as np
import pytest

from posenc.service.v2.errors import BadRequest
from posenc.service.v2.shm import (
    MAX_REGIONS,
    OPEN_REGIONS,
    Regions,
    TooManyRegions,
    registry_path,
    remove_registry,
)
from tests.procs import bytes_read, unique_namespace
from tests.service.v2.shm_client import client_object, shrinking
from tests.shm import assert_no_leftovers

SHM = "/dev/shm"


@pytest.fixture
def ns(tmp_path):
    ns = unique_namespace()
    yield ns
    remove_registry(SHM, ns)
    assert_no_leftovers(ns)


@pytest.fixture
def objects():
    """Make client objects; every one is removed after the test."""
    made = []

    def make(size: int = 4096):
        key, path = client_object(size)
        made.append(path)
        return key, path

    yield make
    for path in made:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


@pytest.fixture
def region(objects):
    return objects(4096)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_another_process_sees_registrations_and_writes_land(ns, region):
    key, path = region
    a, b = Regions(SHM, ns), Regions(SHM, ns)  # two server processes
    a.register("r", key, 1024, 2048)
    assert b.status() == [{"name": "r", "key": key, "offset": 1024, "byte_size": 2048}]
    out = np.arange(6, dtype=np.float32).reshape(2, 3)
    b.write("r", 100, 24, out, "outputs[0].parameters")
    got = np.fromfile(path, np.float32, 6, offset=1024 + 100)
    np.testing.assert_array_equal(got, out.reshape(-1))
    assert a.read("r", 100, 24, "inputs[0].parameters") == out.tobytes()
    b.write("r", 0, 24, out.T, "outputs[0].parameters")  # a strided array is written in C order
    assert np.fromfile(path, np.float32, 6, offset=1024).tolist() == out.T.reshape(-1).tolist()
    a.unregister("r")
    with pytest.raises(BadRequest, match="unknown shared memory region 'r'"):
        b.write("r", 0, 24, out, "outputs[0].parameters")


def test_a_shrunk_object_is_refused_not_a_crash(ns, region):
    key, path = region
    r = Regions(SHM, ns)
    r.register("r", key, 0, 4096)
    r.write("r", 0, 16, np.zeros(4, np.float32), "outputs[0].parameters")  # open now
    os.truncate(path, 8)
    with pytest.raises(
        BadRequest, match="region 'r' is too small: .* holds 8 bytes now, the request needs 16"
    ):
        r.write("r", 0, 16, np.ones(4, np.float32), "outputs[0].parameters")
    with pytest.raises(BadRequest, match="too small"):
        r.read("r", 0, 16, "inputs[0].parameters")
    os.truncate(path, 4096)
    r.write("r", 0, 16, np.ones(4, np.float32), "outputs[0].parameters")
    assert np.fromfile(path, np.float32, 4).tolist() == [1, 1, 1, 1]


def test_writes_racing_a_shrinking_object_never_signal(ns, region):
    """The attack of tests/integration/test_kserve_shm_attacks.py in process, bounded: each write
    lands or is refused as too small; a store through a mapping would have been a SIGBUS."""
    key, path = region
    size = 1 << 20
    os.truncate(path, size)
    r = Regions(SHM, ns)
    r.register("r", key, 0, size)
    out, seen = np.ones(size // 4, np.float32), set()
    with shrinking(path, size):
        for _ in range(300):  # a number of writes, not a time window: every run tries as many
            try:
                r.write("r", 0, size, out, "outputs[0].parameters")
                seen.add("written")
            except BadRequest as e:
                assert "too small" in str(e), e
                seen.add("too small")
    assert seen, "no write was tried"


@pytest.mark.parametrize(
    "key, words",
    [
        ("", "must name a POSIX shared memory object"),
        ("/a/b", "must name"),
        ("..", "must name"),
        ("/" + "x" * 256, "at most 255 bytes"),
        ("/\udc80x", "must name"),
        ("/posenc.seg.1.abc", "posenc's own files"),
        ("ns-1.manifest.json", "posenc's own files"),
        ("/my.ns.seg.1.abc", "posenc's own files"),
        ("/ns.serve.lock", "posenc's own files"),
        ("/ns.metrics.total", "posenc's own files"),
        ("/ns.sock", "posenc's own files"),
        ("/ns.v2-regions.log", "posenc's own files"),
        ("/posenc_test_absent", "unable to open"),
    ],
)
def test_keys_refused(ns, key, words):
    with pytest.raises(BadRequest, match=words):
        Regions(SHM, ns).register("r", key, 0, 8)


@pytest.mark.parametrize("name", ["", "x" * 257, "\udc80", 7, None])
def test_names_refused(ns, region, name):
    with pytest.raises(BadRequest, match="non-empty string of at most 256"):
        Regions(SHM, ns).register(name, region[0], 0, 8)


def _links(tmp_path, ns: str) -> dict:
    """Keys in /dev/shm that are not a client's own object: {what: (key, path, target)}."""
    target = tmp_path / "target"
    target.write_bytes(b"A" * 4096)
    seg = os.path.join(SHM, f"{ns}.seg.1.abc")  # stands for a table segment of the server
    with open(seg, "wb") as f:
        f.write(b"S" * 4096)
    tag = uuid.uuid4().hex[:8]
    out = {
        "symbolic link": (str(target), os.symlink),
        "symbolic link to a segment": (seg, os.symlink),
        "hard link to a segment": (seg, os.link),
    }
    links = {}
    for what, (to, make) in out.items():
        path = os.path.join(SHM, f"posenc_test_{tag}_{len(links)}")
        make(to, path)
        links[what] = ("/" + os.path.basename(path), path, to)
    fifo = os.path.join(SHM, f"posenc_test_{tag}_fifo")
    os.mkfifo(fifo)
    links["fifo"] = ("/" + os.path.basename(fifo), fifo, fifo)
    return links


WORDS = {
    "symbolic link": "it is a symbolic link",
    "symbolic link to a segment": "it is a symbolic link",
    "hard link to a segment": "has 2 links",
    "fifo": "not a regular file",
}


def test_links_and_special_files_are_refused_at_registration_and_at_use(ns, tmp_path, objects):
    links = _links(tmp_path, ns)
    r = Regions(SHM, ns)
    try:
        for what, (key, path, _to) in links.items():
            with pytest.raises(BadRequest, match=WORDS[what]):
                r.register("evil", key, 0, 16)
            # registered as the client's own object, then swapped for the link before first use
            own, own_path = objects()
            r.register(what, own, 0, 16)
            os.replace(path, own_path)
            try:
                for _ in range(2):
                    with pytest.raises(BadRequest, match=WORDS[what]) as e:
                        r.write(what, 0, 16, np.zeros(4, np.float32), "outputs[0].parameters")
                    assert e.value.path == "outputs[0].parameters.shared_memory_region"
            finally:
                os.replace(own_path, path)
        assert (tmp_path / "target").read_bytes() == b"A" * 4096
        with open(os.path.join(SHM, f"{ns}.seg.1.abc"), "rb") as f:
            assert f.read() == b"S" * 4096
    finally:
        for _, path, _ in links.values():
            os.unlink(path)
        os.unlink(os.path.join(SHM, f"{ns}.seg.1.abc"))


def test_a_new_object_under_a_registered_key_is_used_after_registering_again(ns, objects):
    key, path = objects()
    a, b = Regions(SHM, ns), Regions(SHM, ns)
    a.register("r", key, 0, 16)
    b.write("r", 0, 16, np.ones(4, np.float32), "outputs[0].parameters")  # b holds the old object open
    a.unregister("r")
    os.unlink(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, 16)
    os.close(fd)
    a.register("r", key, 0, 16)
    b.write("r", 0, 16, np.full(4, 2, np.float32), "outputs[0].parameters")
    assert np.fromfile(path, np.float32, 4).tolist() == [2, 2, 2, 2]


def test_registrations_are_bounded_and_read_only_what_is_new(ns, region):
    """Each registration reads the log's new records only (the other process's last one), not the
    whole log: the bytes this process reads per registration (/proc/self/io) do not grow with the
    count (re-reading the log made registering 10x slower at 1024)."""
    key, _ = region
    a, b = Regions(SHM, ns), Regions(SHM, ns)
    reads = []
    for i in range(MAX_REGIONS):
        before = bytes_read()
        (a if i % 2 else b).register(f"r{i}", key, 0, 8)
        reads.append(bytes_read() - before)
    for r in (a, b):
        with pytest.raises(
            TooManyRegions,
            match=f"{MAX_REGIONS} regions are registered, the most this server holds "
            f"\\({MAX_REGIONS} regions\\)",
        ):
            r.register("one-more", key, 0, 8)
    first, last = statistics.median(reads[:100]), statistics.median(reads[-100:])
    record = len(os.path.basename(key)) + 96  # one more record's bytes, or so: not the log's
    assert last <= first + record, (first, last, reads[-5:])
    a.unregister("r0")
    b.register("one-more", key, 0, 8)
    assert len(a.status()) == MAX_REGIONS


def test_the_log_is_compacted_and_read_whole_by_late_processes(ns, region):
    key, path = region
    a = Regions(SHM, ns)
    a.register("kept", key, 8, 8)
    for i in range(3000):  # churn: 6,000 records, and every region forgotten now and then
        a.register(f"r{i}", key, 0, 8)
        a.unregister(f"r{i}")
        if i % 500 == 499:
            a.unregister(None)
            a.register("kept", key, 8, 8)
    assert os.path.getsize(registry_path(SHM, ns)) < 64 * 200
    late = Regions(SHM, ns)
    assert late.status() == a.status() == [{"name": "kept", "key": key, "offset": 8, "byte_size": 8}]
    late.write("kept", 0, 8, np.ones(2, np.float32), "outputs[0].parameters")
    assert np.fromfile(path, np.float32, 2, offset=8).tolist() == [1, 1]


def test_descriptors_are_an_lru_of_open_regions(ns, objects):
    r = Regions(SHM, ns)
    keys = [objects(64) for _ in range(3 * OPEN_REGIONS)]
    for i, (key, _) in enumerate(keys):
        r.register(f"r{i}", key, 0, 64)
    base = _fds()
    for i in range(len(keys)):
        r.write(f"r{i}", 0, 4, np.full(1, i, np.float32), "outputs[0].parameters")
        assert _fds() <= base + OPEN_REGIONS
    for i, (_, path) in enumerate(keys):
        assert np.fromfile(path, np.float32, 1)[0] == i
    r.unregister(None)
    r.status()
    assert _fds() <= base


def test_threads_writing_through_a_small_lru_write_where_they_were_asked(ns, objects):
    """Handles closed by eviction while another thread writes through them are closed by their
    last user: no write goes to a reused descriptor."""
    r = Regions(SHM, ns, open_regions=2)
    keys = [objects(4096) for _ in range(12)]
    for i, (key, _) in enumerate(keys):
        r.register(f"r{i}", key, 0, 4096)
    errors = []

    def work(t):
        try:
            for k in range(200):
                i = (t * 7 + k) % len(keys)
                r.write(f"r{i}", 0, 4096, np.full(1024, i, np.float32), "outputs[0].parameters")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    for i, (_, path) in enumerate(keys):
        assert set(np.fromfile(path, np.float32).tolist()) == {i}


def test_remove_registry_removes_the_log_its_lock_and_a_rewrite_left_by_a_killed_process(ns, region):
    Regions(SHM, ns).register("r", region[0], 0, 8)
    open(registry_path(SHM, ns) + ".12345.tmp", "wb").close()
    remove_registry(SHM, ns)
    assert_no_leftovers(ns)
