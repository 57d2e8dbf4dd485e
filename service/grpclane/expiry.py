"""A call's deadline in the gRPC lane: read once, kept in the session, kept as grpcio keeps it.

rules.judge reads a call's ``grpc-timeout`` as grpcio reads it; ``set`` keeps its deadline in the
session's stream (``Session.deadline``), where everything that answers the call reads what is left
of it (``left``: the relay's timeout to grpcio, a fill's and the lane's own stream's timers).
grpcio's server ends a call at its deadline whatever it still holds of it, and so does the lane:

- an answer whose client has not opened its flow-control windows is dropped, and the trailers
  (DEADLINE_EXCEEDED, "Deadline Exceeded") go instead: while a connection holds answers unsent,
  one timer waits for the earliest deadline among them, and ``Session.expire``
  (service/grpclane/h2_expire.c) ends those past theirs;
- a call waiting for room (lane.Connection.waiting: its connection's answers unread) is answered
  DEADLINE_EXCEEDED at its deadline, as grpcio answers a handler still running then.

A connection whose calls carry no ``grpc-timeout`` never looks.
"""

from __future__ import annotations

import asyncio

from posenc.service.grpclane import rules
from posenc.service.grpclane.relay import status_trailers

TRAILERS = status_trailers(*rules.DEADLINE, ())
# a longer deadline is no deadline: grpc.aio's own arithmetic overflows on grpcio's largest ones
# (99999999H answered DEADLINE_EXCEEDED at once), and a call outlives none of them
MAX_DEADLINE_S = 1e8


class Expiry:
    """One connection's (lane.Connection: its session ``s``, ``waiting``, ``flush()``)."""

    def __init__(self, conn):
        self.conn = conn
        self.timed = False  # a call of the connection has had a deadline
        self.timer: asyncio.TimerHandle | None = None  # for the answers unsent
        self.waits: dict[int, asyncio.TimerHandle] = {}  # for the calls waiting for room, by stream

    def set(self, sid: int, t: float) -> None:
        """Stream ``sid``'s call ends ``t`` seconds from now (its ``grpc-timeout``, rules.judge)."""
        if t <= MAX_DEADLINE_S:
            self.conn.s.deadline(sid, asyncio.get_running_loop().time() + t)
            self.timed = True

    def _at(self, sid: int) -> float | None:
        """Stream ``sid``'s deadline (the loop's clock), or None: it has none."""
        return self.conn.s.deadline(sid) if self.timed else None

    def left(self, sid: int) -> float | None:
        """Seconds left before stream ``sid``'s deadline (below 0: past), or None: it has none."""
        at = self._at(sid)
        return None if at is None else at - asyncio.get_running_loop().time()

    def wait(self, sid: int) -> None:
        """Stream ``sid``'s call waits for room: ended at its deadline unless admitted first (``unwait``)."""
        if (at := self._at(sid)) is not None:
            self.waits[sid] = asyncio.get_running_loop().call_at(at, self._waited_past, sid)

    def unwait(self, sid: int) -> None:
        """Stream ``sid``'s call waits no more (admitted, or reset by the client)."""
        if (h := self.waits.pop(sid, None)) is not None:
            h.cancel()

    def _waited_past(self, sid: int) -> None:
        self.waits.pop(sid, None)
        c = self.conn
        if (call := c.waiting.pop(sid, None)) is not None:
            c.waiting_bytes -= len(call[2])
            c.status_only(sid, *rules.DEADLINE)
            c.flush()

    def watch(self) -> None:
        """Before a flush sends, where answers wait unsent: those past their deadline are ended
        (their trailers go in this flush), and the timer waits for the earliest of the rest."""
        s = self.conn.s
        if not s.buffered:
            return
        loop = asyncio.get_running_loop()
        due = s.expire(loop.time(), TRAILERS)[1]
        if due is not None and (self.timer is None or due < self.timer.when()):
            if self.timer is not None:
                self.timer.cancel()
            self.timer = loop.call_at(due, self._due)

    def _due(self) -> None:
        self.timer = None
        self.conn.flush()

    def cancel(self) -> None:
        """The connection is gone: no timer of its is left."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        for h in self.waits.values():
            h.cancel()
        self.waits.clear()
