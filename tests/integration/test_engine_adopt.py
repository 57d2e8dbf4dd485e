"""A restarted engine adopts the tables ``posenc serve``'s keeper held for it (engine/process/keeper.py)
and builds only the rest: real servers, their engine killed with SIGKILL. Whatever was adopted
or built, every answer is checked against the float64 reference, and nothing is left in /dev/shm
afterwards. A standalone engine has no keeper: its successor builds everything and removes what
the dead one left in /dev/shm."""

from __future__ import annotations

import os
import signal

from posenc.engine.answer.pipeline import compute
from posenc.engine.reader.client import Client
from tests.children.bits import bits_equal
from tests.integration.engine_cases import LOOP_CASES, SMALL_CONFIG, seg_files
from tests.procs import wait_for
from tests.shm import SHM_DIR, assert_no_leftovers, held_segments, shm_files

ON_DEMAND = {"head_dim": 8, "rope_theta": 321.0}


def _answers_are_exact(c: Client) -> None:
    assert c.attach_all(verify=True) == len(c.manifest(force=True)["tables"])
    for family, body in LOOP_CASES:
        assert bits_equal(c.lookup(family, body), compute(family, body)), (family, body)
    body = {**ON_DEMAND, "positions": [0, 3, 4095, 9000]}
    assert bits_equal(c.lookup("rope", body), compute("rope", body))


def _restarted(server, c: Client, gen: int) -> dict:
    wait_for(
        lambda: (c.manifest(force=True) or {}).get("generation", gen) != gen, 60, 0.02, "the restarted engine"
    )
    return c.manifest(force=True)


def test_serve_keeps_the_tables_and_a_restarted_engine_adopts_them_all(ns, procs):
    server = procs.serve(SMALL_CONFIG, workers=1, namespace=ns)
    c = Client(namespace=ns)
    c.table("rope", ON_DEMAND)  # an on-demand table too
    old = c.manifest(force=True)
    engine = server.engine_pid()
    want = sorted(e["file"] for e in old["tables"].values())
    # (the engine may hold a just-built segment twice for a moment, until its build lets go of it)
    names = wait_for(
        lambda: (n := held_segments(engine, ns)) == want and n, 10, 0.05, "the engine's segments"
    )
    assert names == want
    assert held_segments(server.pid, ns) == names  # serve's keeper holds each table too
    os.kill(engine, signal.SIGKILL)
    new = _restarted(server, c, old["generation"])
    assert new["generation"] > old["generation"]
    assert set(new["tables"]) == set(old["tables"])  # the on-demand table is back too
    for digest, e in new["tables"].items():
        was = old["tables"][digest]
        assert e["adopted"] and (e["file"], e["inode"], e["crc32"]) == (
            was["file"],
            was["inode"],
            was["crc32"],
        )
        assert e["pinned"] == was["pinned"] and e.get("spec") == was.get("spec") and e["name"] == was["name"]
    assert new["stats"]["builds"] == 0 and new["stats"]["adopted"] == len(old["tables"]), new["stats"]
    assert f"adopted {len(old['tables'])} table(s)" in server.stderr()
    assert held_segments(server.engine_pid(), ns) == names
    _answers_are_exact(Client(namespace=ns))
    assert server.stop() == 0
    assert_no_leftovers(ns)


def test_a_table_evicted_before_the_kill_is_not_adopted_and_the_keeper_let_it_go(ns, procs):
    """The keeper holds what the engine holds: an eviction reaches it, so a dead engine's
    successor does not bring back a table the budget had dropped, and its memory is free."""
    server = procs.serve(SMALL_CONFIG, workers=1, namespace=ns, args=["--memory-budget", str(6 * 2**20)])
    c = Client(namespace=ns)
    first = c.table("rope", {"head_dim": 8, "rope_theta": 1.5})
    for theta in (2.5, 3.5, 4.5):  # each 4 MiB: every new one evicts the one before
        c.table("rope", {"head_dim": 8, "rope_theta": theta})
    dropped = first.segment.entry["file"]
    wait_for(
        lambda: dropped not in held_segments(server.pid, ns), 10, 0.02, "the keeper to drop the evicted table"
    )
    old = c.manifest(force=True)
    os.kill(server.engine_pid(), signal.SIGKILL)
    new = _restarted(server, c, old["generation"])
    assert set(new["tables"]) == set(old["tables"]) and dropped not in {
        e["file"] for e in new["tables"].values()
    }
    assert new["stats"]["builds"] == 0
    assert server.stop() == 0
    assert_no_leftovers(ns)


def test_a_standalone_engine_killed_leaves_nothing_to_adopt_and_its_successor_cleans_up(ns, procs):
    eng = procs.engine(SMALL_CONFIG, ns)
    c = eng.client()
    c.table("rope", ON_DEMAND)
    old = eng.manifest()
    assert eng.kill9() != 0
    assert shm_files(ns) == sorted(
        f"{ns}.{n}" for n in ("lock", "manifest.json", "manifest.log", "sock")
    )  # no table
    stale = os.path.join(SHM_DIR, f"{ns}.seg.1.0123456789abcdef0123.tmp")  # an older version's leftover
    with open(stale, "wb") as f:
        f.write(b"half a table")
    eng = procs.engine(SMALL_CONFIG, ns)
    new = eng.manifest()
    assert new["generation"] > old["generation"] and not any(e.get("adopted") for e in new["tables"].values())
    assert len(seg_files(eng)) == len(new["tables"]) == len(SMALL_CONFIG["tables"]) + 1
    assert not os.path.exists(stale)
    _answers_are_exact(eng.client())
    assert eng.stop() == 0
    assert_no_leftovers(ns)
