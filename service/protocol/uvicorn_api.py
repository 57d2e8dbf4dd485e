"""The one door to uvicorn's internals: ``Protocol``, the HTTP protocol ``posenc serve`` gives uvicorn.

It subclasses uvicorn's httptools protocol with the connection limits (service/protocol/limits.py)
and the hot lane (service/protocol/lane.py), relying on names uvicorn does not publish (methods and
attributes of the protocol, cycle, server state, flow control; its response head's bytes). Only
this module and uvicorn_check.py, which lists them, touch them; ``problems()`` checks each at
import (a protocol and a cycle built as uvicorn builds them). When one fails, ``posenc serve``
runs uvicorn's own protocol, says so in its log and /v1/tables
(``lane: "off: uvicorn X.Y not supported (...)"``). pyproject.toml bounds uvicorn.
"""

from __future__ import annotations

import fcntl
import logging
import struct
import termios

from uvicorn.protocols.http.httptools_impl import HIGH_WATER_LIMIT, HttpToolsProtocol

from posenc.service.protocol import lane as lanes
from posenc.service.protocol.limits import (
    BUSY,
    HEAD_TOO_LARGE,
    IDLE_GRACE_S,
    TIMEOUT,
    Deadline,
    HeadTooLarge,
    head_size,
    limits,
)

# whether this uvicorn has what Protocol relies on, checked at import (uvicorn_check.py): the names
# posenc serve and the app read from here
from posenc.service.protocol.uvicorn_check import PROBLEMS, SUPPORTED, VERSION, WHY_OFF, problems
from posenc.service.shortcut import templates as replay

__all__ = ["PROBLEMS", "SUPPORTED", "VERSION", "WHY_OFF", "Protocol", "problems"]

log = logging.getLogger("posenc.service")
_SERVE_DONE = replay.SERVE_DONE


UNREAD_RECHECK_S = 0.05  # an idle connection with bytes not read yet is looked at again after this


def _unread(transport) -> bool:
    """True when the kernel holds bytes of this connection that the loop has not read yet
    (FIONREAD); False where that cannot be told."""
    sock = transport.get_extra_info("socket")
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0] > 0
    except (OSError, AttributeError, ValueError, struct.error):
        return False


class Protocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the connection limits (service/protocol/limits.py) and,
    when the app put a ``Lane`` in the lifespan state, the hot lane (service/protocol/lane.py says
    which requests and why). Keep-alive: one timer per connection, not one per request; data and
    completions note the time, and the timer, when it fires, closes an idle connection or waits."""

    _lane = None  # the worker's lane.Lane
    _whole_ok = False  # the whole-request lane may run on this connection
    _deferred = None  # (cycle, app) of a lane request whose body is still arriving
    _active = 0.0  # loop time of the last data or completed response (the keep-alive clock)
    _mid = False  # httptools is inside a request (or past an upgrade): no whole-request lane
    _head_bytes, _draining = 0, False  # of the request head arriving; shutdown has begun

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._dl = Deadline(self.loop, self._expired)
        lim = limits()
        if len(self.connections) > lim.max_connections:
            return self._refuse(BUSY)
        self._dl.enter("head", lim.header_timeout_s)
        lane = self._lane = self.app_state.get(lanes.STATE_KEY)
        if lane is not None:
            lane.serving = True
            transport.set_write_buffer_limits(high=lanes.WRITE_AT_ONCE)
            self._whole_ok = (
                lane.gate is None
                and not self.access_log
                and not self.root_path
                and self.limit_concurrency is None
            )
            self._serve = lane.reader().bind(transport.write, self.flow)  # this connection's C loop

    def data_received(self, data: bytes) -> None:
        # whole plain requests at the start of data answered, written and counted in one C call
        # (the connection's templates.Reader), with uvicorn's completion bookkeeping; what they
        # leave goes to httptools
        if (
            not self._whole_ok
            or self._mid
            or (self.cycle is not None and not self.cycle.response_complete)
            or self.pipeline
            or self.transport.is_closing()
        ):
            return self._parse(data)
        lane, now = self._lane, self.loop.time()
        h, d = lane.heads, self.server_state.default_headers
        pre = h[2] if h[0] is d else lane.heads_of(d)[2]
        try:
            at, done, state, error = self._serve(data, pre, now)
        except Exception as e:  # (C returns its own failures; this is a call it refused)
            at, done, state, error = 0, 0, replay.SERVE_FAILED, e
        if state == _SERVE_DONE and done:  # the common case: every request of the read answered
            return self._answered(done, now)
        if error is not None:  # a shortcut's failure must not fail the request: ASGI has it
            log.error("template shortcut failed in the hot lane; answering through ASGI", exc_info=error)
        if state == replay.SERVE_CLOSED:  # what follows a close is dropped, as uvicorn does
            self.transport.close()
            return self._answered(done, now)
        if done:
            self._answered(done, now)
            if at == len(data):
                return
            data = data[at:]
        self._parse(data)

    def _parse(self, data: bytes) -> None:
        """httptools parses ``data``; a head past ``max_header_bytes`` is refused while it arrives."""
        dl = self._dl
        if dl.stage == "head":
            self._head_bytes += len(data)
        super().data_received(data)
        if (
            dl.stage == "head"
            and self._head_bytes > limits().max_header_bytes
            and not self.transport.is_closing()
        ):
            self._refuse(HEAD_TOO_LARGE)

    def on_message_begin(self) -> None:
        self._mid = True
        super().on_message_begin()
        dl = self._dl
        dl.stage = "head"
        if dl.at is None:  # a keep-alive connection's next request
            self._head_bytes = 0
            dl.arm(limits().header_timeout_s)

    def _unset_keepalive_if_required(self) -> None:
        self._active = self.loop.time()

    def on_response_complete(self) -> None:  # an ASGI response completed
        self._completed()

    def timeout_keep_alive_handler(self) -> None:
        self.timeout_keep_alive_task = None
        if self.transport.is_closing() or not self._idle() or self.pipeline or self._deferred:
            return  # busy: armed again when its response completes
        left = self._active + self.timeout_keep_alive - self.loop.time()
        if left <= 0 and _unread(self.transport):
            # a request arrived while the loop was busy and is not read yet (the loop runs due
            # timers before it polls sockets): closing now would reset the connection under a
            # client that sent within the timeout. Its read comes next and moves the clock.
            left = UNREAD_RECHECK_S
        if left > 0:
            self.timeout_keep_alive_task = self.loop.call_later(left, self.timeout_keep_alive_handler)
        else:
            self.transport.close()

    def send_400_response(self, msg: str) -> None:  # not after a refusal (a head too large stops httptools)
        return None if self.transport.is_closing() else super().send_400_response(msg)

    def on_headers_complete(self) -> None:
        if (
            head_size(self.url, self.headers) > limits().max_header_bytes
        ):  # (a whole head may come in one read)
            self._refuse(HEAD_TOO_LARGE)
            raise HeadTooLarge  # httptools stops here; uvicorn's 400 is not written after the 431
        super().on_headers_complete()  # uvicorn builds the request's cycle (and starts it)
        if self._draining and self.cycle is not None:
            self.cycle.keep_alive = False
        self._dl.enter("body", limits().body_timeout_s)

    def shutdown(self) -> None:
        """SIGTERM: requests in flight or arriving finish; an idle keep-alive connection gets IDLE_GRACE_S."""
        if self._idle():
            self._draining = True
            if self._whole_ok:
                self._serve.closing = True  # its answers close the connection
            self.loop.call_later(IDLE_GRACE_S, self._close_if_idle)
        else:
            super().shutdown()

    def _close_if_idle(self) -> None:
        if self._idle() and not self.transport.is_closing():
            self.transport.close()

    def _idle(self) -> bool:  # no request of this connection is being answered
        return self.cycle is None or self.cycle.response_complete

    def _expired(
        self, stage: str
    ) -> None:  # head: 408; body: closed (the app, waiting for it, sees a disconnect)
        self._refuse(TIMEOUT if stage == "head" else b"")

    def _refuse(self, raw: bytes) -> None:
        """Answer ``raw`` and close; only close while a response is being written (``self.cycle``)."""
        self._dl.disarm()
        if not self.transport.is_closing():
            c = self.cycle
            if c is None or not c.response_started or c.response_complete:
                self.transport.write(raw)
            self.transport.close()

    def _start_asgi_task(self, cycle, app) -> None:
        if not self._takes(cycle, app):
            super()._start_asgi_task(cycle, app)
        elif cycle.more_body:  # body still arriving: answered at message complete
            self._deferred = (cycle, app)
        elif self._answer(cycle):
            self._completed()
        else:
            super()._start_asgi_task(cycle, app)

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        d = self._deferred
        if d is not None and len(d[0].body) > HIGH_WATER_LIMIT:  # not a hot body: ASGI streams the rest
            self._deferred = None
            super()._start_asgi_task(*d)

    def on_message_complete(self) -> None:
        self._mid = self.parser.should_upgrade()  # past an upgrade httptools parses no more
        super().on_message_complete()
        self._dl.idle()  # the body is whole: the limits' timers end here
        d = self._deferred
        if d is not None and d[0] is self.cycle:
            self._deferred = None
            if self._answer(d[0]):
                self._completed()
            else:
                super()._start_asgi_task(*d)

    def connection_lost(self, exc) -> None:
        self._dl.disarm()
        super().connection_lost(exc)
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        d, self._deferred = self._deferred, None
        if d is not None:  # left mid-body: ASGI sees the disconnect (499)
            super()._start_asgi_task(*d)

    def _answered(self, done: int, now: float) -> None:
        # after done whole-request answers: uvicorn's completion bookkeeping and the limits' stage
        self._lane.answered += done
        self.server_state.total_requests += done
        self._dl.idle()
        if self.flow.read_paused:
            self.flow.resume_reading()
        self._active = now
        if self.timeout_keep_alive_task is None and not self.transport.is_closing():
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

    def _takes(self, cycle, app) -> bool:
        """Whether the lane may answer a request uvicorn is about to start."""
        lane, scope = self._lane, cycle.scope
        return (
            lane is not None
            and scope["method"] == "POST"
            and app is self.app
            and not cycle.waiting_for_100_continue
            and not self.access_log
            and lane.takes(scope["path"], scope["headers"])
        )

    def _answer(self, cycle) -> bool:
        """A whole request's cycle answered in the lane and written; False if declined or not
        writable now (then ASGI answers it)."""
        if self.flow.write_paused or self.transport.is_closing():
            return False
        scope = cycle.scope
        r = self._lane.respond(
            scope["path"],
            bytes(cycle.body),
            scope["headers"],
            cycle.keep_alive,
            self.server_state.default_headers,
        )
        if r is None:
            return False
        self.transport.writelines(r)
        if not cycle.keep_alive:
            self.transport.close()
        cycle.response_started = cycle.response_complete = True
        return True

    def _completed(self) -> None:
        # uvicorn's on_response_complete (with the keep-alive timer above), iterating over
        # pipelined requests that the lane answers in turn instead of recursing
        while True:
            self.server_state.total_requests += 1
            if self.transport.is_closing():
                return
            self.flow.resume_reading()
            if not self.pipeline:
                self._active = self.loop.time()
                if self.timeout_keep_alive_task is None:
                    self.timeout_keep_alive_task = self.loop.call_later(
                        self.timeout_keep_alive, self.timeout_keep_alive_handler
                    )
                return
            cycle, app = self.pipeline.pop()
            if not self._takes(cycle, app):
                return super()._start_asgi_task(cycle, app)
            if cycle.more_body:  # still arriving: answered at message complete
                self._deferred = (cycle, app)
                return
            if not self._answer(cycle):
                return super()._start_asgi_task(cycle, app)
