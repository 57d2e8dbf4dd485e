"""Connection limits below ASGI: what uvicorn 0.54 does not bound by itself.

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive``, but a connection that
never finishes its request head (idle from the start, or trickling headers) or its body is held
forever, headers are not limited in size by httptools, and ``limit_concurrency`` answers 503 to
requests but still accepts and holds every connection. ``Guard`` is a mixin for uvicorn's HTTP
protocol classes that adds, per worker (settings in engine/settings.py):

- ``max_connections``: a connection beyond it is answered 503 and closed at once (so a flood of
  idle sockets cannot take a worker's descriptors; it is also kept below RLIMIT_NOFILE);
- ``header_timeout_s``: from the connection's start, or a keep-alive request's first byte, to the
  end of its head; then 408 and close;
- ``body_timeout_s``: from the end of the head to the end of the body (a huge Content-Length that
  never arrives); then the connection is closed (the app sees a disconnect);
- ``max_header_bytes``: a request head larger than this is answered 431 and closed while it is
  still arriving (httptools would otherwise buffer all of it);
- at shutdown, an idle keep-alive connection is closed after ``IDLE_GRACE_S``, not at once, and a
  request that arrives meanwhile is answered (``connection: close``) rather than reset.

``GuardedHttpTools`` is uvicorn's httptools protocol with the guard; a subclass of the protocol
(e.g. a hot lane) keeps it by deriving from ``GuardedHttpTools`` or by listing ``Guard`` first.
"""

from __future__ import annotations

import resource

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from posenc.engine.settings import current

DESCRIPTOR_HEADROOM = 64   # descriptors kept for everything but client connections
IDLE_GRACE_S = 0.5         # at shutdown, an idle keep-alive connection may still bring one request


def _raw(status: bytes) -> bytes:
    return b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


BUSY, TIMEOUT, HEAD_TOO_LARGE = _raw(b"503 Service Unavailable"), _raw(b"408 Request Timeout"), \
    _raw(b"431 Request Header Fields Too Large")


class Limits:
    def __init__(self, s=None):
        s = s or current()
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        cap = s.max_connections if soft == resource.RLIM_INFINITY else min(
            s.max_connections, max(1, soft - DESCRIPTOR_HEADROOM))
        self.max_connections = cap
        self.header_timeout_s = s.header_timeout_s
        self.body_timeout_s = s.body_timeout_s
        self.max_header_bytes = s.max_header_bytes
        self.tick = min(self.header_timeout_s, self.body_timeout_s)   # the farthest a timer is set (Guard)


_limits: Limits | None = None


def limits() -> Limits:
    global _limits
    if _limits is None:
        _limits = Limits()
    return _limits


class Guard:
    """The limits above as a mixin. The two timeouts are one deadline per connection: entering a
    stage sets it (loop time; None while answering or idle), and one timer checks it. A timer is
    never set further ahead than the shorter timeout (``tick``), and a new deadline is never
    nearer than that, so the pending timer always fires by the deadline: a request costs two
    reads of the clock, not a timer made and cancelled per stage (a few µs each)."""

    _stage = "head"        # head: reading a request head; body: its body; app: answering
    _deadline = None       # loop time by which the stage must end; None: no limit now
    _timer = None          # the one pending check of the deadline
    _head_bytes = 0
    _draining = False

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        lim = limits()
        if len(self.connections) > lim.max_connections:
            self._refuse(BUSY)
            return
        self._arm(lim.header_timeout_s)

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._stage == "head":
            self._head_bytes += len(data)
        super().data_received(data)
        if self._stage == "head" and self._head_bytes > limits().max_header_bytes \
                and not self.transport.is_closing():
            self._refuse(HEAD_TOO_LARGE)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._stage = "head"
        if self._deadline is None:         # a keep-alive connection's next request
            self._head_bytes = 0
            self._arm(limits().header_timeout_s)

    def shutdown(self) -> None:
        """Graceful shutdown (SIGTERM): a request in flight finishes (uvicorn's rule). An idle
        keep-alive connection gets IDLE_GRACE_S more: a request already on its way is answered,
        with ``connection: close``, instead of being reset with the socket."""
        if self.cycle is None or self.cycle.response_complete:
            self._draining = True
            self.loop.call_later(IDLE_GRACE_S, self._close_if_idle)
        else:
            super().shutdown()

    def _close_if_idle(self) -> None:
        if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
            self.transport.close()

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        if self._draining and self.cycle is not None:
            self.cycle.keep_alive = False
        self._body_stage()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._app_stage()

    def _body_stage(self) -> None:
        self._stage = "body"
        self._arm(limits().body_timeout_s)

    def _app_stage(self) -> None:
        self._stage = "app"
        self._deadline = None

    # -- helpers ---------------------------------------------------------------------------------
    def _arm(self, seconds: float) -> None:
        self._deadline = self.loop.time() + seconds
        if self._timer is None:
            self._timer = self.loop.call_later(min(seconds, limits().tick), self._check)

    def _disarm(self) -> None:
        self._deadline = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        if self._deadline is None:         # answering or idle: no timer until the next stage
            return
        left = self._deadline - self.loop.time()
        if left > 0:
            self._timer = self.loop.call_later(min(left, limits().tick), self._check)
        else:
            self._deadline = None
            self._expired()

    def _expired(self) -> None:
        if self._stage == "head":
            self._refuse(TIMEOUT)
        elif self._stage == "body" and not self.transport.is_closing():
            self.transport.close()   # the app, waiting for the body, sees a disconnect

    def _refuse(self, raw: bytes) -> None:
        """Answer ``raw`` and close, unless a response is being written (the refusal would land
        inside it): then only close. ``self.cycle`` is the last request whose head came, so on a
        keep-alive connection it is the previous request's, complete by now."""
        self._disarm()
        if not self.transport.is_closing():
            c = self.cycle
            if c is None or not c.response_started or c.response_complete:
                self.transport.write(raw)
            self.transport.close()


class GuardedHttpTools(Guard, HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits above."""
