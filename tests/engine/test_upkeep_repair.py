"""The integrity sweep's repair when the rebuild finds no room (engine/upkeep.py): the damaged
table is dropped from the manifest and its requests are computed; the engine goes on. A real
Engine in this process, over a temporary directory as its shm dir."""

from __future__ import annotations

import errno
import os

from posenc.engine import store
from posenc.engine.config import parse_config
from posenc.engine.engine_core import Engine, EngineOptions


def test_a_repair_without_room_drops_the_table_and_the_engine_goes_on(tmp_path, monkeypatch):
    tables = parse_config({"length": 64, "tables": [{"family": "rope", "spec": {"head_dim": 8}},
                                                     {"family": "sinusoidal", "spec": {"d_model": 8}}]})
    eng = Engine(tables, EngineOptions(shm_dir=str(tmp_path), namespace="repair", verify_interval_s=0))
    eng.acquire()
    try:
        eng.build_configured()
        eng.publish()
        victim, entry = next(iter(eng.tables.items()))
        os.unlink(tmp_path / entry["file"])            # damaged: unlinked by another process

        def no_room(*a, **k):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(eng, "_build", no_room)    # the file system is full when it is rebuilt
        report = eng.sweep.run(checksum=False)
        assert report["repaired"] == []
        m = store.read_manifest(str(tmp_path), "repair")
        assert victim not in m["tables"] and len(m["tables"]) == len(tables) - 1
    finally:
        eng.shutdown()
    assert os.listdir(tmp_path) == []
