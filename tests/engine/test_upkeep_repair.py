"""The integrity sweep (engine/process/upkeep.py) over a real Engine in this process, a temporary
directory as its shm dir: it checks the engine's own descriptors under the engine's lock, so it
finds nothing to repair while tables are built and evicted; a table it finds damaged is rebuilt
with its name, spec and pin; a repair without room drops the table and the engine goes on."""

from __future__ import annotations

import errno
import os
import threading
import time

import pytest

from posenc.engine.answer import pipeline
from posenc.engine.process.configured import parse_config
from posenc.engine.process.core import Engine, EngineOptions
from posenc.engine.store import segments as store

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
    try:
        sweeps, deadline = [], time.monotonic() + 60
        while eng.stats.last["evictions"] < 30 and time.monotonic() < deadline:
            sweeps.append(eng.sweep.run(checksum=len(sweeps) % 2 == 1))
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
