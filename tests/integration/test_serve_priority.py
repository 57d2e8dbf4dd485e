"""A standby engine yields the core to the workers while it waits (engine/process/main.py): it runs
at the scheduler's idle priority, read back from the kernel, and takes the normal one back when it
becomes the engine (the workers wait on the engine's answers: an idle engine would get no CPU while
they keep the cores busy); serve, its workers and the engine keep the normal priority (nothing is
inherited), also after the engine is replaced; a table the engine builds on demand answers the
reference values."""

from __future__ import annotations

import os
import signal

import httpx

from posenc.engine.core.formats import read_safetensors
from tests.independent import assert_answer
from tests.procs import wait_for
from tests.service_cases import BIN, CONFIG


def policy(pid: int) -> tuple[int, int]:
    return os.sched_getscheduler(pid), os.getpriority(os.PRIO_PROCESS, pid)


def wait_idle(pid: int, who: str) -> None:
    """An engine process lowers its priority first thing, before its imports: a process just
    started may not have yet."""
    wait_for(lambda: os.sched_getscheduler(pid) == os.SCHED_IDLE, what=f"{who} (pid {pid}) at SCHED_IDLE")


def test_the_standby_yields_the_core_and_the_engine_and_workers_do_not(procs):
    s = procs.serve(CONFIG, workers=2)
    engine = wait_for(s.engine_pid, what="serve's engine")
    standby = wait_for(s.standby_pid, what="serve's standby")
    wait_idle(standby, "the standby")
    workers = wait_for(lambda: len(s.worker_pids()) == 2 and s.worker_pids(), what="two workers")
    for p in (s.pid, engine, *workers):
        assert policy(p) == (os.SCHED_OTHER, 0), (p, policy(p))

    body = {"head_dim": 40, "positions": [3, 2047, 5000]}  # no table holds it: built on demand
    r = httpx.post(s.url + "/v1/rope", json=body, headers=BIN, timeout=60)
    assert r.status_code == 200, r.text
    assert_answer("rope", body, read_safetensors(r.content)[0], what="a spec built on demand")

    os.kill(engine, signal.SIGKILL)  # the standby takes over, and serve starts another standby
    successor = wait_for(lambda: s.engine_pid() not in (None, engine) and s.engine_pid(), what="a new engine")
    assert successor == standby
    fresh = wait_for(lambda: s.standby_pid() not in (None, standby) and s.standby_pid(), what="a new standby")
    # the standby took the normal priority back at its go (this suite runs as root: CAP_SYS_NICE)
    wait_for(
        lambda: policy(successor) == (os.SCHED_OTHER, 0),
        what=f"the new engine (pid {successor}) at normal priority",
    )
    wait_idle(fresh, "the new standby")
    for p in (s.pid, *s.worker_pids()):
        assert policy(p) == (os.SCHED_OTHER, 0), (p, policy(p))
    assert s.stop() == 0, s.output()
