"""Connection limits below ASGI: what uvicorn does not bound by itself.

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive``, but a connection that
never finishes its request head (idle from the start, or trickling headers) or its body is held
forever, headers are not limited in size by httptools, and ``limit_concurrency`` answers 503 to
requests but still accepts and holds every connection. The protocol (service/protocol/uvicorn_api.py
``Guarded``) adds, per worker, from the settings (service/core/settings.py):

- ``max_connections``: a connection beyond it is answered 503 and closed at once (so a flood of
  idle sockets cannot take a worker's descriptors; it is also kept below RLIMIT_NOFILE);
- ``header_timeout_s``: from the connection's start, or a keep-alive request's first byte, to the
  end of its head; then 408 and close;
- ``body_timeout_s``: from the end of the head to the end of the body (a huge Content-Length that
  never arrives); then the connection is closed (the app sees a disconnect);
- ``max_header_bytes``: a request head larger than this is answered 431 and closed, while it is
  still arriving (httptools would otherwise buffer all of it) or when it is whole (a head that
  came in one read is measured at its end, ``head_size``);
- at shutdown, an idle keep-alive connection is closed after ``IDLE_GRACE_S``, not at once, and a
  request that arrives meanwhile is answered (``connection: close``) rather than reset.

This module holds the numbers and the refusals' bytes; the protocol applies them.
"""

from __future__ import annotations

import resource

from posenc.service.core.settings import current

DESCRIPTOR_HEADROOM = 64  # descriptors kept for everything but client connections
IDLE_GRACE_S = 0.5  # at shutdown, an idle keep-alive connection may still bring one request


def _raw(status: bytes) -> bytes:
    return b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


BUSY, TIMEOUT, HEAD_TOO_LARGE = (
    _raw(b"503 Service Unavailable"),
    _raw(b"408 Request Timeout"),
    _raw(b"431 Request Header Fields Too Large"),
)


class HeadTooLarge(Exception):
    """Raised in an httptools callback: parsing stops at a head refused with 431."""


def head_size(url: bytes, headers) -> int:
    """A whole head's bytes as httptools read them: the request line (with the shortest method),
    each ``name: value\r\n`` and the blank line (whitespace around values not counted)."""
    return len(url) + sum(len(n) + len(v) + 4 for n, v in headers) + len(b"GET  HTTP/1.1\r\n\r\n")


class Limits:
    def __init__(self, s=None):
        s = s or current()
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        cap = (
            s.max_connections
            if soft == resource.RLIM_INFINITY
            else min(s.max_connections, max(1, soft - DESCRIPTOR_HEADROOM))
        )
        self.max_connections = cap
        self.header_timeout_s = s.header_timeout_s
        self.body_timeout_s = s.body_timeout_s
        self.max_header_bytes = s.max_header_bytes
        self.tick = min(self.header_timeout_s, self.body_timeout_s)  # the farthest a timer is set


_limits: Limits | None = None


def limits() -> Limits:
    global _limits
    if _limits is None:
        _limits = Limits()
    return _limits


class Deadline:
    """The two timeouts of one connection as one deadline: entering a stage sets it (loop time;
    None while answering or idle), and one timer checks it. The timer is never set further ahead
    than the shorter timeout (``tick``) and a new deadline is never nearer than that, so the
    pending timer always fires by the deadline: a request costs two reads of the clock, not a
    timer made and cancelled per stage (a few µs each). ``expired(stage)`` is called when a
    stage's time is up."""

    __slots__ = ("loop", "expired", "stage", "at", "timer")

    def __init__(self, loop, expired):
        self.loop, self.expired = loop, expired
        self.stage = "head"  # head: reading a request head; body: its body; app: answering
        self.at = None  # loop time by which the stage must end; None: no limit now
        self.timer = None  # the one pending check

    def enter(self, stage: str, seconds: float) -> None:
        self.stage = stage
        self.arm(seconds)

    def arm(self, seconds: float) -> None:
        self.at = self.loop.time() + seconds
        if self.timer is None:
            self.timer = self.loop.call_later(min(seconds, limits().tick), self._check)

    def idle(self) -> None:
        """The app stage: answering, or waiting for the next request (keep-alive has its timer)."""
        self.stage, self.at = "app", None

    def disarm(self) -> None:
        self.at = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _check(self) -> None:
        self.timer = None
        if self.at is None:  # answering or idle: no timer until the next stage
            return
        left = self.at - self.loop.time()
        if left > 0:
            self.timer = self.loop.call_later(min(left, limits().tick), self._check)
        else:
            self.at = None
            self.expired(self.stage)
