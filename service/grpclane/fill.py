"""A learnt ModelInfer answered off the loop by the gRPC lane (lane.Connection._admit): an entry's
answer over the inline bound, or outputs into shared memory, filled in a thread within the
Admission (``GrpcV2.answer_found``), then answered as a call answered on the read's turn is.

Its answer's planned bytes stay reserved (``reserved``, lane.Connection._reserve) until the answer
is in the session or the thread has finished, so the lane's bounds hold while it is made. Where the
entry declines, the call is relayed to grpcio with the same reservation. A ``grpc-timeout`` that
passes first is answered as grpcio's server answers a handler still running at its deadline
(DEADLINE_EXCEEDED, "Deadline Exceeded", trailers only, at the deadline); what the thread makes
after it is dropped.
"""

from __future__ import annotations

import asyncio
import logging

from posenc.service.grpclane import rules

log = logging.getLogger("posenc.service")


class Fill:
    """One call's fill: ``task`` answers it; the connection's streams hold it until it is answered."""

    def __init__(self, conn, sid: int, path: bytes, headers, body: bytes, hit):
        self.conn, self.sid = conn, sid
        self.reserved = 0  # lane.Connection._reserve's, until the answer is in the session
        self.expired = False
        conn.streams[sid] = self
        t = conn.expiry.left(sid)
        self.timer = None if t is None else asyncio.get_running_loop().call_later(max(t, 0.0), self._expire)
        self.task = asyncio.ensure_future(self._run(path, headers, body, hit))

    def cancel(self) -> None:
        """Reset by the client, or its connection gone: nothing more is sent."""
        self._stop_timer()
        self.task.cancel()

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expire(self) -> None:
        """The deadline passed first: grpcio's answer now; the reservation is kept until the thread ends."""
        self.timer = None
        self.expired = True
        c = self.conn
        c.streams.pop(self.sid, None)
        c.status_only(self.sid, *rules.DEADLINE)
        c.flush()

    async def _run(self, path: bytes, headers, body: bytes, hit) -> None:
        c, sid = self.conn, self.sid
        try:
            out = await c.lane.grpc.answer_found(hit)
        except Exception:  # the lane's own fault: that stream is reset, the connection goes on
            log.exception("grpc lane: filling stream %d failed", sid)
            out = False
        self._stop_timer()
        if self.expired:  # answered at its deadline: what was made is dropped
            return
        c.streams.pop(sid, None)
        if out is False:
            c.s.reset(sid, 2)  # INTERNAL_ERROR
        elif out is None:  # the entry declines: grpcio answers, within the same reservation
            r = c._relay(sid, path, headers)
            r.reserved, self.reserved = self.reserved, 0
            r.task.add_done_callback(lambda _t: c.release(r))
            r.data(body)
            r.end()
            return
        else:
            c.s.answer(sid, (rules.ACCEPT_ENCODING,), out)
            c.lane.answered += 1
            c.release(self)  # now in the session's count, as a relay's (at the task's end: counted twice)
        c.flush()
