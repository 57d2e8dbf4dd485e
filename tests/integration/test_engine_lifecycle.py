"""The engine's life: a manifest only once every configured table is in it, readers that survive
kill -9 and a restart that reclaims, signals that remove every segment, a second engine refused,
an invalid config refused with the field named.
"""

from __future__ import annotations

import os
import re
import signal

import pytest

from posenc.engine.answer.pipeline import compute
from posenc.engine.reader.client import EngineUnavailable
from tests.children.bits import bits_equal
from tests.integration.engine_cases import LLAMA3, LOOP_CASES, SMALL_CONFIG, engine_stats, reader, seg_files
from tests.procs import wait_for
from tests.shm import SHM_DIR, assert_no_leftovers, mapped_segments, read_manifest

# ---------------------------------------------------------------------------------------------
# Start-up: readers must never see a half-ready engine

# Six tables of 65536 × 32 float32 cos/sin: a start that takes long enough (tenths of a second)
# to look at the engine while it builds.
SLOW_CONFIG = {
    "length": 65536,
    "tables": [
        {"family": "rope", "spec": {"head_dim": 64, "rope_theta": 1000.0 + i}, "name": f"slow-{i}"}
        for i in range(6)
    ],
}


def _poll_start(eng, ns, during=lambda: None) -> list[int]:
    """Table counts of every manifest version seen while the engine starts (polled fast), until
    the engine says it started or a manifest holds every configured table."""
    seen, last = [], [None]

    def step() -> bool:
        st = None
        try:
            st = os.stat(os.path.join(SHM_DIR, f"{ns}.manifest.log"))  # (every change: the table log)
        except FileNotFoundError:
            pass
        if st is not None and (st.st_ino, st.st_mtime_ns) != last[0]:
            m = read_manifest(ns)
            if m is not None:
                last[0] = (st.st_ino, st.st_mtime_ns)
                seen.append(len(m["tables"]))
                if "generation" in eng.stderr() or len(m["tables"]) >= len(SLOW_CONFIG["tables"]):
                    return True
        during()
        return False

    def check() -> None:
        assert eng.alive(), eng.logs()

    wait_for(
        step, 120, 0.0005, "the engine's start (every configured table in its manifest)", check, lambda: seen
    )
    return seen


def test_manifest_appears_only_when_every_configured_table_is_in_it(ns, procs):
    """The manifest is written last (docs/design.md: the manifest is rewritten last, by rename): a reader
    that attaches as soon as it sees one (Client.wait_ready) must find every configured table,
    or it asks the engine to build a configured table on demand."""
    eng = procs.engine(SLOW_CONFIG, ns, ready=False)
    seen = _poll_start(eng, ns)
    eng.wait_ready()
    assert seen and seen[0] == len(SLOW_CONFIG["tables"]), (
        f"manifest versions seen during start held {seen} of {len(SLOW_CONFIG['tables'])} configured tables"
    )
    assert eng.stop() == 0


def test_configured_table_asked_for_during_start_is_built_once_and_stays_pinned(ns, procs):
    eng = procs.engine(SLOW_CONFIG, ns, ready=False)
    c = eng.client()
    sock = os.path.join(SHM_DIR, f"{ns}.sock")
    from posenc.engine.answer import pipeline

    key = pipeline.parse("rope", {"head_dim": 64, "rope_theta": 1000.0, "positions": [0]}).table.key
    ask = {"op": "ensure", "table": key}
    replies = []

    def during():
        if not replies and os.path.exists(sock):
            try:
                replies.append(c.call(ask))
            except EngineUnavailable:  # bound but not listening yet: ask again on the next poll
                pass

    _poll_start(eng, ns, during)
    during()  # the socket may come up with the complete manifest, after the last poll
    eng.wait_stderr("generation", 60)  # the engine's "generation G: N tables ..." start line
    assert replies and replies[0]["ok"], replies
    digest = replies[0]["digest"]
    entry = eng.manifest()["tables"][digest]
    builds = engine_stats(eng)["builds"]
    assert entry["pinned"] and entry["length"] == 65536, (
        f"the configured table became the on-demand one: pinned={entry['pinned']} length={entry['length']}"
    )
    assert builds[digest] == 1, f"configured table built {builds[digest]} times"
    assert sum(e["pinned"] for e in eng.manifest()["tables"].values()) == len(SLOW_CONFIG["tables"])
    assert eng.stop() == 0


# ---------------------------------------------------------------------------------------------
# Engine death, restart and shutdown


def _last_iter(r) -> dict:
    lines = [m for m in r.json_lines() if "i" in m]
    return lines[-1] if lines else {"i": 0, "gen": None}


def test_kill9_readers_keep_reading_and_a_new_engine_takes_over(ns, procs, tmp_path):
    eng_a = procs.engine(SMALL_CONFIG, ns)
    gen_a = eng_a.manifest()["generation"]
    files_a = seg_files(eng_a, gen_a)
    assert files_a
    stop = tmp_path / "stop"
    readers = [reader(procs, ns, "loop", name=f"loop{i}", cases=LOOP_CASES, stop=str(stop)) for i in range(3)]
    for r in readers:
        r.wait_json(lambda m: m.get("i", 0) >= 3 and m["gen"] == gen_a, timeout=60, what="3 reads of gen A")

    # kill -9: no cleanup runs; the tables live on in the readers' mappings; readers must not notice.
    eng_a.kill9()
    assert all(set(files_a) <= set(mapped_segments(r.pid, ns)) for r in readers)
    for r in readers:
        n = _last_iter(r)["i"]  # (read after the kill: every later round was read after it too)
        r.wait_json(lambda m, n=n: m.get("i", 0) >= n + 5, timeout=60, what="5 reads after the engine died")
        assert r.alive(), r.logs()

    # A new engine on the namespace (standalone: no keeper held the tables) builds them again,
    # under a new generation. Compared by digest (a segment's name ends in its table's, a repaired
    # one's in DIGEST-REV), not by descriptor count: while the readers reattach, B holds a
    # duplicate of each descriptor it is sending them (core.segment_fds), which CI once counted.
    eng_b = procs.engine(SMALL_CONFIG, ns)
    m_b = eng_b.manifest()
    gen_b = m_b["generation"]
    assert gen_b != gen_a and gen_b > gen_a

    def digests(files: list[str]) -> set[str]:
        return {f.rsplit(".", 1)[1].split("-")[0] for f in files}

    assert digests(files_a) <= digests(seg_files(eng_b, gen_b))
    assert not any(e.get("adopted") for e in m_b["tables"].values())

    # Readers move to the new generation and keep verifying.
    for r in readers:
        m = r.wait_json(lambda m: m.get("gen") == gen_b, timeout=30, what="a read of generation B")
        r.wait_json(lambda m, i=m["i"]: m.get("i", 0) >= i + 3, timeout=30, what="reads of generation B")
    # New lookups work: a fresh client and an on-demand table on the new engine.
    c = eng_b.client()
    c.wait_ready(10)
    assert c.generation == gen_b
    new_req = {"head_dim": 8, "rope_theta": 777.0, "positions": [0, 3, 200000]}
    assert bits_equal(c.lookup("rope", new_req), compute("rope", new_req))

    stop.touch()
    for r in readers:
        r.expect_exit(0, timeout=30)
        done = r.json_lines()[-1]
        assert done["gens"] == [gen_a, gen_b], done
    assert eng_b.stop() == 0
    assert_no_leftovers(ns)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_removes_every_segment(ns, procs, tmp_path, sig):
    eng = procs.engine(SMALL_CONFIG, ns)
    go = tmp_path / "go"
    # A reader maps a configured table and an on-demand one, then reads them again after the
    # engine is gone: unlinked files stay readable through an existing mapping.
    r = reader(
        procs,
        ns,
        "hold",
        specs=[{"head_dim": 64}, {"head_dim": 8, "rope_theta": 999.0}],
        rows=[0, 1, 4095],
        go=str(go),
    )
    r.wait_json(lambda m: m.get("mapped"), timeout=60)
    m = eng.manifest()
    assert any(not e["pinned"] for e in m["tables"].values()), "the on-demand table is missing"
    assert len(seg_files(eng)) == len(m["tables"])
    assert eng.stop(sig) == 0, eng.logs()
    assert_no_leftovers(ns)
    go.touch()
    r.expect_exit(0)


def _bad_rope_factor():
    return {
        "tables": [
            {"family": "rope", "spec": {**LLAMA3, "rope_scaling": {**LLAMA3["rope_scaling"], "factor": 0.5}}}
        ]
    }


@pytest.mark.parametrize(
    "cfg, field",
    [
        (_bad_rope_factor(), "tables.0.spec.rope_scaling.factor"),
        (
            {"tables": [{"family": "rope", "spec": {"head_dim": 8}}, {"family": "xpos", "spec": {}}]},
            "tables.1.family",
        ),
        (
            {"tables": [{"family": "alibi", "spec": {"num_heads": 4}, "dtypes": ["float64"]}]},
            "tables.0.dtypes.0",
        ),
        ({"tables": [{"family": "rope", "spec": {"head_dim": 8}, "dtypes": [None]}]}, "tables.0.dtypes.0"),
        ({"length": 0, "tables": []}, "length"),
    ],
    ids=["rope_factor", "unknown_family", "dtype", "null_dtype", "length"],
)
@pytest.mark.parametrize("via_cli", [False, True], ids=["engine_main", "cli"])
def test_invalid_config_stops_engine_with_status_2(ns, procs, cfg, field, via_cli):
    eng = procs.engine(cfg, ns, ready=False, via_cli=via_cli)
    rc = eng.wait(30)
    err = eng.stderr()
    assert rc == 2, eng.logs()
    assert re.search(rf"(^|\W){re.escape(field)}:", err), f"{field!r} not named in: {err}"
    assert "Traceback" not in err
    assert_no_leftovers(ns)


# ---------------------------------------------------------------------------------------------
# Permissions
