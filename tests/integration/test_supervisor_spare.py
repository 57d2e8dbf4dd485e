"""``posenc serve`` keeps its spare, and a stopped or full thing stops nothing (issue 43).

- A standby engine that is killed is reaped and replaced at once (before, it stayed a zombie
  until the engine's next death), and the replacement is what the next kill promotes.
- A full shm directory (a small tmpfs, root only) does not stop the standby: readiness comes on
  the engine's ready pipe, not from the manifest file that cannot be written; and the engine's
  "manifest not rewritten" line, retried at every change, is logged once, not once per change.
- A stopped engine (SIGSTOP) does not stop a request for a table the worker has not mapped: it is
  answered exactly while the engine stays stopped (the worker waits for the engine REQUEST_WAIT_S
  at most, engine/reader/client.py, not the 5 s ask timeout; that figure is not asserted here).
- A stopped checksummer is killed past its answer's deadline, so ``verify`` answers, and one that
  is stopped when its engine dies dies with it (SIGKILL on its parent's death).
- The keeper hands a new engine every table its dead predecessor reported, also the reports still
  unread in the dead engine's channel (the cause of tables not adopted after a double kill).
- ``Throttled`` (engine/process/logs.py) on its own clock.

Every process stopped here is continued or killed in a ``finally``; waits are conditions whose
deadlines only catch a hang.
"""

from __future__ import annotations

import os
import platform
import signal
import socket
import sys
import threading

import httpx
import pytest

from posenc.engine.process import upkeep
from posenc.engine.process.keeper import Keeper, KeeperLink
from posenc.engine.process.logs import Throttled
from posenc.engine.reader.client import Client
from tests.integration.test_harden_shm import fill
from tests.procs import children_of, cmdline, wait_for
from tests.service_cases import BIN, reference_safetensors

SMALL = {"length": 512, "tables": [{"family": "rope", "spec": {"head_dim": 16}}]}


def state(pid: int) -> str | None:
    """The process's state letter (/proc/PID/stat: "T" stopped, "Z" a zombie), None: no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def gone(pid: int) -> bool:
    """No process ``pid``, or only its zombie (a process reparented to a pid 1 that reaps nothing)."""
    return state(pid) in (None, "Z")


def exact(url: str, body: dict) -> None:
    """POST ``body`` to /v1/rope, check it is the independent reference's bytes."""
    r = httpx.post(url + "/v1/rope", json=body, headers=BIN, timeout=60)
    assert r.status_code == 200 and r.content == reference_safetensors("rope", body), (r.status_code, body)


@pytest.mark.slow
def test_a_killed_standby_is_reaped_and_replaced_at_once(procs, ns):
    s = procs.serve(SMALL, workers=1, namespace=ns)
    first = wait_for(s.standby_pid, 30, 0.02, "a standby engine")
    os.kill(first, signal.SIGKILL)
    second = wait_for(
        lambda: gone(first) and not os.path.exists(f"/proc/{first}") and s.standby_pid(),
        60,
        0.02,
        "the killed standby reaped (no zombie) and another started",
    )
    assert second != first and "--standby-fd" in cmdline(second)
    assert "standby engine killed by SIGKILL" in s.stderr(), s.output()
    engine = s.engine_pid()
    os.kill(engine, signal.SIGKILL)  # the replacement is the spare the next death promotes
    wait_for(lambda: s.engine_pid() == second, 30, 0.02, "the new standby promoted to engine")
    exact(s.url, {"head_dim": 16, "positions": [1, 300]})
    assert s.stop() == 0, s.output()


@pytest.mark.slow
def test_a_full_shm_directory_keeps_the_standby_and_logs_its_failure_once(procs, small_shm):
    filler = fill(small_shm)
    s = procs.serve(SMALL, workers=1, args=["--shm-dir", small_shm])
    standby = wait_for(s.standby_pid, 30, 0.02, "a standby engine beside an engine with no manifest file")
    for k in range(12):  # each new spec is a change the engine tries to write (and cannot)
        exact(s.url, {"head_dim": 16, "rope_theta": 2000.0 + k, "positions": [0, 100]})
    c = Client(shm_dir=small_shm, namespace=s.namespace)
    wait_for(lambda: len(c.manifest(force=True)["tables"]) >= 13, 30, 0.05, "the 12 specs built")
    os.kill(s.engine_pid(), signal.SIGKILL)
    wait_for(lambda: s.engine_pid() == standby, 30, 0.02, "the standby promoted to engine")
    wait_for(lambda: "engine restarted" in s.stderr(), 30, 0.05, "the restart-to-ready line")
    # one line per engine (each logs the first and then one a minute at most), not one per change
    assert 1 <= s.stderr().count("manifest not rewritten") <= 2, s.output()
    assert s.stop() == 0, s.output()
    os.unlink(filler)
    assert os.listdir(small_shm) == [], os.listdir(small_shm)


@pytest.mark.slow
def test_a_stopped_engine_does_not_stop_a_first_request(procs, ns):
    s = procs.serve(SMALL, workers=1, namespace=ns)
    spec = {"head_dim": 16, "rope_theta": 777.0}
    Client(namespace=ns).table("rope", spec)  # built by the engine, never mapped by the worker
    engine = s.engine_pid()
    os.kill(engine, signal.SIGSTOP)
    try:  # answered, exactly, while the engine is still stopped
        exact(s.url, {**spec, "positions": [3, 200]})
        for k in range(5):
            exact(s.url, {**spec, "positions": [k, 9]})
        assert state(engine) == "T", state(engine)
    finally:
        os.kill(engine, signal.SIGCONT)
    assert s.engine_pid() == engine and s.stop() == 0, s.output()


RECVMSG = {"x86_64": 47, "aarch64": 212}.get(platform.machine())  # the syscall's number


def checksummer_of(engine: int) -> int | None:
    kids = [p for p in children_of(engine) if "posenc.engine.process.checksummer" in cmdline(p)]
    return kids[0] if kids else None


def waiting_for_work(pid: int) -> bool:
    """Whether a checksummer (or a standby engine) is set up (past its imports and its parent-death
    signal) and waits in recvmsg for a segment (its go): stopped earlier, a checksummer would not
    yet have asked to die with its engine."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            return f.read().split()[0] == str(RECVMSG)
    except (OSError, IndexError):
        return False


@pytest.mark.slow
@pytest.mark.skipif(RECVMSG is None, reason="recvmsg's syscall number is known for x86_64 and aarch64")
def test_a_stopped_checksummer_neither_hangs_verify_nor_outlives_its_engine(procs, ns):
    s = procs.serve(SMALL, workers=1, namespace=ns, args=["--verify-interval", "0.3"])
    c = Client(namespace=ns)
    engine = s.engine_pid()
    summer = wait_for(lambda: checksummer_of(engine), 30, 0.02, "the engine's checksummer")
    largest = max(e["nbytes"] for e in c.wait_ready()["tables"].values())
    deadline = upkeep.CRC_WAIT_S + largest / upkeep.CRC_MIN_RATE  # the checksummer's, per table
    stopped = [summer]
    os.kill(summer, signal.SIGSTOP)
    try:
        # the next periodic sweep hands it a table and waits; verify waits behind that sweep
        # (past its deadline the engine kills it and sums alone: verify answers; a verify that
        # hung behind the stopped checksummer would not, and the call's bound catches only that)
        def verify_answers() -> bool:
            r = c.call({"op": "verify"}, timeout=deadline + 120)
            assert r["ok"] and r["tables"] >= 1, r
            return gone(summer)

        wait_for(verify_answers, 120, 0.05, "verify answering and the stopped checksummer killed")
        second = wait_for(lambda: checksummer_of(engine), 60, 0.02, "another checksummer")
        wait_for(lambda: waiting_for_work(second), 120, 0.01, "the new checksummer waiting for work")
        stopped.append(second)
        os.kill(second, signal.SIGSTOP)
        os.kill(engine, signal.SIGKILL)
        wait_for(lambda: gone(second), 60, 0.02, "the stopped checksummer dead with its engine")
    finally:
        for pid in stopped:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
    wait_for(lambda: s.engine_pid() not in (None, engine), 60, 0.05, "the next engine")
    assert s.stop() == 0, s.output()


def test_the_keeper_hands_over_the_reports_a_dead_engine_left_unread():
    """A dead engine's last ``keep`` packets still wait in its channel when the next channel is
    asked for (the keeper's thread for it is held here by the keeper's lock): the next channel
    waits until they are taken, and its handover holds every one (before, it was made at once and
    its handover could be taken first: those tables were not adopted)."""
    k = Keeper()
    a = KeeperLink(k.channel().detach())
    assert a.take("code") == (None, [])
    fd = os.memfd_create("keeper-test")
    got: list[socket.socket] = []
    try:
        with k.lock:  # what engine A reports is not taken yet
            for i in range(40):
                a.keep(f"d{i:02d}", {"file": f"seg{i}"}, fd)
            a.close()  # engine A dies
            asker = threading.Thread(target=lambda: got.append(k.channel()))
            asker.start()
            wait_for(
                lambda: got or _waits_in_channel(asker),
                60,
                0.001,
                "the asker waiting in Keeper.channel for the dead engine's reports to be taken",
                seen=lambda: _stack(asker),
            )
            assert not got, "the next channel was made before the dead engine's reports were taken"
        asker.join(30)
        assert got, "no channel for the next engine"
        b = KeeperLink(got[0].detach())
        code, held = b.take("code")
        try:
            assert code == "code" and sorted(d for d, _, _ in held) == [f"d{i:02d}" for i in range(40)]
        finally:
            for _, _, h in held:
                os.close(h)
        b.close()
    finally:
        os.close(fd)
        k.close()


def _stack(thread: threading.Thread) -> list[str]:
    """The function names on ``thread``'s stack, innermost first."""
    frame, out = sys._current_frames().get(thread.ident), []
    while frame is not None:
        out.append(frame.f_code.co_name)
        frame = frame.f_back
    return out


def _waits_in_channel(thread: threading.Thread) -> bool:
    """Whether ``thread`` is blocked in Keeper.channel joining an earlier channel's reader."""
    stack = _stack(thread)
    return "channel" in stack and bool(stack) and stack[0] in ("join", "_wait_for_tstate_lock")


def test_throttled_logs_the_first_line_then_one_per_interval_with_the_count_suppressed():
    lines, clock = [], [100.0]
    t = Throttled(lines.append, 60.0, now=lambda: clock[0])
    for at in (100.0, 100.1, 130.0, 159.9, 160.0, 161.0, 300.0):
        clock[0] = at
        t("full")
    assert lines == [
        "full",
        "full (3 more like it suppressed in the last 60 s)",
        "full (1 more like it suppressed in the last 60 s)",
    ]
