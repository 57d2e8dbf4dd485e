"""Integration tests for the engine and shared memory (issue #3), with real processes.

Every test starts the engine as a subprocess (``python -m posenc.engine.engine_main``) under its own
namespace in /dev/shm, and readers as unrelated Python processes (``python -c``, fresh
interpreters, never forks of the test). The reference for every value a reader gets is
``engine.compute.compute`` (the library's output), compared bit for bit: same dtype, same shape,
same bytes (so -0.0 and +0.0 differ). After every test nothing of its namespace may remain in
/dev/shm (autouse fixture).

Table configs are small (4096 rows) so an engine is ready in well under a second; on-demand
builds use the engine's fixed on-demand length (131072 rows), so the specs built on demand here
are narrow.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import signal
import stat
import time

import numpy as np
import pytest

from posenc.engine.client import EngineUnavailable
from posenc.engine.compute import compute
from posenc.engine.errors import SpecError

from helpers_proc import (CLI_MODULE, PYTHON, SHM_DIR, ProcRegistry, assert_no_leftovers, read_manifest,
                          remove_leftovers, shm_files, snapshot, unique_namespace)

LENGTH = 4096          # rows of every configured table in these tests
ON_DEMAND_LENGTH = 131072  # engine.tabledefs.DEFAULT_LENGTH: rows of a table built on demand


# ---------------------------------------------------------------------------------------------
# Specs and configs

LONGROPE = {"head_dim": 16, "rope_theta": 10000.0, "max_position_embeddings": 4096,
            "rope_scaling": {"rope_type": "longrope", "original_max_position_embeddings": 1024,
                             "short_factor": [1.0 + 0.1 * i for i in range(8)],
                             "long_factor": [2.0 + 0.5 * i for i in range(8)]}}
LLAMA3 = {"head_dim": 64, "rope_theta": 500000.0,
          "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                           "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}}
YARN = {"head_dim": 32, "max_position_embeddings": 4096,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}}
LINEAR = {"head_dim": 32, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
DYNAMIC = {"head_dim": 32, "max_position_embeddings": 2048, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}
PARTIAL = {"head_dim": 64, "partial_rotary_factor": 0.25}

# Every family, every rope_type, every dtype.
FULL_CONFIG = {"length": LENGTH, "tables": [
    {"family": "rope", "spec": {"head_dim": 64}, "dtypes": ["float32", "bfloat16", "float16"]},
    {"family": "rope", "spec": PARTIAL},
    {"family": "rope", "spec": LLAMA3},
    {"family": "rope", "spec": LINEAR},
    {"family": "rope", "spec": YARN, "dtypes": ["float32", "bfloat16"]},
    {"family": "rope", "spec": LONGROPE},
    {"family": "rope", "spec": DYNAMIC},
    {"family": "sinusoidal", "spec": {"d_model": 33}, "dtypes": ["float32", "float16", "bfloat16"]},
    {"family": "sinusoidal", "spec": {"d_model": 31, "layout": "fairseq"}},
    {"family": "alibi", "spec": {"num_heads": 12}, "dtypes": ["float32", "float16", "bfloat16"]},
    {"family": "t5-buckets", "spec": {"bidirectional": True}},
    {"family": "t5-buckets", "spec": {"bidirectional": False}},
]}

SMALL_CONFIG = {"length": LENGTH, "tables": [
    {"family": "rope", "spec": {"head_dim": 64}, "dtypes": ["float32", "bfloat16"]},
    {"family": "sinusoidal", "spec": {"d_model": 33}},
    {"family": "alibi", "spec": {"num_heads": 8}},
    {"family": "t5-buckets", "spec": {}},
]}

# Positions inside the table, at its edge, past it (computed exactly), repeated, out of order.
PAST = [0, 1, 17, 4095, 4096, 4097, 131071, 131072, 2**31 - 1, 5, 5, 3]
RANGE = {"start": 4000, "stop": 4300, "step": 7}
Q_NEAR = {"start": 100, "stop": 130}
K_NEAR = [0, 99, 100, 101, 129, 200, 4000]            # distances < 4096: from the table
K_FAR = [0, 5, 128, 5000, 9000]                        # distances >= 4096: computed
T5_KEYS = [0, 3, 64, 127, 128, 129, 1000, 999_990, 1_000_000, 2_000_000]


def _rope_cases():
    out = []
    for dt in ("float32", "bfloat16", "float16"):
        for layout in ("half_split", "interleaved"):
            out.append(("rope", {"head_dim": 64, "layout": layout, "positions": PAST, "dtype": dt}))
    out.append(("rope", {"head_dim": 64, "positions": RANGE}))
    out.append(("rope", {**PARTIAL, "positions": PAST}))
    out.append(("rope", {**LLAMA3, "positions": PAST}))
    out.append(("rope", {**LINEAR, "positions": PAST, "layout": "interleaved"}))
    for dt in ("float32", "bfloat16"):
        out.append(("rope", {**YARN, "positions": PAST, "dtype": dt}))
    out.append(("rope", {**LONGROPE, "positions": [0, 5, 1023]}))                 # short factors
    out.append(("rope", {**LONGROPE, "positions": [0, 5, 1023, 1024, 5000]}))     # long factors
    out.append(("rope", {**LONGROPE, "seq_len": 100, "positions": [3000, 4100]}))  # short, past table
    out.append(("rope", {**DYNAMIC, "positions": [0, 5, 2047]}))                  # table at L = M
    out.append(("rope", {**DYNAMIC, "seq_len": 1000, "positions": [10, 3000, 5000]}))
    out.append(("rope", {**DYNAMIC, "positions": [0, 3000]}))                     # past M: computed
    return out


def _other_cases():
    out = []
    for dt, layout, offset in (("float32", "interleaved", 0), ("bfloat16", "interleaved", 2),
                               ("float16", "concat", 0), ("float32", "concat", 4093)):
        out.append(("sinusoidal", {"d_model": 33, "layout": layout, "offset": offset, "positions": PAST, "dtype": dt}))
    out.append(("sinusoidal", {"d_model": 31, "layout": "fairseq", "offset": 1, "positions": PAST}))
    for dt in ("float32", "float16", "bfloat16"):
        out.append(("alibi", {"num_heads": 12, "query": Q_NEAR, "key": K_NEAR, "dtype": dt}))
    out.append(("alibi", {"num_heads": 12, "query": Q_NEAR, "key": K_NEAR, "mask_future": True, "dtype": "float16"}))
    out.append(("alibi", {"num_heads": 12, "mode": "symmetric", "heads": [3, 0, 3, 11], "query": Q_NEAR,
                          "key": K_NEAR, "dtype": "bfloat16"}))
    out.append(("alibi", {"num_heads": 12, "query": [0, 4095, 8000], "key": K_FAR}))   # past the table
    out.append(("alibi", {"num_heads": 12, "query": [0, 70000], "key": K_FAR, "dtype": "float16"}))  # refused
    for bidi in (True, False):
        out.append(("t5-buckets", {"bidirectional": bidi, "query": [0, 5, 100, 1_000_000], "key": T5_KEYS}))
    return out


ALL_CASES = _rope_cases() + _other_cases()
LOOP_CASES = [  # what looping readers check on every iteration
    ("rope", {"head_dim": 64, "positions": PAST}),
    ("rope", {"head_dim": 64, "layout": "interleaved", "positions": [7, 4095, 5000], "dtype": "bfloat16"}),
    ("sinusoidal", {"d_model": 33, "offset": 2, "positions": [0, 1, 4094, 9000]}),
    ("alibi", {"num_heads": 8, "query": [0, 10, 20], "key": [0, 5, 25, 30]}),
    ("t5-buckets", {"query": [0, 9], "key": [0, 1, 200, 5000]}),
]


# ---------------------------------------------------------------------------------------------
# Bit-for-bit comparison (also shipped to the reader processes by source).

def bits_equal(a, b):
    """True when two results are identical bit for bit: same keys, and for every array the same
    dtype, shape and bytes (-0.0 differs from +0.0, NaN equals the same NaN); scalars as float64."""
    import numpy as np
    if set(a) != set(b):
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            x, y = np.asarray(x), np.asarray(y)
            if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
                return False
        elif np.float64(x).tobytes() != np.float64(y).tobytes():
            return False
    return True


def _diff(name, got, want) -> str:
    if set(got) != set(want):
        return f"{name}: keys {sorted(got)} != {sorted(want)}"
    for k in want:
        g, w = np.asarray(got[k]), np.asarray(want[k])
        if g.dtype != w.dtype or g.shape != w.shape:
            return f"{name}.{k}: {g.dtype}{g.shape} != {w.dtype}{w.shape}"
        if g.tobytes() != w.tobytes():
            bad = np.argwhere(g.view(np.uint8).reshape(-1) != w.view(np.uint8).reshape(-1))
            return f"{name}.{k}: {len(bad)} bytes differ; got {g.reshape(-1)[:6]} want {w.reshape(-1)[:6]}"
    return ""


def digest_of(view) -> str:
    """A table view's manifest key: its segment is named {ns}.seg.{generation}.{digest}."""
    return view.segment.path.rsplit(".", 1)[1]


# Reader processes: a fresh interpreter running this prelude plus a body. argv: ns shm_dir args-json.
PRELUDE = "\n".join([
    "import json, os, sys, time",
    "import numpy as np",
    "from posenc.engine.client import Client",
    "from posenc.engine.compute import compute",
    "from posenc.engine.errors import SpecError",
    "NS, SHM = sys.argv[1], sys.argv[2]",
    "ARGS = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}",
    "def emit(**kw):",
    "    print(json.dumps(kw), flush=True)",
    "def wait_file(path, timeout=60.0):",
    "    end = time.monotonic() + timeout",
    "    while not os.path.exists(path):",
    "        if time.monotonic() > end:",
    "            raise TimeoutError(path)",
    "        time.sleep(0.001)",
    inspect.getsource(bits_equal),
    inspect.getsource(digest_of),
    "client = Client(shm_dir=SHM, namespace=NS)",
    "client.wait_ready(30)",
    "",
])


def reader(procs: ProcRegistry, ns: str, body: str, name: str = "reader", **args):
    return procs.python(PRELUDE + body, ns, SHM_DIR, json.dumps(args), name=name)


def run_together(readers, go) -> list[dict]:
    """Release reader processes at once (each waits for the file ``go`` after saying it is
    ready), wait for each to exit 0, and return each one's last JSON line."""
    for r in readers:
        r.wait_json(lambda m: m.get("ready"), timeout=60)
    go.touch()
    out = []
    for r in readers:
        r.expect_exit(0, timeout=60)
        out.append(r.json_lines()[-1])
    return out


def engine_stats(eng) -> dict:
    reply = eng.client().call({"op": "stats"})
    assert reply.get("ok"), reply
    return reply


def seg_files(ns: str, generation: int | None = None) -> list[str]:
    pre = f"{ns}.seg." if generation is None else f"{ns}.seg.{generation}."
    return [n for n in shm_files(ns) if n.startswith(pre)]


# ---------------------------------------------------------------------------------------------
# Fixtures

@pytest.fixture
def ns():
    return unique_namespace()


@pytest.fixture
def procs(tmp_path):
    reg = ProcRegistry(tmp_path / "procs")
    yield reg
    reg.cleanup()


@pytest.fixture(autouse=True)
def no_leftovers(ns, procs):
    """After every test: stop what it left running (by pid), then /dev/shm holds nothing of ns."""
    yield
    stray = procs.cleanup()
    left = remove_leftovers(ns)
    assert not left, f"namespace {ns} left {left} in {SHM_DIR} (stray processes stopped: {stray})"


# ---------------------------------------------------------------------------------------------
# Readers get the library's output, bit for bit

LOOKUP_BODY = r"""
import numpy as np
out, errors, served = {}, {}, []
for i, (fam, req) in enumerate(ARGS["cases"]):
    try:
        res = client.lookup(fam, req)
    except SpecError as e:
        errors[str(i)] = list(e.loc)
        continue
    for k, v in res.items():
        out[f"{i}/{k}"] = np.asarray(v)
np.savez(ARGS["out"], **out)
emit(done=True, errors=errors, generation=client.generation, pid=os.getpid())
"""


def test_unrelated_reader_gets_library_output_bit_for_bit(ns, procs, tmp_path):
    eng = procs.engine(FULL_CONFIG, ns)
    configured = engine_stats(eng)["builds"]
    out = tmp_path / "lookups.npz"
    r = reader(procs, ns, LOOKUP_BODY, cases=ALL_CASES, out=str(out))
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
                problems.append(f"case {i} {fam}: library refuses at {e.loc}, reader got "
                                f"{summary['errors'].get(str(i))}")
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


def test_8_concurrent_readers(ns, procs, tmp_path):
    eng = procs.engine(SMALL_CONFIG, ns)
    configured = engine_stats(eng)["builds"]
    go = tmp_path / "go"
    body = r"""
expected = [compute(f, r) for f, r in ARGS["cases"]]
emit(ready=True)
wait_file(ARGS["go"])
start, n = time.time(), 0
while time.time() - start < ARGS["seconds"]:
    for (f, r), want in zip(ARGS["cases"], expected):
        if not bits_equal(client.lookup(f, r), want):
            emit(error=f"mismatch {f} {r}")
            sys.exit(1)
    n += 1
emit(n=n, start=start, end=time.time(), generation=client.generation)
"""
    readers = [reader(procs, ns, body, name=f"reader{i}", cases=LOOP_CASES, go=str(go), seconds=1.5)
               for i in range(8)]
    results = run_together(readers, go)
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
    body = r"""
emit(ready=True)
wait_file(ARGS["go"])
t = client.table("rope", ARGS["spec"])
rows = [0, 1, 4097, 131071]
want = compute("rope", {**ARGS["spec"], "positions": rows})
ok = bits_equal({"cos": t.cos[rows], "sin": t.sin[rows]},
                {"cos": want["cos"][:, :64], "sin": want["sin"][:, :64]})
emit(digest=digest_of(t), generation=t.generation, ok=ok, length=t.length)
"""
    rs = [reader(procs, ns, body, name=f"asker{i}", spec=spec, go=str(go)) for i in range(2)]
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
# Start-up: readers must never see a half-ready engine

# Six tables of 65536 × 32 float32 cos/sin: a start that takes long enough (tenths of a second)
# to look at the engine while it builds.
SLOW_CONFIG = {"length": 65536, "tables": [
    {"family": "rope", "spec": {"head_dim": 64, "rope_theta": 1000.0 + i}, "name": f"slow-{i}"} for i in range(6)]}


def _poll_start(eng, ns, during=lambda: None) -> list[int]:
    """Table counts of every manifest version seen while the engine starts (polled fast)."""
    seen, last = [], None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        st = None
        try:
            st = os.stat(os.path.join(SHM_DIR, f"{ns}.manifest.json"))
        except FileNotFoundError:
            pass
        if st is not None and (st.st_ino, st.st_mtime_ns) != last:
            m = read_manifest(ns)
            if m is not None:
                last = (st.st_ino, st.st_mtime_ns)
                seen.append(len(m["tables"]))
                if "generation" in eng.stderr() or len(m["tables"]) >= len(SLOW_CONFIG["tables"]):
                    break
        during()
        assert eng.alive(), eng.logs()
        time.sleep(0.0005)
    return seen


def test_manifest_appears_only_when_every_configured_table_is_in_it(ns, procs):
    """The manifest is written last (STYLE.md: "manifest written last, atomically"): a reader
    that attaches as soon as it sees one (Client.wait_ready) must find every configured table,
    or it asks the engine to build a configured table on demand."""
    eng = procs.engine(SLOW_CONFIG, ns, ready=False)
    seen = _poll_start(eng, ns)
    eng.wait_ready()
    assert seen and seen[0] == len(SLOW_CONFIG["tables"]), \
        f"manifest versions seen during start held {seen} of {len(SLOW_CONFIG['tables'])} configured tables"
    assert eng.stop() == 0


def test_configured_table_asked_for_during_start_is_built_once_and_stays_pinned(ns, procs):
    eng = procs.engine(SLOW_CONFIG, ns, ready=False)
    c = eng.client()
    sock = os.path.join(SHM_DIR, f"{ns}.sock")
    from posenc.engine import pipeline
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
    eng.wait_stderr("generation", 60)   # the engine's "generation G: N tables ..." start line
    assert replies and replies[0]["ok"], replies
    digest = replies[0]["digest"]
    entry = eng.manifest()["tables"][digest]
    builds = engine_stats(eng)["builds"]
    assert entry["pinned"] and entry["length"] == 65536, \
        f"the configured table became the on-demand one: pinned={entry['pinned']} length={entry['length']}"
    assert builds[digest] == 1, f"configured table built {builds[digest]} times"
    assert sum(e["pinned"] for e in eng.manifest()["tables"].values()) == len(SLOW_CONFIG["tables"])
    assert eng.stop() == 0


# ---------------------------------------------------------------------------------------------
# Engine death, restart and shutdown

LOOP_BODY = r"""
expected = [compute(f, r) for f, r in ARGS["cases"]]
i, gens = 0, []
while not os.path.exists(ARGS["stop"]):
    for (f, r), want in zip(ARGS["cases"], expected):
        if not bits_equal(client.lookup(f, r), want):
            emit(error=f"mismatch {f} {r}")
            sys.exit(1)
    i += 1
    g = client.generation
    if not gens or gens[-1] != g:
        gens.append(g)
    emit(i=i, gen=g, t=time.time())
    time.sleep(0.02)
emit(done=i, gens=gens)
"""


def _last_iter(r) -> dict:
    lines = [m for m in r.json_lines() if "i" in m]
    return lines[-1] if lines else {"i": 0, "gen": None, "t": 0}


def test_kill9_readers_keep_reading_and_restart_reclaims(ns, procs, tmp_path):
    eng_a = procs.engine(SMALL_CONFIG, ns)
    gen_a = eng_a.manifest()["generation"]
    files_a = seg_files(ns, gen_a)
    assert files_a
    stop = tmp_path / "stop"
    readers = [reader(procs, ns, LOOP_BODY, name=f"loop{i}", cases=LOOP_CASES, stop=str(stop)) for i in range(3)]
    for r in readers:
        r.wait_json(lambda m: m.get("i", 0) >= 3 and m["gen"] == gen_a, timeout=60, what="3 reads of gen A")

    # kill -9: no cleanup runs, so the engine's files stay; readers must not notice.
    eng_a.kill9()
    t_kill = time.time()
    assert seg_files(ns, gen_a) == files_a
    for r in readers:
        n = _last_iter(r)["i"]
        r.wait_json(lambda m, n=n: m.get("i", 0) >= n + 5 and m["t"] > t_kill, timeout=30,
                    what="reads after the engine died")
        assert r.alive(), r.logs()

    # A new engine on the namespace reclaims every file of the dead one.
    eng_b = procs.engine(SMALL_CONFIG, ns)
    gen_b = eng_b.manifest()["generation"]
    assert gen_b != gen_a and gen_b > gen_a
    assert seg_files(ns, gen_a) == [], "the dead engine's segments were not reclaimed"
    assert seg_files(ns, gen_b)
    assert "reclaimed" in eng_b.stderr()

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
    body = r"""
a = client.table("rope", {"head_dim": 64})
b = client.table("rope", {"head_dim": 8, "rope_theta": 999.0})
emit(mapped=True)
wait_file(ARGS["go"])
for spec, t in (({"head_dim": 64}, a), ({"head_dim": 8, "rope_theta": 999.0}, b)):
    want = compute("rope", {**spec, "positions": [0, 1, 4095]})
    h = want["cos"].shape[1] // 2
    assert bits_equal({"c": t.cos[[0, 1, 4095]], "s": t.sin[[0, 1, 4095]]},
                      {"c": want["cos"][:, :h], "s": want["sin"][:, :h]}), spec
    assert t.segment.verify()
emit(ok=True)
"""
    r = reader(procs, ns, body, go=str(go))
    r.wait_json(lambda m: m.get("mapped"), timeout=60)
    m = eng.manifest()
    assert any(not e["pinned"] for e in m["tables"].values()), "the on-demand table is missing"
    assert len(seg_files(ns)) == len(m["tables"])
    assert eng.stop(sig) == 0, eng.logs()
    assert_no_leftovers(ns)
    go.touch()
    r.expect_exit(0)


# ---------------------------------------------------------------------------------------------
# Readers cannot write, and never remove anything

def _verify_all_segments(eng) -> None:
    from posenc.engine import store
    m = store.read_manifest(eng.shm_dir, eng.namespace)
    for e in m["tables"].values():
        assert store.Segment(os.path.join(eng.shm_dir, e["file"]), e).verify(), e["file"]


def test_reader_arrays_are_read_only_and_reader_exit_removes_nothing(ns, procs):
    eng = procs.engine(SMALL_CONFIG, ns)
    # Build one on-demand table first so that unpinned segments are covered too.
    eng.client().table("sinusoidal", {"d_model": 10})
    before = snapshot(ns)
    body = r"""
t = client.table("rope", {"head_dim": 64}, dtype="bfloat16")
u = client.table("sinusoidal", {"d_model": 10})
res = {}
for name, a in (("cos", t.cos), ("table", u.table), ("inv_freq", t.inv_freq)):
    res[name + "_flag"] = bool(a.flags.writeable)
    try:
        a[0] = 0
        res[name + "_assign"] = "no error"
    except ValueError as e:
        res[name + "_assign"] = "ValueError"
    try:
        a.setflags(write=True)
        res[name + "_setflags"] = "no error"
    except ValueError:
        res[name + "_setflags"] = "ValueError"
maps = [l for l in open("/proc/self/maps") if NS + ".seg." in l]
res["map_perms"] = sorted({l.split()[1] for l in maps})
emit(**res)
how = ARGS["exit"]
if how == "os._exit":
    os._exit(0)
if how == "sigkill":
    emit(waiting=True)
    time.sleep(120)
sys.exit(0)
"""
    for how in ("normal", "os._exit", "sigkill"):
        r = reader(procs, ns, body, name=f"exit-{how}", exit=how)
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


def _bad_rope_factor():
    return {"tables": [{"family": "rope", "spec": {**LLAMA3, "rope_scaling": {**LLAMA3["rope_scaling"], "factor": 0.5}}}]}


@pytest.mark.parametrize("cfg, field", [
    (_bad_rope_factor(), "tables.0.spec.rope_scaling.factor"),
    ({"tables": [{"family": "rope", "spec": {"head_dim": 8}}, {"family": "xpos", "spec": {}}]}, "tables.1.family"),
    ({"tables": [{"family": "alibi", "spec": {"num_heads": 4}, "dtypes": ["float64"]}]}, "tables.0.dtypes.0"),
    ({"tables": [{"family": "rope", "spec": {"head_dim": 8}, "dtypes": [None]}]}, "tables.0.dtypes.0"),
    ({"length": 0, "tables": []}, "length"),
], ids=["rope_factor", "unknown_family", "dtype", "null_dtype", "length"])
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

def _modes(ns) -> dict[str, tuple[int, int]]:
    out = {}
    for n in shm_files(ns):
        st = os.stat(os.path.join(SHM_DIR, n))
        out[n] = (stat.S_IMODE(st.st_mode), st.st_gid)
    return out


def test_segments_are_0600_by_default(ns, procs):
    eng = procs.engine(SMALL_CONFIG, ns)
    eng.client().table("rope", {"head_dim": 8, "rope_theta": 31.0})   # an on-demand segment too
    modes = _modes(ns)
    segs = seg_files(ns)
    assert len(segs) == len(SMALL_CONFIG["tables"]) + 2  # rope config has two dtypes, + on-demand
    for n in segs + [f"{ns}.manifest.json"]:
        assert modes[n][0] == 0o600, (n, oct(modes[n][0]))
    assert modes[f"{ns}.sock"][0] & 0o077 == 0, oct(modes[f"{ns}.sock"][0])
    assert eng.stop() == 0


def _other_group() -> tuple[str, int]:
    """A group other than ours when one exists (so that the chown is visible), else ours."""
    import grp
    mine = os.getgid()
    for g in grp.getgrall():
        if g.gr_gid != mine and (os.getuid() == 0 or g.gr_gid in os.getgroups()):
            return g.gr_name, g.gr_gid
    return grp.getgrgid(mine).gr_name, mine


@pytest.mark.parametrize("by", ["name", "gid"])
def test_group_option_makes_segments_0640_of_that_group(ns, procs, by):
    name, gid = _other_group()
    eng = procs.engine(SMALL_CONFIG, ns, args=["--group", name if by == "name" else str(gid)])
    eng.client().table("rope", {"head_dim": 8, "rope_theta": 31.0})
    modes = _modes(ns)
    segs = seg_files(ns)
    assert any(not e["pinned"] for e in eng.manifest()["tables"].values())
    for n in segs + [f"{ns}.manifest.json"]:
        assert modes[n] == (0o640, gid), (n, oct(modes[n][0]), modes[n][1], gid)
    sock_mode, sock_gid = modes[f"{ns}.sock"]
    assert sock_gid == gid and sock_mode & 0o060 == 0o060 and sock_mode & 0o007 == 0, oct(sock_mode)
    assert eng.stop() == 0


# ---------------------------------------------------------------------------------------------
# Memory budget

def _rope8(theta: float) -> dict:
    return {"head_dim": 8, "rope_theta": theta}


def _rope8_nbytes() -> int:
    # cos and sin [131072, 4] float32, inv_freq64 [4] float64, inv_freq [4] float32
    return 2 * ON_DEMAND_LENGTH * 4 * 4 + 4 * 8 + 4 * 4


def test_memory_budget_evicts_lru_unpinned_and_mapped_readers_keep_reading(ns, procs, tmp_path):
    budget = int(2.5 * _rope8_nbytes())  # two on-demand tables fit, a third does not
    eng = procs.engine(SMALL_CONFIG, ns, args=["--memory-budget", str(budget)])
    pinned = {d for d, e in eng.manifest()["tables"].items() if e["pinned"]}
    go = tmp_path / "go"
    # An unrelated reader maps tables 1 and 2 and holds them.
    body = r"""
held = {}
for theta in (1001.0, 1002.0):
    held[theta] = client.table("rope", {"head_dim": 8, "rope_theta": theta})
emit(mapped={str(k): digest_of(v) for k, v in held.items()})
wait_file(ARGS["go"])
rows = [0, 1, 77777, 131071]
for theta, t in held.items():
    want = compute("rope", {"head_dim": 8, "rope_theta": theta, "positions": rows})
    assert bits_equal({"c": t.cos[rows], "s": t.sin[rows]},
                      {"c": want["cos"][:, :4], "s": want["sin"][:, :4]}), theta
    assert t.segment.verify(), theta
emit(ok=True)
"""
    r = reader(procs, ns, body, go=str(go))
    digests = r.wait_json(lambda m: "mapped" in m, timeout=60)["mapped"]
    d1, d2 = digests["1001.0"], digests["1002.0"]
    c = eng.client()
    # Ask for table 1 again: table 2 becomes the least recently used.
    from posenc.engine import pipeline
    key = pipeline.parse("rope", {**_rope8(1001.0), "positions": [0]}).table.key
    assert c.call({"op": "ensure", "table": key})["ok"]
    d3 = digest_of(c.table("rope", _rope8(1003.0)))
    m = eng.manifest()
    assert d2 not in m["tables"], "the least recently used table was not evicted"
    assert {d1, d3} <= set(m["tables"]) and pinned <= set(m["tables"])
    assert not [n for n in shm_files(ns) if n.endswith(d2)], "the evicted segment is still in /dev/shm"
    assert sum(e["nbytes"] for e in m["tables"].values() if not e["pinned"]) <= budget
    assert "evicted" in eng.stderr()
    go.touch()
    r.expect_exit(0)      # still reads the evicted table 2 correctly through its mapping
    # Next build evicts table 1 (now the oldest); configured tables are older still and stay.
    d4 = digest_of(c.table("rope", _rope8(1004.0)))
    m = eng.manifest()
    assert d1 not in m["tables"] and {d3, d4} <= set(m["tables"]) and pinned <= set(m["tables"])
    # A table bigger than the whole budget is not stored, and evicts nothing; a request for it is
    # still answered, computed exactly (API.md: no table limits positions).
    from posenc.engine.errors import NotStored
    with pytest.raises(NotStored):
        c.table("rope", {"head_dim": 64, "rope_theta": 1005.0})
    body = {"head_dim": 64, "rope_theta": 1005.0, "positions": [0, 7, 70000]}
    assert bits_equal(c.lookup("rope", body), compute("rope", body))
    assert set(eng.manifest()["tables"]) == set(m["tables"])
    assert eng.stop() == 0


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
            assert torch.equal(t[[0, 1, 4095]].view(torch.int16) if dt == "bfloat16" else t[[0, 1, 4095]],
                               ref.view(torch.int16) if dt == "bfloat16" else ref)
    assert eng.stop() == 0


def test_writing_through_a_torch_view_faults_and_changes_nothing(ns, procs):
    pytest.importorskip("torch")
    eng = procs.engine(SMALL_CONFIG, ns)
    body = r"""
t = client.table("rope", {"head_dim": 64}).torch("cos")
emit(before=float(t[1, 1]))
t[1, 1] = 42.0
emit(wrote=True)
"""
    r = reader(procs, ns, body)
    rc = r.wait(60)
    assert rc == -signal.SIGSEGV or rc == -signal.SIGBUS, r.logs()
    assert not any(m.get("wrote") for m in r.json_lines())
    _verify_all_segments(eng)
    assert eng.stop() == 0


# ---------------------------------------------------------------------------------------------
# posenc engine --dry-run

def _expected_bytes(cfg: dict) -> list[int]:
    """Per configured table, rows × width × itemsize of each stored array, from the config alone."""
    item = {"float32": 4, "float16": 2, "bfloat16": 2}
    out = []
    for t in cfg["tables"]:
        fam, spec = t["family"], t["spec"]
        n = t.get("length", cfg.get("length", ON_DEMAND_LENGTH))
        for dt in t.get("dtypes", ["float32"]):
            if fam == "rope":
                half = int(spec["head_dim"] * spec.get("partial_rotary_factor", 1.0)) // 2
                sets = 2 if (spec.get("rope_scaling") or {}).get("rope_type") == "longrope" else 1
                # cos, sin [n, d/2] + inv_freq in float64 and float32
                out += [2 * n * half * item[dt] + half * (8 + 4)] * sets
            elif fam == "sinusoidal":
                d = spec["d_model"]
                width = 2 * (d // 2) if spec.get("layout") == "fairseq" else d
                out.append(n * width * item[dt])
            elif fam == "alibi":
                out.append(spec["num_heads"] * n * item[dt] + spec["num_heads"] * 8)
            else:
                out.append((2 * spec.get("max_distance", 128) + 1) * 4)  # int32 LUT over [-r, r]
            if fam == "t5-buckets":
                break
    return out


def _dry_run(procs, ns, tables_path=None):
    argv = [PYTHON, "-m", CLI_MODULE, "engine", "--dry-run", "--namespace", ns]
    if tables_path:
        argv += ["--tables", tables_path]
    p = procs.run(argv)
    assert p.returncode == 0, p.stderr
    sizes = [int(line.split()[-1]) for line in p.stdout.splitlines()[1:] if line and not line.startswith("total")]
    total = int(re.search(r"^total (\d+) bytes", p.stdout, re.M).group(1))
    return sizes, total, p.stdout


def test_dry_run_prints_table_bytes_and_total(ns, procs, tmp_path):
    path = tmp_path / "tables.json"
    path.write_text(json.dumps(FULL_CONFIG))
    sizes, total, text = _dry_run(procs, ns, str(path))
    want = _expected_bytes(FULL_CONFIG)
    assert sorted(sizes) == sorted(want), text
    assert total == sum(want), text
    assert_no_leftovers(ns)
    # ... and it is what a running engine maps: the arrays of its segments add up to the total.
    eng = procs.engine(FULL_CONFIG, ns)
    arrays = [a for e in eng.manifest()["tables"].values() for a in e["arrays"].values()]
    assert sum(int(np.prod(a["shape"])) * np.dtype(a["dtype"]).itemsize for a in arrays) == total
    assert eng.stop() == 0


def test_dry_run_of_the_default_config(ns, procs):
    from posenc.engine.config import DEFAULT_CONFIG
    sizes, total, text = _dry_run(procs, ns)
    want = _expected_bytes(DEFAULT_CONFIG)
    assert sorted(sizes) == sorted(want), text
    assert total == sum(want)
    assert 1.2 * 2**30 < total < 1.6 * 2**30, total
    assert_no_leftovers(ns)
