"""Answers a client leaves unread past their call's deadline, ended as grpcio ends them.

grpcio's server ends a call at its deadline whatever it still holds of it: an answer whose client
has not opened its flow-control windows is dropped, and the trailers (DEADLINE_EXCEEDED, "Deadline
Exceeded") go instead. The lane gives each call with a ``grpc-timeout`` its deadline in the
session (``Session.deadline``); while a connection holds answers unsent, one timer waits for the
earliest deadline among them, and ``Session.expire`` (service/grpclane/h2_expire.c) ends those
past theirs. A connection whose calls carry no ``grpc-timeout`` never looks.
"""

from __future__ import annotations

import asyncio

from posenc.service.grpclane import rules
from posenc.service.grpclane.relay import MAX_DEADLINE_S, status_trailers

TRAILERS = status_trailers(*rules.DEADLINE, ())


class Expiry:
    """One connection's (lane.Connection: its session ``s``, transport ``t`` and ``flush()``)."""

    def __init__(self, conn):
        self.conn = conn
        self.timed = False  # a call of the connection has had a deadline
        self.timer: asyncio.TimerHandle | None = None

    def set(self, sid: int, t: float) -> None:
        """Stream ``sid``'s call ends ``t`` seconds from now (its ``grpc-timeout``, rules.judge)."""
        if t <= MAX_DEADLINE_S:  # a longer one is no deadline (relay.deadline)
            self.conn.s.deadline(sid, asyncio.get_running_loop().time() + t)
            self.timed = True

    def watch(self) -> None:
        """Before a flush sends, where answers wait unsent: those past their deadline are ended
        (their trailers go in this flush), and the timer waits for the earliest of the rest."""
        s = self.conn.s
        if not s.buffered:
            return
        loop = asyncio.get_running_loop()
        due = s.expire(loop.time(), TRAILERS)[1]
        if due is not None and (self.timer is None or due < self.timer.when()):
            self.cancel()
            self.timer = loop.call_at(due, self._due)

    def _due(self) -> None:
        self.timer = None
        self.conn.flush()

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
