"""A call the gRPC lane does not answer, relayed to the process's grpcio server (service/grpclane).

Each such stream becomes one call on a grpc.aio channel to the private socket, as a stream-stream
call of raw messages whatever the method (gRPC's wire form is the same for every kind: a unary
method gets its one message and the half-close, and grpcio answers a unary method sent none or two
exactly as it would answer the client). What crosses: the request's metadata (its custom headers,
``-bin`` ones base64-decoded), what is left of its deadline (``grpc-timeout``, kept in the session:
expiry.py; 50 ms later: grpcio behind judges it as it would alone, never the relay's own timer
first; the client's timer is its own), its
messages (decompressed where the client compressed them: gzip, deflate) and its half-close;
back: the initial metadata, each response message, the status, its message and the trailing
metadata; a client's RST_STREAM cancels the call. What grpcio's transport would refuse before its
handler runs is refused by the lane first, in grpcio's words (rules.py), since the grpc.aio client
re-encodes what crosses; a compressed message grpcio could not decompress gets grpcio's status.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import urllib.parse
import zlib

import grpc

from posenc.service.grpclane.rules import ACCEPT_ENCODING, b64, forwardable

log = logging.getLogger("posenc.service")

# Request headers that are HTTP/2's or gRPC's own, not the call's metadata (grpcio sets its own)
NOT_METADATA = frozenset(
    (
        b"te",
        b"content-type",
        b"user-agent",
        b"grpc-timeout",
        b"grpc-encoding",
        b"grpc-accept-encoding",
        b"content-length",
        b"host",
    )
)
_ZLIB = {b"gzip": 31, b"deflate": 15}  # wbits: gzip's header, zlib's
DEADLINE_SLACK_S = 0.05
GRPC_HEAD = ((b":status", b"200"), (b"content-type", b"application/grpc"))
GRPC_START = (*GRPC_HEAD, ACCEPT_ENCODING)  # the headers of an answer with messages, as grpcio's


def metadata(headers) -> tuple[list, dict]:
    """(the call's metadata for grpc.aio, {name: value} of the protocol's own headers). A value
    grpc.aio cannot send (rules.forwardable) is left out: grpcio takes it, and its handler
    here reads none but ``authorization``, whose such value no token matches."""
    md, own = [], {}
    for k, v in headers:
        if k[:1] == b":" or k in NOT_METADATA:
            own.setdefault(k, v)
        elif k.endswith(b"-bin"):
            d = b64(v)
            if d is not None:
                md.append((k.decode("ascii"), d))
        elif forwardable(v):
            md.append((k.decode("ascii"), v.decode("ascii")))
        else:
            log.debug("grpc lane: metadata %r left out of a relayed call (not printable ASCII)", k)
    return md, own


def wire_metadata(md) -> list:
    """grpc.aio metadata as header pairs (``-bin`` values base64 without padding)."""
    out = []
    for k, v in md or ():
        if k.endswith("-bin"):
            out.append((k.encode(), base64.b64encode(v if isinstance(v, bytes) else v.encode()).rstrip(b"=")))
        else:
            out.append((k.encode(), v.encode("latin-1") if isinstance(v, str) else v))
    return out


def status_trailers(code: grpc.StatusCode, details: str | None, md) -> list:
    """grpc-status and grpc-message (empty where there is none: grpcio sends it so), then ``md``."""
    message = urllib.parse.quote(details or "", safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~").encode()
    return [(b"grpc-status", str(code.value[0]).encode()), (b"grpc-message", message), *wire_metadata(md)]


def too_large(n: int, limit: int) -> str:
    """grpcio's own refusal of a request message over ``grpc.max_receive_message_length``."""
    return f"SERVER: Received message larger than max ({n} vs. {limit})"


class Refused(ValueError):
    """A request message grpcio refuses: ``code`` and grpcio's own message."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code


def decompress(msg: bytes, encoding: bytes | None, max_message: int) -> bytes:
    """A message flagged compressed, decompressed as grpcio does, or Refused in grpcio's words."""
    wbits = _ZLIB.get(encoding or b"")
    if wbits is None:
        raise Refused(grpc.StatusCode.INTERNAL, "Compression bit set but no encoding configured")
    if not msg:
        return b""
    d = zlib.decompressobj(wbits)
    try:
        out = d.decompress(msg, max_message + 1)
    except zlib.error:
        raise Refused(grpc.StatusCode.INTERNAL, "Decompression failed due to zlib error") from None
    if len(out) > max_message:
        raise Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, "Decompressed message larger than max")
    if not d.eof:
        raise Refused(grpc.StatusCode.INTERNAL, "Decompression failed due to data error")
    if d.unused_data:
        raise Refused(grpc.StatusCode.INTERNAL, "Decompression failed due to not all input consumed")
    return out


def inflated(headers, body: bytes, max_message: int) -> bytes:
    """A unary body of one compressed message as the same message uncompressed, which the learnt
    entries are looked up by and grpcio's handler reads (the lane answers it uncompressed, as
    grpcio does); as it is where grpcio refuses it (the relay then refuses it in its words)."""
    if int.from_bytes(body[1:5], "big") != len(body) - 5:
        return body
    try:
        m = decompress(body[5:], metadata(headers)[1].get(b"grpc-encoding"), max_message)
    except Refused:
        return body
    return b"\0" + len(m).to_bytes(4, "big") + m


class Messages:
    """A stream's request bytes, as gRPC messages: 5-byte prefix (compressed flag, length), then
    the message. ``feed`` returns the whole messages so far, each as (its bytes on the wire, the
    message decompressed), or raises Refused."""

    def __init__(self, encoding: bytes | None, max_message: int):
        self.buf = bytearray()
        self.encoding, self.max_message = encoding, max_message

    def feed(self, data) -> list[tuple[int, bytes]]:
        self.buf += data
        out = []
        while len(self.buf) >= 5:
            n = int.from_bytes(self.buf[1:5], "big")
            if n > self.max_message:
                raise Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, too_large(n, self.max_message))
            if len(self.buf) < 5 + n:
                break
            flag, msg = self.buf[0], bytes(self.buf[5 : 5 + n])
            del self.buf[: 5 + n]
            out.append((5 + n, decompress(msg, self.encoding, self.max_message) if flag else msg))
        return out


class Relay:
    """One stream relayed to grpcio. ``conn`` is the lane's connection (lane.Connection: its
    session ``s``, ``flush()`` and ``wait_room()``); the task ends when grpcio's answer has been
    handed to it. ``streamed``: each answer message waits for the connection's room first, so a
    client that stops reading makes the lane hold at most its bound plus one message (grpcio's
    flow control holds the rest)."""

    def __init__(self, conn, sid: int, path: bytes, headers, max_message: int, streamed: bool = False):
        self.conn, self.sid, self.streamed = conn, sid, streamed
        self.reserved = 0  # the answer's bytes reserved for it (lane.Connection._admit), until it is written
        self.md, own = metadata(headers)
        # what is left of the client's deadline, and a little: grpcio behind then judges the deadline
        # as it would alone (it answers a quick method even past it), and the relay's own timer never
        # fires first
        t = conn.expiry.left(sid)
        self.timeout = None if t is None else max(t, 0.0) + DEADLINE_SLACK_S
        self.messages = Messages(own.get(b"grpc-encoding"), max_message)
        self.queue: asyncio.Queue = asyncio.Queue()
        self.path = path.decode("latin-1")
        self.task = asyncio.ensure_future(self._run())

    def data(self, chunk) -> None:
        try:
            for item in self.messages.feed(chunk):
                self.queue.put_nowait(item)
        except Refused as e:
            self.refuse(e.code, str(e))

    def end(self) -> None:
        self.queue.put_nowait(None)

    def cancel(self) -> None:
        self.task.cancel()

    def refuse(self, code: grpc.StatusCode, message: str) -> None:
        """A status now, from the lane itself (grpcio never sees the call)."""
        self.task.cancel()
        self.conn.status_only(self.sid, code, message)
        self.conn.flush()

    async def _requests(self):
        """The messages as grpcio takes them; a stream's bytes given back to the connection's window
        as each goes (Session.handed: the lane holds at most the connection's request bound)."""
        while (item := await self.queue.get()) is not None:
            if self.streamed:
                self.conn.s.handed(self.sid, item[0])
                self.conn.flush()
            yield item[1]

    async def _run(self) -> None:
        s, sid = self.conn.s, self.sid
        call = self.conn.lane.channel.stream_stream(self.path)(
            self._requests(), metadata=self.md or None, timeout=self.timeout
        )
        started = False
        try:
            try:
                async for m in call:
                    if not started:
                        started = s.start(sid, [*GRPC_START, *wire_metadata(await call.initial_metadata())])
                    if self.streamed:
                        await self.conn.wait_room()
                    s.write(sid, len(m).to_bytes(5, "big"))  # flag 0: the lane sends uncompressed
                    s.write(sid, m)  # not joined to its prefix first: one copy of an answer, not two
                    self.conn.release(self)  # its reservation, now in the session's count
                    self.conn.flush()
                code, details, trailing = (
                    await call.code(),
                    await call.details(),
                    await call.trailing_metadata(),
                )
            except grpc.aio.AioRpcError as e:
                code, details, trailing = e.code(), e.details(), e.trailing_metadata()
            if started:
                s.finish(sid, status_trailers(code, details, trailing))
            else:
                initial = await call.initial_metadata() if code == grpc.StatusCode.OK else ()
                s.only(sid, [*GRPC_HEAD, *wire_metadata(initial), *status_trailers(code, details, trailing)])
            self.conn.flush()
        except asyncio.CancelledError:
            call.cancel()
            raise
        except Exception:  # the lane's own fault, never the client's: the stream is reset, the rest goes on
            log.exception("grpc lane: relaying %s failed", self.path)
            call.cancel()
            s.reset(sid, 2)  # INTERNAL_ERROR
            self.conn.flush()
