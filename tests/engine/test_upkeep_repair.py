"""The integrity sweep (engine/process/upkeep.py) over a real Engine in this process, a temporary
directory as its shm dir: it checks the engine's own descriptors under the engine's lock, so it
finds nothing to repair while tables are built and evicted; a table it finds damaged is rebuilt
with its name, spec and pin; a repair without room drops the table and the engine goes on."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from posenc.engine.answer import pipeline
from posenc.engine.process import core
from posenc.engine.process.configured import parse_config
from posenc.engine.process.core import Engine, EngineOptions
from posenc.engine.store import segments as store
from posenc.engine.tables.base import TableDef
from tests.waits import wait_for

CONFIG = {
    "length": 64,
    "tables": [
        {"name": "small-rope", "family": "rope", "spec": {"head_dim": 8}},
        {"family": "sinusoidal", "spec": {"d_model": 8}},
    ],
}


@pytest.fixture
def eng(tmp_path):
    tables = parse_config(CONFIG)
    e = Engine(
        tables,
        EngineOptions(
            shm_dir=str(tmp_path), namespace="repair", verify_interval_s=0, memory_budget_bytes=2**20
        ),
    )
    e.acquire()
    e.build_configured()
    e.publish()
    yield e
    e.shutdown()
    assert os.listdir(tmp_path) == []


def _unsealed_copy(eng, digest: str) -> None:
    """Stand in for damage nobody can do to a sealed segment: the table's descriptor swapped for
    an unsealed copy (what the sweep must notice)."""
    entry = eng.tables[digest]
    fd = os.memfd_create("fake", os.MFD_ALLOW_SEALING)
    os.write(fd, os.pread(eng.fds[digest], entry["nbytes"], 0))
    with eng.lock:
        os.close(eng.fds[digest])
        eng.fds[digest] = fd


def test_a_damaged_table_is_rebuilt_with_its_name_spec_and_pin(eng):
    digest = next(d for d, e in eng.tables.items() if e["name"] == "small-rope")
    was = dict(eng.tables[digest])
    _unsealed_copy(eng, digest)
    report = eng.sweep.run(checksum=True)
    assert report["repaired"] == ["small-rope"]
    now = eng.tables[digest]
    assert now["file"] != was["file"] and now["crc32"] == was["crc32"]
    assert (now["name"], now["spec"], now["pinned"]) == (was["name"], was["spec"], True)
    assert store.check_sealed(eng.fds[digest], now["nbytes"]) is None
    assert {e["name"]: e["stored"] for e in eng.manifest()["named"]}["small-rope"] is True
    assert eng.sweep.run(checksum=True)["repaired"] == []


def test_the_sweep_repairs_nothing_under_eviction_churn(eng):
    """Builds and evictions of on-demand tables race the sweep (a budget that holds a few): it
    works from the engine's state under its lock, so no table evicted or grown meanwhile is
    taken for a damaged one."""
    stop = threading.Event()

    def churn():
        theta = 100.0
        while not stop.is_set():
            theta += 1.0
            eng.ensure(_key(theta), 64)

    threads = [threading.Thread(target=churn) for _ in range(2)]
    for t in threads:
        t.start()
    sweeps = []

    def sweep() -> bool:  # one sweep more, until 30 evictions happened and more than 30 sweeps ran
        sweeps.append(eng.sweep.run(checksum=len(sweeps) % 2 == 1))
        return eng.stats.last["evictions"] >= 30 and len(sweeps) > 30

    try:
        wait_for(
            sweep,
            120,
            0,
            "30 evictions by the churn and more than 30 sweeps",
            seen=lambda: (eng.stats.last, len(sweeps)),
        )
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert eng.stats.last["evictions"] >= 30 and len(sweeps) > 30, (eng.stats.last, len(sweeps))
    assert [r for s in sweeps for r in s["repaired"]] == [] and eng.sweep.repairs == 0


def _key(theta: float) -> str:
    return pipeline.parse("rope", {"head_dim": 16, "rope_theta": theta, "positions": [0]}).table.key


def test_a_repair_without_room_drops_the_table_and_the_engine_goes_on(eng, tmp_path, monkeypatch):
    victim = next(iter(eng.tables))
    _unsealed_copy(eng, victim)

    def no_room(*a, **k):
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(eng, "_build", no_room)  # no memory left when it is rebuilt
    report = eng.sweep.run(checksum=False)
    assert report["repaired"] == []
    m = store.read_manifest(str(tmp_path), "repair")
    assert victim not in m["tables"] and len(m["tables"]) == 1 and victim not in eng.fds
    assert [e["stored"] for e in m["named"]].count(False) == 1  # still known by name: computed


def test_an_on_demand_table_larger_than_memory_is_refused_before_anything_is_evicted(tmp_path):
    """Issue #23's item 6: a table larger than the memory available used to empty the on-demand
    cache to make room, then fail anyway. Now it is refused first, and the cache stays."""
    from posenc.engine.core.errors import NotStored
    from posenc.engine.process.upkeep import available_bytes

    e = Engine(
        parse_config(CONFIG),
        EngineOptions(
            shm_dir=str(tmp_path), namespace="room", verify_interval_s=0, memory_budget_bytes=1 << 50
        ),
    )
    e.acquire()
    try:
        e.build_configured()
        e.publish()
        small, _ = e.ensure(_key(5.0), 64)
        head_dim = 2 * (available_bytes() // (2 * 131072 * 4) + 2)  # cos + sin past all memory
        huge = pipeline.parse("rope", {"head_dim": head_dim, "positions": [0]}).table.key
        with pytest.raises(NotStored, match="exceeds the memory available"):
            e.ensure(huge, 131072)
        assert small in e.tables and e.stats.last["evictions"] == 0
    finally:
        e.shutdown()


def test_a_paced_checksum_is_the_checksum():
    """paced_crc32 reads in slices with pauses; its sum is zlib's of the whole, at every length
    around a slice's edge, and a stop ends it with no sum."""
    import random
    import zlib

    from posenc.engine.process import upkeep

    rng = random.Random(7)
    for n in (0, 1, upkeep.SLICE - 1, upkeep.SLICE, upkeep.SLICE + 1, 3 * upkeep.SLICE + 5):
        buf = rng.randbytes(n)
        assert upkeep.paced_crc32(buf, threading.Event()) == zlib.crc32(buf) & 0xFFFFFFFF
    stopped = threading.Event()
    stopped.set()
    assert upkeep.paced_crc32(rng.randbytes(2 * upkeep.SLICE), stopped) is None


def _changed_sealed_copy(eng, digest: str) -> None:
    """A segment sealed as the engine seals one, whose bytes differ from its entry's in one place:
    only the checksum can tell (no one can do this to the engine's own segment)."""
    import fcntl

    entry = eng.tables[digest]
    data = bytearray(os.pread(eng.fds[digest], entry["nbytes"], 0))
    data[len(data) // 2] ^= 0x40
    fd = os.memfd_create("changed", os.MFD_ALLOW_SEALING)
    os.write(fd, bytes(data))
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, store.SEALS)
    assert store.check_sealed(fd, entry["nbytes"]) is None
    with eng.lock:
        os.close(eng.fds[digest])
        eng.fds[digest] = fd


@pytest.fixture
def patient_checksummer(monkeypatch):
    """The checksummer's answer awaited 120 s (a hang's bound), not CRC_WAIT_S: it runs at
    SCHED_IDLE, and on a machine whose cores are busy it may not run for seconds; past its
    deadline the engine kills it and sums alone, rightly, but these tests are about it summing."""
    from posenc.engine.process import upkeep

    monkeypatch.setattr(upkeep, "CRC_WAIT_S", 120.0)


def _periodic_sweep(eng) -> dict:
    """One periodic sweep, started as the engine's main loop starts it (tick), waited for."""
    eng.sweep.last = {}
    before = eng.sweep._thread
    eng.sweep.verify_interval_s = 0.01

    def started() -> bool:  # the tick starts one once the interval has passed since the last
        eng.sweep.tick()
        return eng.sweep._thread is not before

    wait_for(started, 60, 0.005, "the tick to start a periodic sweep")
    eng.sweep.verify_interval_s = 0  # no more
    wait_for(lambda: eng.sweep.last, 300, 0.01, "the periodic sweep's report")
    assert eng.sweep.last["periodic"] is True
    return eng.sweep.last


def test_the_periodic_sweep_sums_in_an_idle_child_and_repairs(eng, patient_checksummer):
    """The main loop's tick starts the periodic sweep in a thread of its own, and the checksummer,
    a child process at SCHED_IDLE, sums the segments: it finds the changed bytes by their checksum
    and the table is rebuilt. At shutdown the child ends."""
    digest = next(d for d, e in eng.tables.items() if e["name"] == "small-rope")
    was = dict(eng.tables[digest])
    _changed_sealed_copy(eng, digest)
    assert _periodic_sweep(eng)["repaired"] == ["small-rope"]
    proc = eng.sweep.summer.proc
    assert proc is not None and proc.poll() is None
    assert os.sched_getscheduler(proc.pid) == os.SCHED_IDLE
    with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
        assert b"posenc.engine.process.checksummer" in f.read()
    assert eng.tables[digest]["file"] != was["file"] and eng.tables[digest]["crc32"] == was["crc32"]
    assert eng.sweep.run(checksum=True)["repaired"] == []
    eng.sweep.stop()
    assert proc.poll() is not None and eng.sweep.summer.proc is None


def test_without_its_checksummer_the_sweep_sums_itself_and_starts_another(eng, patient_checksummer):
    """A checksummer killed between sweeps: that sweep sums the segments in its own thread,
    paced, and still finds the damage; the next tick starts a new checksummer."""
    import signal

    _periodic_sweep(eng)
    first = eng.sweep.summer.proc
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    eng.sweep.summer.proc = None  # as after start() failed: none runs, none is started this sweep
    eng.sweep.summer.start = lambda: False
    digest = next(d for d, e in eng.tables.items() if e["name"] == "small-rope")
    _changed_sealed_copy(eng, digest)
    assert _periodic_sweep(eng)["repaired"] == ["small-rope"]
    del eng.sweep.summer.start
    _periodic_sweep(eng)
    again = eng.sweep.summer.proc
    assert again is not None and again.pid != first.pid and again.poll() is None


def test_an_ask_waiting_on_a_build_whose_table_is_evicted_meanwhile_builds_it_again(eng):
    """Two asks of one table: the second waits on the first's build. When that build ends well but
    its table is gone before the waiter looks (evicted for a third ask's room, as in the churn
    above), the waiter asks again and builds it: no failure (it raised 'build failed', which the
    churn test met once in a few hundred runs)."""
    key = _key(7.0)
    digest = TableDef.from_key(key, eng.opts.length).digest
    other = core._Build()  # the first ask's build, in flight
    with eng.lock:
        eng.inflight[digest] = other
    got = {}

    def second():
        try:
            got["entry"] = eng.ensure(key, 64)
        except Exception as e:  # (the failure the test is about)
            got["error"] = e

    waiter = threading.Thread(target=second)
    waiter.start()
    wait_for(lambda: other._cond._waiters, 60, 0.001, "the second ask waiting on the first's build")
    with eng.lock:  # the first build ended well, and its table was evicted before the waiter looked
        eng.inflight.pop(digest)
    other.set()
    waiter.join(60)
    assert not waiter.is_alive() and "error" not in got, got
    assert got["entry"][0] == digest and digest in eng.tables
