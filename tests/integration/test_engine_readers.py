"""Unrelated reader processes (tests/children/reader.py) get the library's output bit for bit from
a real engine, concurrently, without writing or removing anything; on-demand builds happen once.

Every test starts the engine as a subprocess under its own namespace in /dev/shm; the reference
for every value a reader gets is ``posenc.engine.answer.pipeline.compute``, compared bit for bit (same
dtype, shape and bytes). After every test nothing of its namespace remains (autouse fixture in
tests/integration/conftest.py).
"""

from __future__ import annotations

import json
import signal

import numpy as np
import pytest

from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from tests.integration.engine_cases import (
    ALL_CASES,
    FULL_CONFIG,
    LOOP_CASES,
    ON_DEMAND_LENGTH,
    SMALL_CONFIG,
    _diff,
    engine_stats,
    reader,
    run_together,
)
from tests.shm import snapshot

# ---------------------------------------------------------------------------------------------
# Readers get the library's output, bit for bit


def test_unrelated_reader_gets_library_output_bit_for_bit(ns, procs, tmp_path):
    eng = procs.engine(FULL_CONFIG, ns)
    configured = engine_stats(eng)["builds"]
    out = tmp_path / "lookups.npz"
    r = reader(procs, ns, "lookup", cases=ALL_CASES, out=str(out))
    r.expect_exit(0, timeout=60)
    summary = r.json_lines()[-1]
    assert summary["generation"] == eng.manifest()["generation"]
    got = np.load(out)
    problems = []
    for i, (fam, req) in enumerate(ALL_CASES):
        try:
            want = compute(fam, req)
        except SpecError as e:
            if summary["errors"].get(str(i)) != list(e.loc):
                problems.append(
                    f"case {i} {fam}: library refuses at {e.loc}, reader got {summary['errors'].get(str(i))}"
                )
            continue
        if str(i) in summary["errors"]:
            problems.append(f"case {i} {fam}: reader refused at {summary['errors'][str(i)]}, library answers")
            continue
        mine = {k.split("/", 1)[1]: got[k] for k in got.files if k.split("/", 1)[0] == str(i)}
        want = {k: (np.float64(v) if isinstance(v, float) else v) for k, v in want.items()}
        mine = {k: (np.float64(v) if v.ndim == 0 else v) for k, v in mine.items()}
        d = _diff(f"case {i} {fam} {json.dumps(req)[:120]}", mine, want)
        if d:
            problems.append(d)
    assert not problems, "\n".join(problems)
    # Served from the configured tables: the reader made the engine build nothing.
    assert engine_stats(eng)["builds"] == configured
    assert all(n == 1 for n in configured.values())
    assert eng.stop() == 0


@pytest.mark.slow
def test_8_concurrent_readers(ns, procs, tmp_path):
    eng = procs.engine(SMALL_CONFIG, ns)
    configured = engine_stats(eng)["builds"]
    go, stop = tmp_path / "go", tmp_path / "stop"
    readers = [
        reader(procs, ns, "read_for", name=f"reader{i}", cases=LOOP_CASES, go=str(go), stop=str(stop))
        for i in range(8)
    ]
    results = run_together(readers, go, stop)
    assert all(res["n"] >= 1 for res in results), results
    # They really overlapped: every reader was reading while every other one was.
    assert max(res["start"] for res in results) < min(res["end"] for res in results), results
    gen = eng.manifest()["generation"]
    assert {res["generation"] for res in results} == {gen}
    assert engine_stats(eng)["builds"] == configured
    assert eng.stop() == 0


def test_two_readers_asking_for_one_new_spec_cause_one_build(ns, procs, tmp_path):
    eng = procs.engine(SMALL_CONFIG, ns)
    before = engine_stats(eng)["builds"]
    go = tmp_path / "go"
    # head_dim 128 at 131072 rows: a build long enough (tenths of a second) for both asks to overlap
    spec = {"head_dim": 128, "rope_theta": 123456.0}
    rs = [reader(procs, ns, "ask", name=f"asker{i}", spec=spec, go=str(go)) for i in range(2)]
    res = run_together(rs, go)
    assert all(x["ok"] for x in res), res
    assert res[0]["digest"] == res[1]["digest"] and res[0]["generation"] == res[1]["generation"]
    assert res[0]["length"] == ON_DEMAND_LENGTH
    builds = engine_stats(eng)["builds"]
    new = {d: n for d, n in builds.items() if d not in before}
    assert new == {res[0]["digest"]: 1}, f"expected one build of the new table, got {new}"
    assert eng.stderr().count("built on demand") == 1, eng.stderr()
    assert eng.stop() == 0


# ---------------------------------------------------------------------------------------------
# Readers cannot write, and never remove anything


def _verify_all_segments(eng) -> None:
    """Every table the engine holds still has the checksum it was published with (checked by the
    engine itself, from its own descriptors)."""
    report = eng.client().call({"op": "verify"})
    assert report["ok"] and report["repaired"] == [] and report["tables"] == len(eng.manifest()["tables"]), (
        report
    )


def test_reader_arrays_are_read_only_and_reader_exit_removes_nothing(ns, procs):
    eng = procs.engine(SMALL_CONFIG, ns)
    # Build one on-demand table first so that unpinned segments are covered too.
    eng.client().table("sinusoidal", {"d_model": 10})
    before = snapshot(ns)
    for how in ("normal", "os._exit", "sigkill"):
        r = reader(procs, ns, "read_only", name=f"exit-{how}", exit=how)
        res = r.wait_json(lambda m: "cos_flag" in m, timeout=60)
        for name in ("cos", "table", "inv_freq"):
            assert res[f"{name}_flag"] is False, res
            assert res[f"{name}_assign"] == "ValueError", res
            assert res[f"{name}_setflags"] == "ValueError", res
        assert res["map_perms"] == ["r--s"], f"segments must be mapped read-only and shared: {res}"
        if how == "sigkill":
            r.wait_json(lambda m: m.get("waiting"), timeout=30)
            assert r.kill9() == -signal.SIGKILL
        else:
            r.expect_exit(0)
        assert snapshot(ns) == before, f"a reader exiting via {how} changed the engine's files"
    assert eng.client().call({"op": "ping"})["ok"]
    _verify_all_segments(eng)
    assert eng.stop() == 0


def test_second_engine_on_same_namespace_refuses(ns, procs):
    first = procs.engine(SMALL_CONFIG, ns)
    before = snapshot(ns)
    for via_cli in (False, True):
        second = procs.engine(SMALL_CONFIG, ns, ready=False, via_cli=via_cli)
        rc = second.wait(30)
        assert rc != 0, second.logs()
        err = second.stderr()
        assert "already" in err and str(first.pid) in err, err
        assert "Traceback" not in err, err
        assert snapshot(ns) == before, "the refused engine touched the running engine's files"
    assert first.client().call({"op": "ping"})["pid"] == first.pid
    assert first.stop() == 0


# ---------------------------------------------------------------------------------------------
# torch views


def test_torch_views_share_memory(ns, procs):
    torch = pytest.importorskip("torch")
    eng = procs.engine(SMALL_CONFIG, ns)
    c = eng.client()
    for dt, tdt in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        view = c.table("rope", {"head_dim": 64}, dtype=dt)
        for name in ("cos", "sin"):
            a = getattr(view, name)
            t = view.torch(name)
            assert t.dtype == tdt and tuple(t.shape) == a.shape
            assert t.data_ptr() == a.__array_interface__["data"][0], "torch view is a copy"
            want = compute("rope", {"head_dim": 64, "positions": [0, 1, 4095], "dtype": dt})[name][:, :32]
            ref = torch.from_numpy(want.copy())
            if dt == "bfloat16":
                ref = ref.view(torch.bfloat16)
            assert torch.equal(
                t[[0, 1, 4095]].view(torch.int16) if dt == "bfloat16" else t[[0, 1, 4095]],
                ref.view(torch.int16) if dt == "bfloat16" else ref,
            )
    assert eng.stop() == 0


def test_writing_through_a_torch_view_faults_and_changes_nothing(ns, procs):
    pytest.importorskip("torch")
    eng = procs.engine(SMALL_CONFIG, ns)
    r = reader(procs, ns, "torch_write")
    rc = r.wait(60)
    assert rc == -signal.SIGSEGV or rc == -signal.SIGBUS, r.logs()
    assert not any(m.get("wrote") for m in r.json_lines())
    _verify_all_segments(eng)
    assert eng.stop() == 0
