"""The hot lane: uvicorn's httptools protocol, answering a known hot request below ASGI.

Most of a small answer's cost in a uvicorn worker is the ASGI machinery (message dicts, the app
call chain, the cycle object and its task), not posenc: a RoPE row costs posenc ~2 µs. uvicorn
takes a protocol class for ``http=``, so ``posenc serve`` gives it this subclass: one server, one
port, FastAPI for everything else, and uvicorn's workers, limits, keep-alive and shutdown.

A request takes the lane when uvicorn would start its ASGI task (so pipelined answers stay in
order) and, once its body is whole, the C template shortcut answers it (``Service.hot``, the same
call the raw-ASGI front makes). The lane then writes the response straight to the transport, with
the headers the ASGI path writes (uvicorn's default headers, then the front's), and does what
uvicorn does when a response completes. Everything else goes on through ASGI, unchanged:
- another method or path, or the shortcut not in use in this worker;
- ``Expect: 100-continue``, ``Transfer-Encoding`` (chunked bodies), an ``Upgrade``;
- a body over 64 KiB (uvicorn's read high-water mark: ASGI streams it, with its body limit);
- a template not learnt yet, or anything else the shortcut declines (the full path answers, and
  learns the template);
- a transport whose writes are paused (back-pressure: the ASGI path waits for the drain);
- an access log (the ASGI path writes it) or the concurrency limit's 503;
- with a bearer token set, a request without it (ASGI refuses it; service/guard.py).
With CORS on, the app factory registers no front: the lane is off (its middleware adds headers).
A client that leaves before its body is whole is handed to ASGI too (which counts it as 499).
"""

from __future__ import annotations

import logging
from time import perf_counter

from uvicorn.protocols.http.httptools_impl import HIGH_WATER_LIMIT, STATUS_LINE, HttpToolsProtocol

log = logging.getLogger("posenc.service")

# This worker's raw-ASGI front (service/fast.py FastFront), registered by the app factory when the
# lane is on; it holds the Service (the C shortcut), the hot paths and the metrics.
FRONT = None

_OK = STATUS_LINE[200]
_NOT_LANE = frozenset({b"expect", b"transfer-encoding", b"upgrade"})


_in_use = False     # a connection of this worker was served by HotLaneProtocol
answered = 0        # requests this worker answered in the lane (/v1/tables shows it)


def register(front) -> None:
    global FRONT
    FRONT = front


def serving() -> bool:
    """Whether this worker answers hot requests in the lane (/v1/tables shows it)."""
    return FRONT is not None and _in_use


class HotLaneProtocol(HttpToolsProtocol):
    _deferred = None   # (cycle, app, lane) of a lane request whose body is still arriving

    # -- uvicorn's hooks ---------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        global _in_use
        _in_use = True
        super().connection_made(transport)

    def on_message_begin(self) -> None:
        # A lane answer completes inside feed_data and may arm the keep-alive timer while the
        # next request is already in the buffer; a new request disarms it, as data_received does.
        self._unset_keepalive_if_required()
        super().on_message_begin()

    def _start_asgi_task(self, cycle, app) -> None:
        lane = self._lane_of(cycle, app)
        if lane is None:
            return super()._start_asgi_task(cycle, app)
        if cycle.more_body:                  # body still arriving: decide at message complete
            self._deferred = (cycle, app, lane)
        elif self._answer(cycle, lane):
            self._completed()
        else:
            super()._start_asgi_task(cycle, app)

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        d = self._deferred
        if d is not None and len(d[0].body) > HIGH_WATER_LIMIT:   # not a hot body: ASGI streams it
            self._deferred = None
            super()._start_asgi_task(d[0], d[1])

    def on_message_complete(self) -> None:
        super().on_message_complete()
        d = self._deferred
        if d is not None and d[0] is self.cycle:
            self._deferred = None
            if self._answer(d[0], d[2]):
                self._completed()
            else:
                super()._start_asgi_task(d[0], d[1])

    def connection_lost(self, exc) -> None:
        super().connection_lost(exc)
        d = self._deferred
        if d is not None:                    # left mid-body: ASGI sees the disconnect (499)
            self._deferred = None
            super()._start_asgi_task(d[0], d[1])

    # -- the lane ------------------------------------------------------------------------------
    def _lane_of(self, cycle, app):
        """(family, metrics offset) when this request may take the lane, else None."""
        front = FRONT
        scope = cycle.scope
        if front is None or scope["method"] != "POST":
            return None
        lane = front.hot_paths.get(scope["path"])
        if lane is None or app is not self.app or cycle.waiting_for_100_continue or self.access_log:
            return None
        for name, _ in scope["headers"]:
            if name in _NOT_LANE:
                return None
        if front.gate is not None and not front.gate.allows(scope["headers"]):
            return None
        return lane

    def _answer(self, cycle, lane) -> bool:
        """Answer a whole body through the C shortcut and write the response; False if declined."""
        t0 = perf_counter()
        if self.flow.write_paused or self.transport.is_closing():
            return False
        front = FRONT
        try:
            out = front.svc.hot(lane[0], bytes(cycle.body), cycle.scope["headers"])
        except Exception:   # a shortcut's failure must not fail the request: ASGI answers it
            log.exception("template shortcut failed in the hot lane; answering through ASGI")
            return False
        if out is None:
            return False
        head = [_OK]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += front.hot_headers(len(out))
        if not cycle.keep_alive:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        self.transport.writelines((b"".join(head), out))
        cycle.response_started = cycle.response_complete = True
        global answered
        answered += 1
        if not cycle.keep_alive:
            self.transport.close()
        if front.metrics is not None:
            front.metrics.observe_at(lane[1], perf_counter() - t0, len(out))
        return True

    def _completed(self) -> None:
        """What uvicorn's on_response_complete does, iterating over pipelined requests that the
        lane answers in turn (instead of recursing once per request)."""
        while True:
            self.server_state.total_requests += 1
            if self.transport.is_closing():
                return
            self._unset_keepalive_if_required()
            self.flow.resume_reading()
            if not self.pipeline:
                self.timeout_keep_alive_task = self.loop.call_later(
                    self.timeout_keep_alive, self.timeout_keep_alive_handler)
                return
            cycle, app = self.pipeline.pop()
            lane = self._lane_of(cycle, app)
            if lane is not None and cycle.more_body:   # still arriving: answered at message complete
                self._deferred = (cycle, app, lane)
                return
            if lane is None or not self._answer(cycle, lane):
                return super()._start_asgi_task(cycle, app)
