"""Issue 15, the engine's faults, on real processes:

- killed in the middle of its start, and in the middle of an on-demand build that a worker waits
  on: the half-built table dies with it (nothing of it in /dev/shm) and the waiting request is
  answered (computed);
- a reader parsing the manifest from another process through hundreds of builds and evictions
  never sees a torn one;
- a reader running as another user, in the engine's group, reads and asks for builds but can
  neither write, truncate nor map for writing a segment it was handed, nor reach the engine's
  descriptors. (Tampering by the engine's own user: tests/integration/test_tamper.py.)
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading

import httpx
import pytest

from tests.integration.engine_cases import SMALL_CONFIG, seg_files
from tests.procs import wait_for
from tests.service_cases import BIN, CONFIG, reference_safetensors
from tests.shm import SHM_DIR, held_segments, read_manifest, shm_files

BIG = {"d_model": 2048, "positions": [3, 70000]}  # a 1 GiB sinusoidal table: a build of seconds


def building(server) -> list[str]:
    """Segments the server's engine holds that its manifest does not list yet: builds under way."""
    pid = server.engine_pid()
    listed = {e["file"] for e in (read_manifest(server.namespace) or {}).get("tables", {}).values()}
    return [n for n in held_segments(pid, server.namespace) if n not in listed] if pid else []


@pytest.mark.slow
def test_engine_killed_mid_build_the_waiting_request_is_answered_and_nothing_is_left(procs):
    s = procs.serve(CONFIG, workers=1)
    result = {}
    t = threading.Thread(
        target=lambda: result.update(
            r=httpx.post(s.url + "/v1/sinusoidal", json=BIG, headers=BIN, timeout=120)
        )
    )
    t.start()
    half = wait_for(lambda: building(s), 30, 0.001, "the build under way")
    old = s.engine_pid()
    os.kill(old, signal.SIGKILL)
    t.join(60)
    r = result["r"]
    assert r.status_code == 200 and r.content == reference_safetensors("sinusoidal", BIG)
    wait_for(lambda: s.engine_pid() not in (None, old), 30, 0.05, "the next engine")
    s.wait_ready()
    # the half-built table died with its engine: nobody holds it, nothing of it is in /dev/shm
    assert not set(half) & set(held_segments(s.pid, s.namespace) + held_segments(s.engine_pid(), s.namespace))
    assert not [n for n in shm_files(s.namespace) if ".seg." in n or n.endswith(".tmp")], shm_files(
        s.namespace
    )
    assert s.stop() == 0, s.output()
    assert shm_files(s.namespace) == [], s.output()  # (its successor may not have taken them over yet)


@pytest.mark.slow
def test_engine_killed_mid_start_leaves_nothing_and_requests_are_answered(procs, ns):
    config = {
        "tables": [
            {"family": "sinusoidal", "spec": {"d_model": 2048}},
            {"family": "rope", "spec": {"head_dim": 64}},
        ]
    }
    s = procs.serve(config, workers=1, ready=False, namespace=ns)
    wait_for(lambda: building(s), 60, 0.001, "the first build under way")
    s.wait_alive()
    old = s.engine_pid()
    os.kill(old, signal.SIGKILL)
    body = {"head_dim": 64, "positions": [1, 2]}  # no manifest yet: computed
    r = httpx.post(s.url + "/v1/rope", json=body, headers=BIN, timeout=60)
    assert r.status_code == 200 and r.content == reference_safetensors("rope", body)
    s.wait_ready(120)
    assert re.search(r"2 tables \([01] adopted\)", s.stderr()), (
        s.output()
    )  # (a table built before the kill is kept)
    assert not [n for n in shm_files(ns) if ".seg." in n or n.endswith(".tmp")], shm_files(ns)
    assert s.stop() == 0, s.output()


def test_manifest_is_never_torn_through_builds_and_evictions(procs, ns, tmp_path):
    eng = procs.engine(SMALL_CONFIG, ns, args=["--memory-budget", "60000"])
    stop = tmp_path / "stop"
    watch = procs.child("manifest_watch", os.path.join(SHM_DIR, f"{ns}.manifest.json"), str(stop))
    c = eng.client()
    n = 0

    def watched_enough() -> bool:  # new tables until the watcher has read 50 manifests of them
        nonlocal n
        c.lookup(
            "t5-buckets", {"max_distance": 2000 + n, "query": [0], "key": [9]}
        )  # each evicts an older one
        n += 1
        return any(m["distinct"] > 50 for m in watch.json_lines())

    wait_for(watched_enough, 120, 0, "the watcher to read 50 manifests the engine rewrote")
    stop.touch()
    out = watch.wait_json(lambda m: m.get("final"), 30)
    assert out["torn"] == 0 and out["distinct"] > 50, (out, n)
    assert "evicted" in eng.stderr()
    assert eng.stop() == 0


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
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--gid",
                READER_GROUP,
                "--shell",
                "/usr/sbin/nologin",
                READER_USER,
            ],
            check=True,
        )
        uid = pwd.getpwnam(READER_USER).pw_uid
    return uid, gid


def test_a_reader_of_another_user_in_the_group_reads_but_cannot_write(procs, ns):
    uid, gid = _ensure_user()
    eng = procs.engine(CONFIG, ns, args=["--group", READER_GROUP])
    from tests.procs import CHILDREN, PYTHON, Proc

    p = Proc(
        [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={gid}",
            "--clear-groups",
            PYTHON,
            CHILDREN / "group_reader.py",
            ns,
            SHM_DIR,
        ],
        procs.log_dir,
        "group-reader",
    )
    procs.procs.append(p)
    out = p.wait_json(lambda m: "lookup" in m, 60)
    assert (out["uid"], out["gid"]) == (uid, gid)
    from posenc.engine.answer.pipeline import compute

    assert out["lookup"] == compute("rope", {"head_dim": 64, "positions": [3]})["cos"].tolist()
    assert (
        out["built"]
        == compute("rope", {"head_dim": 12, "rope_theta": 77.0, "positions": [2]})["cos"].tolist()
    )
    tries = ("write", "truncate", "map", "engine_fds", "manifest")
    assert {k: out[k] for k in tries} == dict.fromkeys(tries, "refused"), out
    # one segment per table once the reader's build is published (a loaded machine may see the
    # segment a moment before the manifest that names it)
    wait_for(
        lambda: len(seg_files(eng)) == len((eng.manifest() or {"tables": {}})["tables"]),
        10,
        0.05,
        "a segment per table of the manifest",
    )
    assert eng.stop() == 0
