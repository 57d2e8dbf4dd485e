"""The gRPC lane's server: an asyncio protocol per connection over an nghttp2 session (_h2.c).

Per read: the session's events, then one write of every frame they made. A ``call`` event of
``ModelInfer`` (the whole unary request, buffered in C), with a right token where one is
configured, is answered by one C call where a learnt entry answers it (service/shortcut/hot_grpc.c
``grpc_answer``), handed back whole (``Session.answer``: HEADERS, DATA, ``grpc-status: 0``); a learnt
answer over the inline bound is filled in a thread (fill.py). A ModelStreamInfer with
a right token is the lane's own (streams.py). Every other stream, and a ModelInfer no entry answers,
is relayed to grpcio (relay.py), whose handler does not look it up again (``GrpcV2.behind_lane``).

Flow control is nghttp2's: an answer's DATA leaves as the client's windows allow, so a client that
stops reading holds at most a window's bytes of the transport's buffer, and the answers waiting
behind its windows are bounded (``Lane.max_buffered``: past it, new calls are refused as busy);
while the transport's buffer is over its high-water mark the connection stops reading too. An
answer left unread past its call's ``grpc-timeout``, or a call still waiting then, is ended as
grpcio ends it (expiry.py).
Everything a connection keeps is bounded before it is kept: a request's header list (grpcio's
hard limit, in C), the unary bodies not yet complete and the streams' bytes not yet handed on (the
connection's window reopens only as they are handed on), the ModelInfer calls admitted and not yet
answered (each reserves its answer's planned size, GrpcV2.answer_bytes, until its answer is in the
session: a call past the bound waits, holding only its request) and the answers buffered, a
stream's next one written only while there is room. Over every connection together, the answers
held and reserved are bounded by ``Lane.max_held`` (grpc_max_inflight_bytes): a ModelInfer past it
is refused as the Admission refuses it, a stream's next answer waits. When the connection goes,
its session and every stream on it are freed at once. ``Lane.close`` is the
graceful end: GOAWAY's notice at once, the final GOAWAY when the streams in flight have ended (or
the shutdown timeout has passed), then the connections close.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from posenc.service.core.settings import ENV_PREFIX
from posenc.service.grpclane import _h2, rules
from posenc.service.grpclane.expiry import Expiry
from posenc.service.grpclane.fill import Fill
from posenc.service.grpclane.relay import GRPC_HEAD, Relay, inflated, metadata, status_trailers, too_large
from posenc.service.grpclane.streams import OwnStream
from posenc.service.v2.admit import over_bytes
from posenc.service.v2.grpc_server import SERVICE, UNARY_METHODS
from posenc.service.v2.hot import FILL_INLINE_BYTES, grpc_answer

log = logging.getLogger("posenc.service")

MODEL_INFER = f"/{SERVICE}/ModelInfer".encode()
STREAM_INFER = f"/{SERVICE}/ModelStreamInfer".encode()
UNARY = frozenset([f"/{SERVICE}/{m}".encode() for m in UNARY_METHODS] + [b"/grpc.health.v1.Health/Check"])
MAX_STREAMS = 1024  # SETTINGS_MAX_CONCURRENT_STREAMS, per connection
WINDOW = 4 << 20  # the initial stream and connection windows: a large request in few round trips
# a request's header list, as HPACK counts it: grpcio's hard limit (grpc.absolute_max_metadata_size's
# default); past it the stream is refused as grpcio refuses it (RESOURCE_EXHAUSTED, its message)
MAX_METADATA = 16 << 10
# unfinished unary bodies a connection keeps, and calls waiting for room, in requests of the largest
# size: past it, the connection's window stays shut (bodies) or the call is refused as busy (waiting)
REQUEST_MESSAGES = 4


class Lane:
    """The lane of one gRPC process: ``grpc`` its GrpcV2, ``channel`` a grpc.aio channel to its grpcio
    server, ``gate`` the bearer token's (service/core/auth.py) or None. ``max_held``: the answer
    bytes the whole lane may hold and reserve (the Admission's ``grpc_max_inflight_bytes``), or None."""

    def __init__(self, grpc, channel, gate, max_message: int, max_buffered: int, max_held: int | None = None):
        self.grpc, self.channel, self.gate = grpc, channel, gate
        if grpc is not None:  # (None: a lane that only relays, in the tests)
            grpc.behind_lane = True  # every ModelInfer grpcio answers was looked up here first
        self.hot = None if grpc is None else grpc.hot
        self.max_message = max_message
        # response bytes a connection may hold for a client that does not read them (Session.buffered):
        # past it, its new calls are refused (busy) until it reads
        self.max_buffered = max_buffered
        self.max_held = max_held
        self.connections: set[Connection] = set()
        self.server: asyncio.base_events.Server | None = None
        # calls answered by the lane on the read's turn, streams it answered itself, calls relayed
        self.answered = self.streamed = self.relayed = 0
        # answer bytes reserved for relayed ModelInfer calls (all connections), and those calls
        self.reserved = self.inflight = 0
        # connections whose answers wait for the lane's room (held() under max_held)
        self.stalled: set[Connection] = set()
        # for the log: the most answer bytes held and reserved at once, the most relayed ModelInfer
        # calls in flight at once, and the calls refused past max_held
        self.most_held = self.most_inflight = self.refused = 0

    def held(self) -> int:
        """Answer bytes the lane holds (every session's buffered answers) and has reserved."""
        return _h2.live()[3] + self.reserved

    def room(self) -> bool:
        return self.max_held is None or self.held() < self.max_held

    def wake(self, by=None) -> None:
        """The connections whose answers waited for the lane's room, once there is room (``by``: the
        connection that made it, flushed already)."""
        if self.stalled and self.room():
            stalled, self.stalled = self.stalled, set()
            for c in stalled:
                if c is not by:
                    c.flush()

    def fits(self, n: int) -> bool:
        """Whether an answer of ``n`` bytes may be reserved: as the Admission judges it, one always
        fits when nothing is held."""
        held = self.held()
        return self.max_held is None or held == 0 or held + n <= self.max_held

    async def listen(self, host: str, port: int, reuse_port: bool) -> None:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: Connection(self), host, port, reuse_port=reuse_port)

    def authorized(self, headers) -> bool:
        if self.gate is None:
            return True
        for k, v in headers:
            if k == b"authorization":
                return self.gate.check(v)
        return False

    async def close(self, timeout: float) -> None:
        """Stop accepting; GOAWAY's notice to every connection, its final GOAWAY once its streams
        have ended (at most ``timeout`` s), then close."""
        if self.server is not None:
            self.server.close()
        for c in list(self.connections):
            c.shutdown()
        end = asyncio.get_running_loop().time() + timeout
        while any(c.streams or c.s.open_streams for c in self.connections):
            if asyncio.get_running_loop().time() > end:
                break
            await asyncio.sleep(0.01)
        for c in list(self.connections):
            c.goaway()
        await asyncio.sleep(0)  # the closed connections' connection_lost: their sessions freed
        log.info(
            "grpc lane: held at its end: %d sessions, %d streams, %d request bytes, %d answer bytes, "
            "%d blocks of nghttp2's",
            *_h2.live(),
        )
        log.info(
            "grpc lane: %d calls answered by the lane, %d streams of its own, %d relayed to grpcio",
            self.answered,
            self.streamed,
            self.relayed,
        )
        log.info(
            "grpc lane: at most %d relayed ModelInfer calls in flight at once, at most %d bytes of answers "
            "held and reserved at once (the bound: %s, plus one answer), %d calls refused past it",
            self.most_inflight,
            self.most_held,
            self.max_held,
            self.refused,
        )


class Connection(asyncio.Protocol):
    def __init__(self, lane: Lane):
        self.lane = lane
        self.streams: dict = {}  # stream id -> Relay or OwnStream: data(), end(), cancel()
        self.t: asyncio.Transport | None = None
        self.paused = False
        self.max_request = REQUEST_MESSAGES * (lane.max_message + 5)
        self.s = _h2.Session(UNARY, lane.max_message + 5, MAX_STREAMS, WINDOW, MAX_METADATA, self.max_request)
        # ModelInfer calls waiting for room (stream id -> (path, headers, body)), in order, and the
        # bytes of answers reserved for the calls admitted and not yet answered
        self.waiting: dict = {}
        self.waiting_bytes = self.reserved = 0
        # for the log, where a client left answers unread: the most answer bytes held at once,
        # the calls that waited for room and those refused as busy
        self.most = self.waited = self.refused = 0
        self.room_waiters: list[asyncio.Future] = []  # own streams' answers waiting for room (wait_room)
        self.expiry = Expiry(self)  # its calls' deadlines: answers unread and calls waiting past them

    def connection_made(self, transport) -> None:
        self.t = transport
        self.lane.connections.add(self)
        self.flush()  # the server's SETTINGS

    def data_received(self, data: bytes) -> None:
        try:
            events = self.s.recv(data)
        except _h2.Error as e:  # a connection error: nghttp2 queued its GOAWAY
            log.debug("grpc lane: closing a connection: %s", e)
            self.flush()
            self.t.close()
            return
        hot = self.lane.hot  # its entries checked against the engine's manifest once a read
        if hot is not None and hot.grpc_entries:
            hot.fresh()
        for ev in events:
            try:
                self._event(ev)
            except Exception:  # the lane's own fault: that stream is reset, the connection goes on
                log.exception("grpc lane: a %s event of stream %d failed", ev[0], ev[1])
                self.streams.pop(ev[1], None)
                self.s.reset(ev[1], 2)  # INTERNAL_ERROR
        self.flush()

    def _event(self, ev: tuple) -> None:
        kind = ev[0]
        if kind == "call":
            self._call(*ev[1:])
        elif kind == "open":
            self._open(*ev[1:])
        elif kind == "closed" and ev[1] in self.waiting:  # reset while it waited: dropped
            self.waiting_bytes -= len(self.waiting.pop(ev[1])[2])
            self.expiry.unwait(ev[1])
        elif (st := self.streams.get(ev[1])) is None:
            pass
        elif kind == "data":
            st.data(ev[2])
        elif kind == "end":
            st.end()
        elif kind == "closed":  # reset by the client: its call is cancelled
            self.streams.pop(ev[1], None)
            st.cancel()

    def _busy(self, sid: int, waits: int = 0) -> bool:
        """A new call on a connection whose client leaves over ``max_buffered`` bytes of answers
        unread is refused at once (RESOURCE_EXHAUSTED), as the Admission refuses a call past its
        bounds: the lane never holds more than that, plus one answer, for a client that stops reading.
        ``waits``: the request bytes the call would keep while it waits for room; past the
        connection's request bound it is refused alike."""
        n = self.s.buffered
        if waits and self.waiting_bytes + waits > self.max_request:
            message = (
                f"server busy: {len(self.waiting)} calls wait for this connection's answers to be read, "
                f"holding {self.waiting_bytes} bytes of requests; read the answers, or retry later"
            )
        elif n <= self.lane.max_buffered:
            return False
        else:
            message = (
                f"server busy: {n} bytes of answers wait for this connection's client to read them, over "
                f"{self.lane.max_buffered} ({ENV_PREFIX}MAX_RESPONSE_BYTES); read them, or retry later"
            )
        self.status_only(sid, grpc.StatusCode.RESOURCE_EXHAUSTED, message)
        self.refused += 1
        return True

    def status_only(self, sid: int, code: grpc.StatusCode, message: str) -> None:
        """A Trailers-Only answer of ``code`` and ``message``, as grpcio's."""
        self.s.only(sid, [*GRPC_HEAD, *status_trailers(code, message, ())])

    def _judged(self, sid: int, headers) -> bool:
        """What grpcio's transport refuses before any handler runs (rules.judge) is refused here,
        as grpcio refuses it: the lane's answer and the relay's re-encoding would not."""
        verdict, timeout = rules.judge(headers)
        if verdict is None:
            if timeout is not None:
                self.expiry.set(sid, timeout)
            return False
        if verdict == rules.RESET:
            self.s.reset(sid, rules.INTERNAL_ERROR)
        else:
            self.status_only(sid, *verdict)
        return True

    def _call(self, sid: int, path: bytes, headers, body: bytes, total: int) -> None:
        if self._judged(sid, headers) or self._busy(sid):
            return
        over = total > len(body)
        if path == MODEL_INFER and not over and body[:1] == b"\x01":
            body = inflated(headers, body, self.lane.max_message)
        if path == MODEL_INFER and not over:  # its answer's planned bytes are reserved: admitted in order
            if self.waiting or not self.room(lane=False):
                n = self._answer_bytes(body)
                if self._over_held(sid, n) or self._busy(sid, len(body)):
                    return
                self.waiting[sid] = (path, headers, body, n)
                self.waiting_bytes += len(body)
                self.expiry.wait(sid)
                self.waited += 1
                return
            self._admit(sid, path, headers, body)
            return
        r = self._relay(sid, path, headers)
        if (
            over
        ):  # grpcio's refusal of a message over its limit, in its words (the prefix is not the message's)
            r.refuse(grpc.StatusCode.RESOURCE_EXHAUSTED, too_large(total - 5, self.lane.max_message))
            return
        r.data(body)
        r.end()

    async def wait_room(self) -> None:
        """Until the connection and the lane have room for one more answer (a stream's next one)."""
        while not self.room():
            fut = asyncio.get_running_loop().create_future()
            self.room_waiters.append(fut)
            if not self.lane.room():
                self.lane.stalled.add(self)
            await fut

    def room(self, lane: bool = True) -> bool:
        """Whether one more answer may be admitted: the connection's answers buffered and reserved
        are under its bound (after it, at most the bound plus one answer), and (``lane``) the
        lane's under ``max_held``."""
        return self.s.buffered + self.reserved < self.lane.max_buffered and (not lane or self.lane.room())

    def _answer_bytes(self, body: bytes) -> int:
        """The bytes a relayed ModelInfer's answer reserves: as ModelInfer plans it (GrpcV2.answer_bytes)
        where the body is one uncompressed message, else (compressed) the response limit."""
        if len(body) < 5 or body[0] != 0:
            return self.lane.max_buffered
        return self.lane.grpc.answer_bytes(body[5:])

    def _over_held(self, sid: int, n: int) -> bool:
        """A ModelInfer whose answer does not fit the lane's ``max_held`` is refused at once, in the
        Admission's words (RESOURCE_EXHAUSTED), as grpcio's Admission refuses it."""
        if self.lane.fits(n):
            return False
        message = over_bytes(n, self.lane.held(), self.lane.max_held)
        self.status_only(sid, grpc.StatusCode.RESOURCE_EXHAUSTED, message)
        self.refused += 1
        self.lane.refused += 1
        return True

    def _admit(self, sid: int, path: bytes, headers, body: bytes, n: int | None = None) -> None:
        """A ModelInfer call: answered now by a learnt template; or, with its answer's bytes (the
        entry's, ``n`` or _answer_bytes) reserved until its answer is in the session, filled in a
        thread (a learnt entry's answer over the inline bound) or relayed to grpcio; or refused as
        busy where they do not fit the lane's bound."""
        hit = self._answer(sid, headers, body)
        if hit is True:
            self.most = max(self.most, self.s.buffered)
            return
        n = hit[0].size if hit else self._answer_bytes(body) if n is None else n
        if self._over_held(sid, n):
            return
        r = Fill(self, sid, path, headers, body, hit) if hit else self._relay(sid, path, headers)
        self._reserve(r, n)
        if not hit:
            r.data(body)
            r.end()

    def _reserve(self, r, n: int) -> None:
        """``n`` answer bytes reserved for ``r`` (a Relay or a fill.Fill) until its answer is in the session."""
        lane = self.lane
        r.reserved = n
        self.reserved += n
        lane.reserved += n
        lane.inflight += 1
        lane.most_inflight = max(lane.most_inflight, lane.inflight)
        lane.most_held = max(lane.most_held, lane.held())
        r.task.add_done_callback(lambda _t: self.release(r))

    def release(self, r: Relay) -> None:
        """A relayed ModelInfer's reservation ends: its answer is in the session (counted there
        instead), or the call has ended without one."""
        n, r.reserved = r.reserved, 0
        if not n:
            return
        self.reserved -= n
        self.lane.reserved -= n
        self.lane.inflight -= 1
        self.most = max(self.most, self.s.buffered)
        self.lane.most_held = max(self.lane.most_held, self.lane.held())
        self.flush()  # admits the calls that waited for room
        self.lane.wake(self)  # where this connection has gone, the others' still

    def _admit_waiting(self) -> None:
        while self.waiting and self.room(lane=False):
            sid = next(iter(self.waiting))
            path, headers, body, n = self.waiting.pop(sid)
            self.waiting_bytes -= len(body)
            self.expiry.unwait(sid)
            try:
                self._admit(sid, path, headers, body, n)
            except Exception:  # the lane's own fault: that stream is reset, the rest go on
                log.exception("grpc lane: admitting stream %d failed", sid)
                self.streams.pop(sid, None)
                self.s.reset(sid, 2)  # INTERNAL_ERROR

    def _answer(self, sid: int, headers, body: bytes):
        """ModelInfer answered now by a learnt template (True); else the entry found for an answer
        made off the loop ((entry, positions)), or None: grpcio answers it, by its full path (a
        message compressed or not whole, no entry, another length, a position the entry does not
        answer). An answer is made here while the Admission would admit a call of its size."""
        lane = self.lane
        if lane.gate is not None and not lane.authorized(headers):
            return None  # grpcio refuses it, in its words
        g = lane.grpc
        entries = g.hot.grpc_entries
        if not entries:
            return None
        most = g.admission.most(FILL_INLINE_BYTES)
        out = grpc_answer(body, entries, framed=True, stream=False, most=most, **g.native)
        if out.__class__ is not bytes:
            return out
        self.s.answer(sid, (rules.ACCEPT_ENCODING,), out)
        lane.answered += 1
        return True

    def _open(self, sid: int, path: bytes, headers) -> None:
        """A stream given as it comes: ModelStreamInfer with a right token is the lane's own."""
        if self._judged(sid, headers) or self._busy(sid):
            return
        if path == STREAM_INFER and self.lane.authorized(headers):
            self.streams[sid] = OwnStream(self, sid, metadata(headers)[1], self.lane.max_message)
            self.lane.streamed += 1
        else:
            self._relay(sid, path, headers, streamed=True)

    def _relay(self, sid: int, path: bytes, headers, streamed: bool = False) -> Relay:
        """``streamed``: each answer message waits for room (wait_room); a unary call's one answer
        is bounded by its reservation (ModelInfer) or small (the other methods)."""
        r = Relay(self, sid, path, headers, self.lane.max_message, streamed)
        self.lane.relayed += 1
        self.streams[sid] = r
        r.task.add_done_callback(lambda _t, sid=sid: self.streams.pop(sid, None))
        return r

    def flush(self) -> None:
        if self.t is None or self.paused or self.t.is_closing():
            return
        if self.waiting:
            self._admit_waiting()
        if self.expiry.timed:
            self.expiry.watch()
        try:
            out = self.s.send()
        except _h2.Error as e:
            log.debug("grpc lane: closing a connection: %s", e)
            self.t.close()
            return
        if out:
            self.t.write(out)
        if self.room_waiters and self.room():
            waiters, self.room_waiters = self.room_waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        self.lane.wake(self)
        if self.s.done:
            self.t.close()

    def pause_writing(self) -> None:
        self.paused = True
        self.t.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        self.t.resume_reading()
        self.flush()

    def shutdown(self) -> None:
        self.s.shutdown()
        self.flush()

    def goaway(self) -> None:
        self.s.goaway()
        self.flush()
        if self.t is not None:
            self.t.close()

    def connection_lost(self, exc) -> None:
        """Every call on the connection is cancelled and everything it held is freed now: the
        session's streams (header lists, bodies, answers not sent), the calls that waited."""
        self.lane.connections.discard(self)
        self.lane.stalled.discard(self)
        for st in self.streams.values():
            st.cancel()
        self.streams.clear()
        self.waiting.clear()
        self.waiting_bytes = 0
        self.room_waiters.clear()  # their streams' tasks are cancelled above
        self.expiry.cancel()
        if self.waited or self.refused:
            log.info(
                "grpc lane: a connection that left answers unread closed: at most %d bytes of answers "
                "held for it at once (the bound: %d, plus one answer), %d calls waited for room, %d "
                "refused as busy",
                self.most,
                self.lane.max_buffered,
                self.waited,
                self.refused,
            )
        self.s.close()
        self.lane.wake()
