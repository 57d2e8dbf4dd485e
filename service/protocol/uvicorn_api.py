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
_NO_COUNTS = (None, b"")  # a worker without metrics: serve() counts nothing
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
    _deferred = None  # (cycle, app, route) of a lane request whose body is still arriving
    _active = 0.0  # loop time of the last data or completed response (the keep-alive clock)
    _hot = None  # [route, body] of a request admitted at its headers (no cycle exists yet)
    _close_after = False  # shutdown came while an admitted request was arriving
    _mid = False  # httptools is inside a request (or past an upgrade): no whole-request lane
    _declined = _offered = False  # the lane offered the next request httptools parses / the one it parses
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
            metrics = lane.front.metrics  # what each read hands the C loop, but for its bytes and the time
            self._serve = (
                lane.svc.hot_requests,
                lane.urls,
                lane.post,
                transport.write,
                self.flow,
                _NO_COUNTS if metrics is None else metrics.native,
            )

    def data_received(self, data: bytes) -> None:
        # whole plain requests at the start of data answered, written and counted in one C call
        # (templates.serve), with uvicorn's completion bookkeeping; what they leave goes to httptools
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
        hot, urls, post, write, flow, counts = self._serve
        try:
            at, done, state, error = hot(data, urls, pre, post, self._draining, now, write, flow, counts)
        except Exception as e:  # (C returns its own failures; this is the service's, before it)
            at, done, state, error = 0, 0, replay.SERVE_FAILED, e
        if state == _SERVE_DONE and done:  # the common case: every request of the read answered
            return self._answered(done, now)
        if error is not None:  # a shortcut's failure must not fail the request: ASGI has it
            log.error("template shortcut failed in the hot lane; answering through ASGI", exc_info=error)
        if state == replay.SERVE_CLOSED:  # what follows a close is dropped, as uvicorn does
            self.transport.close()
            return self._answered(done, now)
        self._declined = state == replay.SERVE_DECLINED
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
        self._offered, self._declined = self._declined, False
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
        route = self._admit()
        if route is None:
            if self._offered:
                lanes.mark_offered(self.scope)
            self._start_cycle()
        else:
            self._hot = [route, b""]
        self._dl.enter("body", limits().body_timeout_s)

    def _start_cycle(self) -> None:
        super().on_headers_complete()  # uvicorn builds the request's cycle (and starts it)
        if self._draining and self.cycle is not None:
            self.cycle.keep_alive = False

    def shutdown(self) -> None:
        """SIGTERM: requests in flight or arriving finish; an idle keep-alive connection gets IDLE_GRACE_S."""
        if self._hot is not None:
            self._close_after = True
        elif self._idle():
            self._draining = True
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
        route = self._lane_of(cycle, app)
        if route is None:
            return super()._start_asgi_task(cycle, app)
        if cycle.more_body:  # body still arriving: decided at message complete
            self._deferred = (cycle, app, route)
        elif self._answer(cycle, route):
            self._completed()
        else:
            super()._start_asgi_task(cycle, app)

    def on_body(self, body: bytes) -> None:
        h = self._hot
        if h is not None:
            h[1] += body
            if len(h[1]) > HIGH_WATER_LIMIT:  # not a hot body: ASGI streams the rest
                self._to_asgi(complete=False)
            return
        super().on_body(body)
        d = self._deferred
        if d is not None and len(d[0].body) > HIGH_WATER_LIMIT:
            self._deferred = None
            lanes.mark_offered(d[0].scope)
            super()._start_asgi_task(d[0], d[1])

    def on_message_complete(self) -> None:
        self._mid = self.parser.should_upgrade()  # past an upgrade httptools parses no more
        h = self._hot
        if h is not None:
            keep_alive = (
                self.parser.get_http_version() != "1.0"
                and self.parser.should_keep_alive()
                and not self._close_after
                and not self._draining
            )
            self._dl.idle()  # the body is whole: the limits' timers end here
            if self._write(h[0], h[1], self.headers, keep_alive):
                self._hot = None
                self._completed()
            else:
                self._to_asgi(complete=True)
                self._dl.idle()
            return
        super().on_message_complete()
        self._dl.idle()
        d = self._deferred
        if d is not None and d[0] is self.cycle:
            self._deferred = None
            if self._answer(d[0], d[2]):
                self._completed()
            else:
                super()._start_asgi_task(d[0], d[1])

    def connection_lost(self, exc) -> None:
        if self._hot is not None:  # left mid-body: ASGI sees the disconnect (499)
            self._to_asgi(complete=False)
        self._dl.disarm()
        super().connection_lost(exc)
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        d, self._deferred = self._deferred, None
        if d is not None:  # left mid-body: ASGI sees the disconnect (499)
            super()._start_asgi_task(d[0], d[1])

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

    def _admit(self):
        # at a request's headers: its route if it may take the lane now (then no cycle is built)
        lane = self._lane
        if (
            lane is None
            or self._offered
            or self.access_log
            or self.root_path
            or self.limit_concurrency is not None
        ):
            return None
        route = lane.route(self.url)
        if (
            route is None
            or self.expect_100_continue
            or self.pipeline
            or not self._idle()
            or self.parser.get_method() != b"POST"
            or self.parser.should_upgrade()
        ):
            return None
        return route if lane.admits(self.headers) else None

    def _to_asgi(self, complete: bool) -> None:
        _, body = self._hot  # an admitted request to ASGI, marked offered, with the body read so far
        self._hot = None
        lanes.mark_offered(self.scope)
        self._start_cycle()
        cycle = self.cycle
        cycle.body += body
        if self._close_after:
            cycle.keep_alive = False
        if complete:
            cycle.more_body = False
        cycle.message_event.set()

    def _lane_of(self, cycle, app):
        """The route of a request uvicorn is about to start if the lane may answer it, else None."""
        lane, scope = self._lane, cycle.scope
        if lane is None or scope["method"] != "POST" or lanes.offered(scope):
            return None
        route = lane.route(scope["path"])
        if route is None or app is not self.app or cycle.waiting_for_100_continue or self.access_log:
            return None
        return route if lane.admits(scope["headers"]) else None

    def _answer(self, cycle, route) -> bool:
        """A started request's cycle answered in the lane; False (its scope marked) if not."""
        if not self._write(route, bytes(cycle.body), cycle.scope["headers"], cycle.keep_alive):
            lanes.mark_offered(cycle.scope)
            return False
        cycle.response_started = cycle.response_complete = True
        return True

    def _write(self, route, body: bytes, headers, keep_alive: bool) -> bool:
        """Answer a whole body in the lane and write it; False if declined or not writable now."""
        if self.flow.write_paused or self.transport.is_closing():
            return False
        r = self._lane.respond(route, body, headers, keep_alive, self.server_state.default_headers)
        if r is None:
            return False
        self.transport.writelines(r)
        if not keep_alive:
            self.transport.close()
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
            route = self._lane_of(cycle, app)
            if route is not None and cycle.more_body:  # still arriving: answered at message complete
                self._deferred = (cycle, app, route)
                return
            if route is None or not self._answer(cycle, route):
                return super()._start_asgi_task(cycle, app)
