"""/dev/shm after pytest, on real pytest runs of small test files: the session-end guard of
tests/conftest.py (a namespace this session handed out that still has files once its owner is dead
fails the run, named with the test that asked for it; files whose owner removes them in time do
not); and an engine a test started does not outlive a pytest killed before its teardown (it used
to live on, orphaned, until a kill -9 left its lock, manifest and socket behind)."""

from __future__ import annotations

import json
import os
import re
import signal
import textwrap
from pathlib import Path

import pytest

from tests.procs import PYTHON, Proc, wait_for
from tests.shm import pid_alive, remove_leftovers, shm_files

REPO = Path(__file__).resolve().parents[1]

INNER = """
import os
import subprocess
import sys
import threading

from tests.procs import unique_namespace, wait_for

SHM = "/dev/shm"


def guard_running():
    # the session-end guard (tests/shm.py leftovers) is on the main thread's stack: it has seen
    # the files of a live owner and waits for them
    frame = sys._current_frames().get(threading.main_thread().ident)
    while frame is not None:
        if frame.f_code.co_name == "leftovers" and frame.f_code.co_filename.endswith("shm.py"):
            return True
        frame = frame.f_back
    return False


def write(ns, pid):
    with open(os.path.join(SHM, f"{ns}.lock"), "w") as f:
        f.write(str(pid))
    with open(os.path.join(SHM, f"{ns}.manifest.json"), "w") as f:
        f.write("{}")


def test_an_owner_that_died_leaves_its_files():
    gone = subprocess.Popen(["true"])
    gone.wait()                               # a pid that has exited (and been reaped)
    write(unique_namespace(), gone.pid)


def test_a_live_owner_removes_its_files_a_little_later():
    ns = unique_namespace()
    write(ns, os.getpid())

    def later():
        wait_for(guard_running, 120, 0.005, "the session-end guard waiting for a live owner's files")
        for n in os.listdir(SHM):
            if n.startswith(ns + "."):
                os.unlink(os.path.join(SHM, n))
    threading.Thread(target=later).start()
"""


def start_inner(tmp_path: Path, body: str, *args: str) -> Proc:
    """``pytest`` (with the suite's conftest and ``args``) on a test file of ``body``, from the checkout."""
    test = tmp_path / "inner_case.py"
    test.write_text(textwrap.dedent(body))
    return Proc(
        [
            PYTHON,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            REPO,
            *args,
            test,
        ],
        tmp_path,
        "inner-pytest",
        cwd=REPO,
    )


@pytest.mark.parametrize("args", [(), ("-n", "2")], ids=["one-process", "xdist-workers"])
def test_a_dead_owners_files_fail_the_run_and_name_the_test(tmp_path, args):
    """Also under pytest-xdist: a worker's leftovers are the controller's to report and fail on."""
    p = start_inner(tmp_path, INNER, *args)
    rc = p.wait(120)
    out = p.stdout() + p.stderr()
    left = re.findall(r"^(ptest-[0-9a-f]{8}) \(", out, re.M)
    try:
        assert rc == 1, out
        assert "2 passed" in out, out
        assert len(left) == 1, out
        line = next(x for x in out.splitlines() if x.startswith(left[0]))
        assert "lock pid" in line and "dead" in line, line
        assert "test_an_owner_that_died_leaves_its_files" in line, line
        assert f"{left[0]}.lock" in line and f"{left[0]}.manifest.json" in line, line
        assert "1 namespace(s) left files" in out, out
    finally:
        for ns in left:
            remove_leftovers(ns)


def test_a_clean_run_passes(tmp_path):
    p = start_inner(
        tmp_path,
        INNER.split("def test_an_owner")[0]
        + "def test_a_live_owner"
        + INNER.split("def test_a_live_owner")[1],
    )
    assert p.wait(120) == 0, p.logs()
    assert "files left in" not in p.stdout(), p.logs()


WAITS = """
import json
import signal

from tests.procs import Procs
from tests.shm import unique_namespace


def test_an_engine_then_a_long_wait(tmp_path):
    procs = Procs(tmp_path / "procs")
    eng = procs.engine({"length": 64, "tables": [{"family": "rope", "spec": {"head_dim": 8}}]}, unique_namespace())
    with open(OUT, "w") as f:
        json.dump({"namespace": eng.namespace, "pid": eng.pid}, f)
    while True:
        signal.pause()  # holds still until the outer test kills this pytest
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM (a timeout's)"])
def test_an_engine_does_not_outlive_a_killed_pytest(tmp_path, sig):
    out = tmp_path / "engine.json"
    p = start_inner(tmp_path, f"OUT = {str(out)!r}\n" + WAITS)
    started = wait_for(
        lambda: out.exists() and out.read_text().endswith("}") and json.loads(out.read_text()),
        60,
        0.05,
        "the inner test's engine",
        check=lambda: p.alive() or pytest.fail(p.logs()),
    )
    ns, pid = started["namespace"], started["pid"]
    try:
        assert pid_alive(pid) and shm_files(ns)
        p.signal(sig)  # no teardown runs: nothing of pytest stops the engine
        assert p.wait(30) == -sig
        wait_for(
            lambda: not pid_alive(pid) and not shm_files(ns), 30, 0.05, "the engine gone, with its files"
        )
    finally:
        if pid_alive(pid):
            os.kill(pid, signal.SIGTERM)  # (the bug: an orphan) stopped by its pid, it removes its files
            wait_for(lambda: not pid_alive(pid), 30, 0.05, "the orphaned engine stopped")
        remove_leftovers(ns)
