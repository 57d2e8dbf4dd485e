"""A ModelStreamInfer stream the gRPC lane answers itself (service/grpclane).

Each request message gets its response message in order, as grpcio's ModelStreamInfer gives them
(GrpcV2.stream_answer: a refused one's carries ``error_message`` and the stream goes on). A message
a learnt template answers at once (C's ``grpc_answer``, service/shortcut/hot_grpc.c: the lookup,
the fill, the response message framed and counted) is answered on the read's own turn of the loop,
while no message before it is still being answered; any other is answered in order by the stream's
task: looked up there if it was not, then through the same ``stream_answer`` grpcio's handler runs
with what the lookup found (an entry's answer over the inline bound filled in a thread; none: the
full path, so the process goes on learning). The half-close ends the stream with ``grpc-status: 0``
once every answer is out; a ``grpc-timeout`` that passes first ends it with DEADLINE_EXCEEDED, as
grpcio does; a message over the request limit ends it with grpcio's RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import asyncio
import collections

import grpc

from posenc.service.grpclane import rules
from posenc.service.grpclane.relay import GRPC_HEAD, GRPC_START, Messages, Refused, status_trailers
from posenc.service.v2.hot import FILL_INLINE_BYTES, grpc_answer


class OwnStream:
    def __init__(self, conn, sid: int, own: dict, max_message: int):
        self.conn, self.sid, self.grpc = conn, sid, conn.lane.grpc
        self.messages = Messages(own.get(b"grpc-encoding"), max_message)
        # messages waiting for the task, in order: (bytes handed, message, what _lookup found or None)
        self.pending: collections.deque = collections.deque()
        self.pending_bytes = 0
        self.task: asyncio.Task | None = None
        self.started = self.half_closed = self.done = False
        t = conn.expiry.left(sid)
        loop = asyncio.get_running_loop()
        self.timer = None if t is None else loop.call_later(max(t, 0.0), self._expire)

    def data(self, chunk) -> None:
        try:
            msgs = self.messages.feed(chunk)
        except Refused as e:
            self._end(e.code, str(e))
            return
        for n, m in msgs:
            if self.done:
                return
            # answered now while the connection has room for an answer; else in order, by the task,
            # as room is made (a client that reads none of them holds the connection's bound)
            now = not self.pending and self.task is None and self.conn.room()
            out = self._lookup(m) if now else None
            if out.__class__ is bytes:
                self.conn.s.handed(self.sid, n)  # the connection's window reopens as each is answered
                self._write(out)
            elif self.pending_bytes + len(m) > self.conn.max_request:
                self._end(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"server busy: {len(self.pending)} messages of this stream wait for its answers to be "
                    f"read, holding {self.pending_bytes} bytes; read the answers, or retry later",
                )
                return
            else:
                self.pending.append((n, m, out))
                self.pending_bytes += len(m)
        if self.pending and self.task is None:
            self.task = asyncio.ensure_future(self._answer_pending())

    def end(self) -> None:
        self.half_closed = True
        if not self.pending and self.task is None:
            self._end(grpc.StatusCode.OK, None)

    def cancel(self) -> None:
        """Reset by the client: nothing more is sent."""
        self.done = True
        self._stop()

    async def _answer_pending(self) -> None:
        try:
            while self.pending and not self.done:
                await self.conn.wait_room()
                n, m, hit = self.pending.popleft()
                self.pending_bytes -= len(m)
                self.conn.s.handed(self.sid, n)
                if hit is None:
                    hit = self._lookup(m)
                if hit.__class__ is bytes:
                    out = hit
                else:
                    out = await self.grpc.stream_answer(m, hit)
                    out = len(out).to_bytes(5, "big") + out
                if not self.done:
                    self._write(out)
                    self.conn.flush()
        finally:
            self.task = None
        if self.half_closed and not self.done:
            self._end(grpc.StatusCode.OK, None)
            self.conn.flush()

    def _lookup(self, m: bytes):
        """Message ``m``'s learnt answer (grpc_answer: its response message, framed, counted); else
        the entry found for an answer made off the loop ((entry, positions)), or False: none."""
        g = self.grpc
        entries = g.hot.grpc_entries
        if not entries:
            return False
        most = g.admission.most(FILL_INLINE_BYTES)
        return grpc_answer(m, entries, framed=False, stream=True, most=most, **g.native) or False

    def _write(self, framed: bytes) -> None:
        """A response message, after its 5-byte gRPC prefix."""
        s = self.conn.s
        if not self.started:
            self.started = True
            s.start(self.sid, list(GRPC_START))
        s.write(self.sid, framed)

    def _end(self, code: grpc.StatusCode, details: str | None) -> None:
        if self.done:
            return
        self.done = True
        self._stop()
        trailers = status_trailers(code, details, ())
        if self.started:
            self.conn.s.finish(self.sid, trailers)
        else:
            self.conn.s.only(self.sid, [*GRPC_HEAD, *trailers])
        self.conn.streams.pop(self.sid, None)

    def _expire(self) -> None:
        self.timer = None
        self._end(*rules.DEADLINE)
        self.conn.flush()

    def _stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.task is not None:
            self.task.cancel()
