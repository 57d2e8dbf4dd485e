"""``python -m posenc.engine.process.main``: the engine as ``posenc serve`` starts it, a child
process with the flags of ``posenc engine`` (cli.py) plus four of its own: ``--ready-fd N``
reports readiness on that descriptor, ``--exit-with-parent`` ends it with its parent,
``--keeper-fd N`` is its end of the keeper's channel (engine/process/keeper.py), and
``--standby-fd N`` makes it a standby: it imports everything and computes its code's digest
(built_by.py), then waits on that socket for the ``go`` packet, which carries its keeper channel,
and only then runs (reads its config, takes the namespace, adopts, publishes). ``posenc serve``
keeps one standby so that a dead engine's successor starts without the interpreter's start and
the imports, about half a second of a restart. The socket closed without a ``go``: it exits 0.

A standby runs at the scheduler's idle priority (SCHED_IDLE, else nice 19; set first, so its
imports run at it too) while it waits: its start, about half a second of a core, shares the
workers' cores and would preempt a worker in the middle of its requests. At ``go`` it takes the
normal priority back where the kernel lets it (root or CAP_SYS_NICE; else it stays idle, and says
so): an engine at idle priority gets no CPU while the workers keep the cores busy, and a worker
waits for its answers (a manifest, a table's mapping) up to its request wait (0.25 s) before
computing alone, so an idle engine would turn a busy worker's every new table into that wait.
The engine's own work once started is small (tests/bench/bench_tail.py: under a millisecond of CPU
a second); the checksum sweep runs in a child at idle priority (checksummer.py)."""

from __future__ import annotations

import sys

if __name__ == "__main__" and "--standby-fd" in sys.argv:  # a standby run, not imported
    from .checksummer import lower_priority

    lower_priority()

import argparse  # noqa: E402  (after the priority: the imports run at it)
import dataclasses  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402

from ..core.errors import EngineRunning, SpecError  # noqa: E402
from ..store import fdpass  # noqa: E402
from . import built_by, proclife  # noqa: E402
from .cli import add_engine_args, engine_options  # noqa: E402
from .core import log, run  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="posenc-engine")
    add_engine_args(p)
    p.add_argument("--ready-fd", type=int)
    p.add_argument("--exit-with-parent", action="store_true")
    p.add_argument("--keeper-fd", type=int)
    p.add_argument("--standby-fd", type=int)
    args = p.parse_args(argv)
    s, opts = engine_options(args)
    keeper_fd = args.keeper_fd
    if args.standby_fd is not None:
        if args.exit_with_parent:
            proclife.exit_with_parent()
        keeper_fd = standby(args.standby_fd)
        if keeper_fd is None:
            return 0
        normal_priority()
    opts = dataclasses.replace(opts, keeper_fd=keeper_fd)
    try:
        return run(s.tables, opts, ready_fd=args.ready_fd, parent_watch=args.exit_with_parent)
    except SpecError as e:
        log(f"invalid table config: {e}")
        return 2
    except EngineRunning as e:
        log(str(e))
        return 1


def normal_priority() -> None:
    """A standby that becomes the engine takes the scheduler's normal priority back (module doc)."""
    try:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    except (AttributeError, OSError) as e:
        log(
            f"the engine keeps the standby's idle priority ({e}): a worker may wait for it up to its request wait"
        )


def standby(fd: int) -> int | None:
    """Wait, ready to run, for the ``go`` packet on socket ``fd``: its keeper channel's descriptor
    (None: closed without one, or a packet that is not ``go``)."""
    built_by.current()  # the digest of the code this process imported, before it is needed
    with socket.socket(fileno=fd) as sock:
        msg, keeper = fdpass.recv_packet(sock)
    if msg is None or msg.get("op") != "go":
        fdpass.close_all([keeper] if keeper is not None else [])
        return None
    return keeper


if __name__ == "__main__":
    sys.exit(main())
