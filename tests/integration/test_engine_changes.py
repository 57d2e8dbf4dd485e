"""The manifest's changes (docs/shm-format.md, format 2) against a real engine: each build or
eviction is one line appended to the table log and one sequence number; ``changes`` answers
exactly the tables changed since a reader's ``seq`` (entries, or null for an evicted one), resets
for another generation or an unknown ``seq``; a reader that applies them holds the manifest the
engine holds, and the files replay to it too."""

from __future__ import annotations

import os

from tests.integration.engine_cases import SMALL_CONFIG
from tests.procs import wait_for
from tests.shm import SHM_DIR, read_manifest


def _key(c, theta: float) -> object:
    return c.resolve("rope", {"head_dim": 8, "rope_theta": theta, "positions": [0]}).table


def _sans_use(tables: dict) -> dict:
    return {d: {k: v for k, v in e.items() if k != "last_used"} for d, e in tables.items()}


def test_changes_are_the_builds_and_evictions_since_a_seq_and_a_reader_applies_them(ns, procs):
    eng = procs.engine(SMALL_CONFIG, ns, args=["--memory-budget", "600000"])  # a few small on-demand tables
    c = eng.client()
    m0 = c.wait_ready()
    log = os.path.join(SHM_DIR, f"{ns}.manifest.log")
    size0 = os.stat(log).st_size
    built = []
    for k in range(12):  # each evicts an older one past the budget
        t = _key(c, 100.0 + k)
        c._ensure(t, 16)
        built.append(t.digest)
    full = c.call({"op": "manifest"})["manifest"]
    assert full["generation"] == m0["generation"] and full["seq"] > m0["seq"]
    # one line per change, appended: the log grew by less than a rewrite of every table per build
    assert os.stat(log).st_size - size0 < (full["seq"] - m0["seq"]) * 2000
    r = c.call({"op": "changes", "since": m0["seq"], "generation": m0["generation"]})
    assert r["ok"] and not r.get("reset") and r["seq"] == full["seq"]
    stored = {d for d in built if d in full["tables"]}
    evicted = set(built) - stored
    assert stored and evicted, (stored, evicted)
    assert {d for d, e in r["tables"].items() if e is not None} == stored
    assert {d for d, e in r["tables"].items() if e is None} == evicted
    assert all(r["tables"][d] == full["tables"][d] for d in stored)
    last = c.call({"op": "changes", "since": full["seq"], "generation": full["generation"]})
    assert last["tables"] == {} and "named" not in last
    for since, gen in (
        (full["seq"] + 1, full["generation"]),
        (0, full["generation"] + 1),
        ("0", full["generation"]),
    ):
        assert c.call({"op": "changes", "since": since, "generation": gen})["reset"] is True
    # the client applied them (its manifest is the engine's, by the changes, not read whole)
    m, changed = c._fetch(m0)
    assert changed == set(built) and m["tables"] == full["tables"] and m["seq"] == full["seq"]
    assert wait_for(lambda: c.manifest()["seq"] == full["seq"], 5, 0.02, "the client's refresh")
    assert c.manifest()["tables"] == full["tables"]
    # and the files, replayed, say the same (but for last_used: bookkeeping, not a change)
    files = read_manifest(ns)
    assert _sans_use(files["tables"]) == _sans_use(full["tables"]) and files["seq"] == full["seq"]
    assert files["stats"]["builds"] == full["stats"]["builds"] and files["stats"]["evictions"] >= len(evicted)
    assert eng.stop() == 0


def test_an_unlinked_table_log_is_written_again_at_the_next_change(ns, procs):
    eng = procs.engine(SMALL_CONFIG, ns)
    c = eng.client()
    c.wait_ready()
    log = os.path.join(SHM_DIR, f"{ns}.manifest.log")
    os.unlink(log)
    c._ensure(_key(c, 7.0), 16)
    assert os.path.exists(log)
    assert _sans_use(read_manifest(ns)["tables"]) == _sans_use(
        c.call({"op": "manifest"})["manifest"]["tables"]
    )
    assert eng.stop() == 0
