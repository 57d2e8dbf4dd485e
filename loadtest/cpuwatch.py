"""How much CPU *other* processes took while a step ran, on a machine shared with other people.

/proc/stat gives every CPU's busy time; /proc/<pid>/stat gives ours (the runner with its in-process
probe, the servers and their children, a finished wrk through RUSAGE_CHILDREN). Busy minus ours is
what someone else used: a step during which others took a noticeable share of a core measured them
as much as posenc, and the report says so. ``wait_idle`` holds a step back until others are quiet.
"""

from __future__ import annotations

import os
import resource
import time

_TCK = os.sysconf("SC_CLK_TCK")


def _machine_busy_s() -> float:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return (sum(v[:8]) - idle) / _TCK


def _children(pids: set[int]) -> set[int]:
    out = set(pids)
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for n in names:
        if not n.isdigit():
            continue
        try:
            with open(f"/proc/{n}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid in pids:
            out.add(int(n))
    return out


def _proc_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TCK  # utime + stime
    except (OSError, ValueError, IndexError):
        return 0.0


class Watch:
    """``with Watch(server_pids) as w: ...``; then ``w.others_cores`` (mean cores used by others)."""

    def __init__(self, pids=()):
        self.roots = {os.getpid(), *pids}
        self.others_cores = 0.0
        self.ours_cores = 0.0
        self.busy_cores = 0.0

    def _ours(self) -> float:
        ch = resource.getrusage(resource.RUSAGE_CHILDREN)
        return sum(_proc_s(p) for p in self._pids) + ch.ru_utime + ch.ru_stime

    def __enter__(self):
        self._pids = _children(self.roots)
        self._t = time.monotonic()
        self._busy = _machine_busy_s()
        self._ours0 = self._ours()
        return self

    def __exit__(self, *exc):
        dt = max(1e-6, time.monotonic() - self._t)
        busy = _machine_busy_s() - self._busy
        ours = self._ours() - self._ours0
        self.busy_cores = busy / dt
        self.ours_cores = ours / dt
        self.others_cores = max(0.0, busy - ours) / dt
        return False


def wait_idle(
    pids=(), max_wait: float = 30.0, threshold: float = 0.05, window: float = 0.5
) -> tuple[float, float]:
    """Wait (at most ``max_wait`` s) for a ``window`` in which others use < ``threshold`` cores.
    Returns (seconds waited, others' cores in the last window)."""
    t0 = time.monotonic()
    while True:
        with Watch(pids) as w:
            time.sleep(window)
        waited = time.monotonic() - t0
        if w.others_cores < threshold or waited >= max_wait:
            return waited, w.others_cores
