"""The engine's checksummer: a child process that sums segments at the scheduler's idle priority.

    python -m posenc.engine.process.checksummer FD ENGINE_PID

The periodic sweep (upkeep.py) hands it one sealed segment at a time over a ``SOCK_SEQPACKET``
socket (descriptor ``FD``, inherited): a packet ``{"nbytes": n}`` with the segment's descriptor
attached; it answers ``{"crc32": sum}`` (store.crc32 of the segment's bytes, the rule the engine
sealed it with) or ``{"error": text}``, and exits at the end of the stream, and is killed
(SIGKILL, which also ends a stopped process) when the engine dies. It maps each segment
read-only and lets go of it before the next.

Why a process: the workers read the tables without the engine, but they share its cores, and a
checksum is CPU the whole time. At ``SCHED_IDLE`` (``nice 19`` where the kernel refuses that)
the kernel runs it only on a core that nothing else wants, and takes the core back at once when
a worker wakes, so the sweep waits for the workers and never the other way round. In a thread of
the engine the same priority would make the engine's own threads wait for it: a thread at idle
priority that holds the GIL, preempted, holds it until the cores are free.
"""

from __future__ import annotations

import os
import sys


def lower_priority() -> str:
    """This process to SCHED_IDLE, or nice 19: which one it took."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return "idle"
    except (AttributeError, OSError):
        try:
            os.nice(19)
            return "nice 19"
        except OSError:
            return "normal"


def main(argv: list[str]) -> int:
    lower_priority()  # first: the imports below run at idle priority too
    import signal
    import socket

    from ..store import fdpass
    from ..store import segments as store
    from . import proclife

    sock = socket.socket(fileno=int(argv[0]))
    # SIGKILL, not SIGTERM: a checksummer that was stopped (SIGSTOP) would hold a SIGTERM pending
    # and outlive its engine; ENGINE_PID: an engine that died before this call is noticed too
    proclife.exit_with_parent(signal.SIGKILL, int(argv[1]) if len(argv) > 1 else None)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while True:
        try:
            msg, fd = fdpass.recv_packet(sock)
        except (OSError, ValueError):
            return 0
        if msg is None:
            return 0
        try:
            if fd is None:
                raise ValueError("no descriptor came with the request")
            crc = store.crc32(store.map_readonly(fd, int(msg["nbytes"])))  # unmapped as it is dropped
            reply: dict = {"crc32": crc}
        except (OSError, ValueError, KeyError, TypeError) as e:
            reply = {"error": f"{type(e).__name__}: {e}"}
        finally:
            if fd is not None:
                os.close(fd)
        try:
            fdpass.send_packet(sock, reply)
        except OSError:
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
