"""Issue 15, the engine's faults, on real processes:

- killed in the middle of its start, and in the middle of an on-demand build that a worker waits
  on: the ``.tmp`` is reclaimed by its successor and the waiting request is answered (computed);
- a reader parsing the manifest from another process through hundreds of builds and evictions
  never sees a torn one;
- an unlinked or overwritten segment is noticed and rebuilt, and HTTP answers are right again
  within the documented time (a second for an unlinked one, the verify interval for changed bytes);
- a reader running as another user, with group read-only access, reads and asks for builds but
  can neither write, chmod nor unlink a segment.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time

import httpx
import pytest

from tests.integration.engine_cases import SMALL_CONFIG, seg_files
from tests.procs import wait_for
from tests.service_cases import BIN, CONFIG, reference_safetensors
from tests.shm import SHM_DIR, read_manifest, shm_files

BIG = {"d_model": 2048, "positions": [3, 70000]}    # a 1 GiB sinusoidal table: a build of seconds


def tmp_files(ns: str) -> list[str]:
    return [n for n in shm_files(ns) if n.endswith(".tmp")]


@pytest.mark.slow
def test_engine_killed_mid_build_the_waiting_request_is_answered_and_tmp_reclaimed(procs):
    s = procs.serve(CONFIG, workers=1)
    result = {}
    t = threading.Thread(target=lambda: result.update(
        r=httpx.post(s.url + "/v1/sinusoidal", json=BIG, headers=BIN, timeout=120)))
    t.start()
    tmp = wait_for(lambda: tmp_files(s.namespace), 30, 0.001, "the build's .tmp")
    old = s.engine_pid()
    os.kill(old, signal.SIGKILL)
    t.join(60)
    r = result["r"]
    assert r.status_code == 200 and r.content == reference_safetensors("sinusoidal", BIG)
    wait_for(lambda: s.engine_pid() not in (None, old) and not set(tmp) & set(shm_files(s.namespace)),
             30, 0.05, "the .tmp reclaimed by the next engine")
    s.wait_ready()
    assert s.stop() == 0, s.output()


@pytest.mark.slow
def test_engine_killed_mid_start_its_tmp_is_removed_and_requests_are_answered(procs, ns):
    config = {"tables": [{"family": "sinusoidal", "spec": {"d_model": 2048}},
                         {"family": "rope", "spec": {"head_dim": 64}}]}
    s = procs.serve(config, workers=1, ready=False, namespace=ns)
    tmp = wait_for(lambda: tmp_files(ns), 60, 0.001, "the first build's .tmp")
    s.wait_alive()
    old = s.engine_pid()
    os.kill(old, signal.SIGKILL)
    body = {"head_dim": 64, "positions": [1, 2]}   # no manifest yet: computed
    r = httpx.post(s.url + "/v1/rope", json=body, headers=BIN, timeout=60)
    assert r.status_code == 200 and r.content == reference_safetensors("rope", body)
    s.wait_ready(120)
    assert not set(tmp) & set(shm_files(ns))
    assert re.search(r"adopted \d+ table\(s\).*removed [1-9]\d* other file", s.stderr()), s.output()
    assert s.stop() == 0, s.output()


def test_manifest_is_never_torn_through_builds_and_evictions(procs, ns):
    eng = procs.engine(SMALL_CONFIG, ns, args=["--memory-budget", "60000"])
    watch = procs.child("manifest_watch", os.path.join(SHM_DIR, f"{ns}.manifest.json"), "6")
    c = eng.client()
    n = 0
    end = time.monotonic() + 5
    while time.monotonic() < end:    # each new table evicts an older one (the budget holds ~4)
        c.lookup("t5-buckets", {"max_distance": 2000 + n, "query": [0], "key": [9]})
        n += 1
    out = watch.wait_json(lambda m: "torn" in m, 30)
    assert out["torn"] == 0 and out["ok"] > 1000 and out["distinct"] > 50, (out, n)
    assert "evicted" in eng.stderr()
    assert eng.stop() == 0


# -- integrity ------------------------------------------------------------------------------------
ROPE = {"head_dim": 64, "positions": [1, 2, 3]}


def _rope_entry(ns: str) -> dict:
    m = read_manifest(ns)
    return next(e for e in m["tables"].values() if e["family"] == "rope" and e["dtype"] == "float32"
                and '"d":64' in e["key"] and '"rope_type":"default"' in e["key"])


def _correct(url: str) -> bool:
    return httpx.post(url + "/v1/rope", json=ROPE, headers=BIN).content == reference_safetensors("rope", ROPE)


@pytest.mark.slow
def test_an_unlinked_segment_is_rebuilt_within_a_second(procs):
    s = procs.serve(CONFIG, workers=2, args=["--verify-interval", "1"])
    entry = _rope_entry(s.namespace)
    t0 = time.monotonic()
    os.unlink(os.path.join(SHM_DIR, entry["file"]))
    # noticed within a second by design (engine/upkeep.py); waited for as an event, with a generous
    # bound, so that a loaded machine does not fail it
    wait_for(lambda: _rope_entry(s.namespace)["file"] != entry["file"], 30, 0.01, "the table rebuilt")
    print(f"unlinked segment rebuilt after {time.monotonic() - t0:.2f} s")
    assert all(_correct(s.url) for _ in range(10))
    os.kill(s.worker_pids()[0], signal.SIGKILL)   # a new worker becomes ready (it used to stay 503)
    wait_for(lambda: len(s.worker_pids()) == 2, 20, 0.05, "the worker replaced")
    wait_for(lambda: all(httpx.get(s.url + "/readyz").status_code == 200 for _ in range(6)), 20, 0.1,
             "every worker ready")
    assert "was unlinked; rebuilding" in s.stderr(), s.output()
    assert s.stop() == 0, s.output()


@pytest.mark.slow
def test_an_overwritten_segment_is_rebuilt_and_answers_are_right_again(procs):
    s = procs.serve(CONFIG, workers=2, args=["--verify-interval", "1"])
    for _ in range(4):
        assert _correct(s.url)
    entry = _rope_entry(s.namespace)
    path = os.path.join(SHM_DIR, entry["file"])
    off = entry["arrays"]["cos"]["offset"] + 1 * 32 * 4       # row 1 of the float32 cos table
    os.chmod(path, 0o600)          # what another process of the same user can do
    with open(path, "r+b") as f:
        f.seek(off)
        f.write(b"\x00\x00\x80\x7f" * 32)   # +inf (answers carry it until the sweep finds it)
    t0 = time.monotonic()
    # verify interval (1 s) + rebuild + the workers' recheck: waited for, with a generous bound
    wait_for(lambda: all(_correct(s.url) for _ in range(6)), 30, 0.05, "right answers again")
    print(f"overwritten segment answered right again after {time.monotonic() - t0:.2f} s")
    assert "was overwritten; rebuilding" in s.stderr(), s.output()
    assert s.stop() == 0, s.output()


# -- another user, group read-only ----------------------------------------------------------------
READER_USER, READER_GROUP = "posenc-test-reader", "posenc-test-readers"


def _ensure_user() -> tuple[int, int]:
    import grp
    import pwd
    if os.geteuid() != 0:
        pytest.skip("creating a second user needs root")
    try:
        gid = grp.getgrnam(READER_GROUP).gr_gid
    except KeyError:
        subprocess.run(["groupadd", "--system", READER_GROUP], check=True)
        gid = grp.getgrnam(READER_GROUP).gr_gid
    try:
        uid = pwd.getpwnam(READER_USER).pw_uid
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--gid", READER_GROUP,
                        "--shell", "/usr/sbin/nologin", READER_USER], check=True)
        uid = pwd.getpwnam(READER_USER).pw_uid
    return uid, gid


def test_a_reader_of_another_user_with_group_read_access_reads_but_cannot_write(procs, ns):
    uid, gid = _ensure_user()
    eng = procs.engine(CONFIG, ns, args=["--group", READER_GROUP])
    from tests.procs import CHILDREN, PYTHON, Proc
    p = Proc(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", PYTHON,
              CHILDREN / "group_reader.py", ns, SHM_DIR], procs.log_dir, "group-reader")
    procs.procs.append(p)
    out = p.wait_json(lambda m: "lookup" in m, 60)
    assert (out["uid"], out["gid"]) == (uid, gid)
    from posenc.engine.compute import compute
    assert out["lookup"] == compute("rope", {"head_dim": 64, "positions": [3]})["cos"].tolist()
    assert out["built"] == compute("rope", {"head_dim": 12, "rope_theta": 77.0, "positions": [2]})["cos"].tolist()
    assert {k: out[k] for k in ("write", "unlink", "chmod", "manifest")} == dict.fromkeys(
        ("write", "unlink", "chmod", "manifest"), "refused"), out
    assert len(seg_files(ns)) == len(eng.manifest()["tables"])
    assert eng.stop() == 0
