"""When a kernel thread takes a core, and for how long: its CPU time read from /proc every few
milliseconds, each burst (growths under 10 ms apart joined) printed with its start and the core it
last ran on. A script, not a test (nothing of posenc runs; it reads the machine beside
bench_tail.py's runs):

    python tests/bench/kernel_bursts.py [--name kdamond] [--seconds 6] [--every-ms 2]

On this project's VMs the thread that recurs is ``kdamond`` (DAMON's reclaim): a burst of 1-2 ms
every 512 ms and one of 4-7 ms at each 5-s aggregation, on either core; requests queue behind it on
the server's core, and the probe's sends behind it on the probe's (docs/benchmarks.md, the tail).
Printed: one line per burst (ms since the start, ms of CPU, the CPU), then the median interval
between bursts and the longest one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

JOIN_S = 0.010  # growths closer than this are one burst (the thread held the reader off its core)


def kthreads() -> dict[int, str]:
    """{pid: name} of the machine's kernel threads (the children of kthreadd)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                head, _, rest = f.read().rpartition(")")
            if rest.split()[1] == "2":
                out[int(d)] = head.partition("(")[2]
        except (OSError, IndexError):
            continue
    return out


def sample(pid: int) -> tuple[int, int]:
    """(CPU ns so far, the CPU it last ran on)."""
    with open(f"/proc/{pid}/schedstat") as f:
        run = int(f.read().split()[0])
    with open(f"/proc/{pid}/stat") as f:
        cpu = int(f.read().rpartition(")")[2].split()[36])  # (field 39: processor)
    return run, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--name", default="kdamond")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--every-ms", type=float, default=2.0)
    a = ap.parse_args()
    pids = [p for p, name in kthreads().items() if name.startswith(a.name)]
    if not pids:
        print(f"no kernel thread named {a.name}* on this machine", file=sys.stderr)
        return 1
    last = {p: sample(p)[0] for p in pids}
    t0 = time.monotonic()
    runs = []  # (s since t0 at its start, ms of CPU, cpu)
    seen = []  # when each growth was read
    while time.monotonic() - t0 < a.seconds:
        # the sampling period, not a wait for a state: the thread's CPU is read every few ms and
        # compared (a tighter loop would take the core it measures from)
        time.sleep(a.every_ms / 1e3)
        for p in pids:
            run, cpu = sample(p)
            if run != last[p]:
                now, ms = time.monotonic() - t0, (run - last[p]) / 1e6
                if runs and now - seen[-1] < JOIN_S:  # one burst
                    runs[-1] = (runs[-1][0], runs[-1][1] + ms, cpu)
                else:
                    runs.append((now, ms, cpu))
                seen.append(now)
                last[p] = run
    for t, ms, cpu in runs:
        print(f"{1e3 * t:9.1f} ms  {ms:6.2f} ms on CPU {cpu}")
    if len(runs) > 1:
        gaps = [b[0] - a_[0] for a_, b in zip(runs, runs[1:])]
        print(
            f"{len(runs)} bursts in {a.seconds:g} s: median interval {1e3 * statistics.median(gaps):.0f} ms, "
            f"longest {max(ms for _, ms, _ in runs):.2f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
