"""A restarting engine adopts what a dead engine left intact and builds only the rest:
real engines, killed with SIGKILL; a segment is damaged, the manifest's code digest changed, the
config resized in between. Whatever was adopted or rebuilt, every answer is checked against the
float64 reference, and nothing is left in /dev/shm afterwards."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from posenc.engine.compute import compute
from tests.children.bits import bits_equal
from tests.integration.engine_cases import LOOP_CASES, SMALL_CONFIG
from tests.shm import SHM_DIR, assert_no_leftovers, shm_files

ON_DEMAND = {"head_dim": 8, "rope_theta": 321.0}


def _answers_are_exact(eng) -> None:
    c = eng.client()
    assert c.attach_all(verify=True) == len(eng.manifest()["tables"])
    for family, body in LOOP_CASES:
        assert bits_equal(c.lookup(family, body), compute(family, body)), (family, body)
    body = {**ON_DEMAND, "positions": [0, 3, 4095, 9000]}
    assert bits_equal(c.lookup("rope", body), compute("rope", body))


def _dead_engine(procs, ns, config=SMALL_CONFIG) -> dict:
    """An engine with the configured tables and one on-demand table, killed: its manifest."""
    eng = procs.engine(config, ns)
    eng.client().table("rope", ON_DEMAND)
    m = eng.manifest()
    assert eng.kill9() != 0
    assert shm_files(ns), "kill -9 left nothing to adopt"
    return m


def _flip_a_byte(path: str, offset: int) -> None:
    os.chmod(path, 0o600)
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))
    os.chmod(path, 0o400)


def test_intact_tables_are_adopted_a_damaged_one_rebuilt_and_leftovers_removed(ns, procs):
    old = _dead_engine(procs, ns)
    victim = next(e for e in old["tables"].values() if e["family"] == "sinusoidal")
    _flip_a_byte(os.path.join(SHM_DIR, victim["file"]), victim["nbytes"] // 2)
    tmp = os.path.join(SHM_DIR, f"{ns}.seg.{old['generation']}.0123456789abcdef0123.tmp")
    with open(tmp, "wb") as f:   # a build the dead engine had not finished
        f.write(b"half a table")

    eng = procs.engine(SMALL_CONFIG, ns)
    new = eng.manifest()
    assert new["generation"] > old["generation"]
    assert set(new["tables"]) == set(old["tables"])    # the on-demand table is back too
    for digest, e in new["tables"].items():
        was = old["tables"][digest]
        if was["file"] == victim["file"]:
            assert not e.get("adopted") and e["file"] != victim["file"] and e["crc32"] == victim["crc32"]
        else:
            assert e["adopted"] and e["file"] == was["file"] and e["inode"] == was["inode"], e
            assert e["pinned"] == was["pinned"] and e.get("spec") == was.get("spec")
    assert new["stats"]["builds"] == 1 and new["stats"]["adopted"] == len(old["tables"]) - 1, new["stats"]
    assert "its checksum does not match" in eng.stderr()
    assert not os.path.exists(tmp) and not os.path.exists(os.path.join(SHM_DIR, victim["file"]))
    _answers_are_exact(eng)
    assert eng.stop() == 0
    assert_no_leftovers(ns)


def test_tables_of_other_table_code_are_never_adopted(ns, procs):
    old = _dead_engine(procs, ns)
    path = os.path.join(SHM_DIR, f"{ns}.manifest.json")
    m = json.loads(Path(path).read_bytes())
    m["built_by"] = "0" * 20        # as an engine of another posenc version would have written it
    with open(path, "w") as f:
        json.dump(m, f)

    eng = procs.engine(SMALL_CONFIG, ns)
    new = eng.manifest()
    assert not any(e.get("adopted") for e in new["tables"].values())
    assert not {e["file"] for e in new["tables"].values()} & {e["file"] for e in old["tables"].values()}
    assert "other table code built it" in eng.stderr()
    assert len(shm_files(ns)) == len(new["tables"]) + 3   # segments, manifest, socket, lock: nothing old
    _answers_are_exact(eng)
    assert eng.stop() == 0
    assert_no_leftovers(ns)


def test_a_table_the_new_config_sizes_differently_is_rebuilt_at_its_new_length(ns, procs):
    old = _dead_engine(procs, ns)
    resized = json.loads(json.dumps(SMALL_CONFIG))
    sinus = next(t for t in resized["tables"] if t["family"] == "sinusoidal")
    sinus["length"] = 2 * resized["length"]

    eng = procs.engine(resized, ns)
    new = eng.manifest()
    for digest, e in new["tables"].items():
        assert e.get("adopted", False) == (e["family"] != "sinusoidal"), e
        if e["family"] == "sinusoidal":
            assert e["length"] == sinus["length"] and e["file"] != old["tables"][digest]["file"]
    assert "the config now sizes it" in eng.stderr()
    _answers_are_exact(eng)
    assert eng.stop() == 0
    assert_no_leftovers(ns)


@pytest.mark.parametrize("damage", ["unlinked", "replaced", "made writable"])
def test_a_segment_that_is_not_the_one_recorded_is_not_adopted(ns, procs, damage):
    old = _dead_engine(procs, ns)
    victim = next(e for e in old["tables"].values() if e["family"] == "rope" and e["pinned"])
    path = os.path.join(SHM_DIR, victim["file"])
    data = Path(path).read_bytes()
    if damage == "unlinked":
        os.unlink(path)
    elif damage == "replaced":     # the same bytes under the name, but another file
        os.unlink(path)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, 0o400)
    else:
        os.chmod(path, 0o600)

    eng = procs.engine(SMALL_CONFIG, ns)
    new = eng.manifest()
    entry = next(e for e in new["tables"].values() if e["key"] == victim["key"])
    assert not entry.get("adopted") and entry["file"] != victim["file"]
    assert sum(1 for e in new["tables"].values() if e.get("adopted")) == len(old["tables"]) - 1
    _answers_are_exact(eng)
    assert eng.stop() == 0
    assert_no_leftovers(ns)
