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
- with a bearer token set, a request without it (ASGI refuses it; service/front/auth.py).
With CORS on, the app factory registers no front: the lane is off (its middleware adds headers).
A client that leaves before its body is whole is handed to ASGI too (which counts it as 499).

A request that arrives whole in one read, while the connection has nothing else in progress (the
common case: a client waiting for each answer), is answered before httptools sees it at all
(``_whole``): one C call (``Service.hot_request``; service/shortcut/_hot.c ``lane``) takes the read's
bytes, checks that they hold a plain POST to a hot path (a strict subset of what httptools
parses; anything unusual is left to it, see the C) with a known template, and returns the whole
response, head included; Python writes it and does uvicorn's bookkeeping: no parser callback,
no scope, no timer. What it leaves goes to httptools and on below.

A KServe v2 REST binary infer whose template service/v2/hot.py has learnt (family and table
models, raw positions in, binary tensors out) takes the same protocol-level lane: the same call
the raw front's v2 shortcut makes, the same headers, answers up to the loop's inline size.

A request that can take the lane is admitted at its headers (``_admit``), before uvicorn builds
its ASGI cycle: the cycle is built only if the lane hands the request on (``_to_asgi``, which
then does what uvicorn's header callback would have done). Requests queued behind one in
progress (pipelining) keep uvicorn's cycles and take the lane when uvicorn would start them.
"""

from __future__ import annotations

import logging
from time import perf_counter

from uvicorn.protocols.http.httptools_impl import HIGH_WATER_LIMIT, STATUS_LINE

from posenc.service.protocol.limits import GuardedHttpTools

log = logging.getLogger("posenc.service")

# This worker's raw-ASGI front (service/front/front.py FastFront), registered by the app factory when the
# lane is on; it holds the Service (the C shortcut), the hot paths and the metrics.
FRONT = None

_OK = STATUS_LINE[200]
_NOT_LANE = frozenset({b"expect", b"transfer-encoding", b"upgrade"})
_defaults = (None, b"")   # (uvicorn's default header list, those headers as bytes): renewed each second
_pre = (None, b"")        # (the same list, the whole-request lane's head up to the content length)


_in_use = False     # a connection of this worker was served by HotLaneProtocol
answered = 0        # requests this worker answered in the lane (/v1/tables shows it)


def register(front) -> None:
    global FRONT
    FRONT = front


def serving() -> bool:
    """Whether this worker answers hot requests in the lane (/v1/tables shows it)."""
    return FRONT is not None and _in_use


_V2 = object()      # the lane of a v2 REST binary infer: (_V2, path)


def _v2_lane(front, path: str):
    """The lane of a v2 REST infer path whose template service/v2/hot.py has learnt, or None."""
    v2 = front.v2_hot
    return (_V2, path) if v2 is not None and path in v2.paths else None


def _v2_answer(front, path: str, body: bytes, headers):
    """(body, head before its length, head after it, metrics route) of a learnt v2 REST binary
    infer answered on the loop, or Nones: small answers only (larger ones go to ASGI, which
    fills them in a thread). The head holds the headers the raw front's v2 shortcut sends."""
    hit = front.v2_hot.rest(path, body, headers)
    if hit is None or not hit[0].inline:
        return None, None, None, None
    e, positions = hit
    out = e.answer(positions)
    if out is None:
        return None, None, None, None
    return out, front.V2_PRE, b"\r\n" + b"".join(b"%s: %s\r\n" % (k.lower(), v) for k, v in e.headers), e.route


def _default_headers(state) -> bytes:
    """uvicorn's default headers (the date header changes every second) as written bytes."""
    global _defaults
    if _defaults[0] is not state.default_headers:
        _defaults = (state.default_headers, b"".join(b"%s: %s\r\n" % h for h in state.default_headers))
    return _defaults[1]


def _pre_of(state) -> bytes:
    """The head of a whole-request lane answer up to its content length's digits."""
    global _pre
    if _pre[0] is not state.default_headers:
        _pre = (state.default_headers, _OK + _default_headers(state) + FRONT.HOT_HEADERS[0])
    return _pre[1]


class HotLaneProtocol(GuardedHttpTools):
    """uvicorn's httptools protocol with the connection limits (service/protocol/limits.py) and the lane."""

    _deferred = None   # (cycle, app, lane) of a lane request whose body is still arriving
    _active = 0.0      # loop time of the last data or completed response (the keep-alive clock)
    _hot = None        # [lane, body] of a request admitted at its headers (no cycle exists yet)
    _no_lane = False   # building a cycle for a request the lane handed on
    _close_after = False   # shutdown came while an admitted request was arriving
    _mid = False       # httptools is inside a request (or past an upgrade): no whole-request lane
    _whole_ok = False  # the whole-request lane may run on this connection (settings allow it)

    # -- uvicorn's hooks ---------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        global _in_use
        _in_use = True
        super().connection_made(transport)
        front = FRONT
        self._whole_ok = front is not None and front.gate is None and not self.access_log \
            and not self.root_path and self.limit_concurrency is None

    def data_received(self, data: bytes) -> None:
        """The whole-request lane first (see the module doc): the plain hot requests at the start
        of ``data`` are answered and what uvicorn does when a response completes is done; what
        they leave goes to httptools. (One method, not two: a Python call is ~5% of an answer.)"""
        if not self._whole_ok or self._mid or (self.cycle is not None and not self.cycle.response_complete) \
                or self.pipeline or self.transport.is_closing():
            return super().data_received(data)
        front, transport, flow = FRONT, self.transport, self.flow
        svc, metrics, post = front.svc, front.metrics, front.HOT_HEADERS[1]
        pre = _pre[1] if _pre[0] is self.server_state.default_headers else _pre_of(self.server_state)
        at, n, done, now = 0, len(data), 0, self.loop.time()
        while at < n and not flow.write_paused:   # back-pressure: httptools and ASGI wait
            t0 = perf_counter()
            try:
                got = svc.hot_request(data, at, front.hot_urls, pre, post, self._draining, now)
            except Exception:   # a shortcut's failure must not fail the request: httptools has it
                log.exception("template shortcut failed in the hot lane; answering through ASGI")
                got = None
            if got is None:
                break
            at, lane, out, keep_alive = got
            transport.write(out)
            done += 1
            if metrics is not None:
                metrics.observe_at(lane[1], perf_counter() - t0, len(out))
            if not keep_alive:           # what follows a close is dropped, as uvicorn does
                transport.close()
                return self._answered(done, now)
        if done:
            self._answered(done, now)
            if at == n:
                return
            data = data[at:]
        super().data_received(data)

    def on_message_begin(self) -> None:
        self._mid = True
        super().on_message_begin()

    # -- keep-alive: one timer per connection, not one per response -------------------------------
    # uvicorn arms a timer when a response completes and cancels it when data comes: a TimerHandle
    # made and cancelled per request, a few µs of a lane answer. Here data and completions only
    # note the time; the one pending timer, when it fires, closes the connection if it has been
    # idle for the whole timeout (no request in progress), else waits for the rest.
    def _unset_keepalive_if_required(self) -> None:
        self._active = self.loop.time()

    def on_response_complete(self) -> None:   # an ASGI response completed (cycle.on_response)
        self._completed()

    def timeout_keep_alive_handler(self) -> None:
        self.timeout_keep_alive_task = None
        if self.transport.is_closing():
            return
        if (self.cycle is not None and not self.cycle.response_complete) or self.pipeline or self._deferred:
            return                           # busy: armed again when its response completes
        left = self._active + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self.timeout_keep_alive_task = self.loop.call_later(left, self.timeout_keep_alive_handler)
        else:
            self.transport.close()

    def on_headers_complete(self) -> None:
        lane = self._admit()
        if lane is None:
            return super().on_headers_complete()
        self._hot = [lane, b""]
        self._body_stage()                   # the connection guard's body timeout

    def shutdown(self) -> None:
        if self._hot is not None:            # answer the request arriving, then close
            self._close_after = True
            return
        super().shutdown()

    def _start_asgi_task(self, cycle, app) -> None:
        if self._no_lane:
            return super()._start_asgi_task(cycle, app)
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
        h = self._hot
        if h is not None:
            h[1] += body
            if len(h[1]) > HIGH_WATER_LIMIT:     # not a hot body: ASGI streams the rest
                self._to_asgi(complete=False)
            return
        super().on_body(body)
        d = self._deferred
        if d is not None and len(d[0].body) > HIGH_WATER_LIMIT:   # not a hot body: ASGI streams it
            self._deferred = None
            super()._start_asgi_task(d[0], d[1])

    def on_message_complete(self) -> None:
        self._mid = self.parser.should_upgrade()   # past an upgrade httptools parses no more
        h = self._hot
        if h is not None:
            keep_alive = (self.parser.get_http_version() != "1.0" and self.parser.should_keep_alive()
                          and not self._close_after and not self._draining)
            self._app_stage()                # the body is whole: the guard's timers end here
            if self._write(h[0], h[1], self.headers, keep_alive):
                self._hot = None
                self._completed()
            else:
                self._to_asgi(complete=True)
                self._app_stage()
            return
        super().on_message_complete()
        d = self._deferred
        if d is not None and d[0] is self.cycle:
            self._deferred = None
            if self._answer(d[0], d[2]):
                self._completed()
            else:
                super()._start_asgi_task(d[0], d[1])

    def connection_lost(self, exc) -> None:
        if self._hot is not None:            # left mid-body: ASGI sees the disconnect (499)
            self._to_asgi(complete=False)
        super().connection_lost(exc)
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        d = self._deferred
        if d is not None:                    # left mid-body: ASGI sees the disconnect (499)
            self._deferred = None
            super()._start_asgi_task(d[0], d[1])

    # -- the lane ------------------------------------------------------------------------------
    def _answered(self, done: int, now: float) -> None:
        """After ``done`` whole-request answers: uvicorn's completion bookkeeping (its
        on_response_complete, with the keep-alive clock above) and the guard's stage."""
        global answered
        answered += done
        self.server_state.total_requests += done
        self._stage, self._deadline = "app", None   # the connection guard: no stage to time
        if self.flow.read_paused:
            self.flow.resume_reading()
        self._active = now
        if self.timeout_keep_alive_task is None and not self.transport.is_closing():
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def _admit(self):
        """At a request's headers: (family, metrics offset) if it may take the lane now, before
        any ASGI cycle is built; None lets uvicorn build one."""
        front = FRONT
        if front is None or self.access_log or self.root_path or self.limit_concurrency is not None:
            return None
        lane = front.hot_urls.get(self.url) or _v2_lane(front, self.url)   # the exact target: no query
        if lane is None or self.expect_100_continue or self.pipeline:           # string, no escapes
            return None
        if (self.cycle is not None and not self.cycle.response_complete) or self.parser.get_method() != b"POST" \
                or self.parser.should_upgrade():
            return None
        for name, _ in self.headers:
            if name in _NOT_LANE:
                return None
        if front.gate is not None and not front.gate.allows(self.headers):
            return None
        return lane

    def _to_asgi(self, complete: bool) -> None:
        """Hand an admitted request to ASGI: build its cycle as uvicorn would have at its headers
        (and start its task), with the body read so far."""
        lane, body = self._hot
        self._hot = None
        self._no_lane = True
        try:
            super().on_headers_complete()
        finally:
            self._no_lane = False
        cycle = self.cycle
        cycle.body += body
        if self._close_after:
            cycle.keep_alive = False
        if complete:
            cycle.more_body = False
        cycle.message_event.set()

    def _lane_of(self, cycle, app):
        """(family, metrics offset) when this request may take the lane, else None."""
        front = FRONT
        scope = cycle.scope
        if front is None or scope["method"] != "POST":
            return None
        lane = front.hot_paths.get(scope["path"]) or _v2_lane(front, scope["path"])
        if lane is None or app is not self.app or cycle.waiting_for_100_continue or self.access_log:
            return None
        for name, _ in scope["headers"]:
            if name in _NOT_LANE:
                return None
        if front.gate is not None and not front.gate.allows(scope["headers"]):
            return None
        return lane

    def _answer(self, cycle, lane) -> bool:
        """A queued request's cycle answered in the lane; False if the shortcut declined."""
        if not self._write(lane, bytes(cycle.body), cycle.scope["headers"], cycle.keep_alive):
            return False
        cycle.response_started = cycle.response_complete = True
        return True

    def _write(self, lane, body: bytes, headers, keep_alive: bool) -> bool:
        """Answer a whole body through the C shortcut and write the response; False if declined."""
        t0 = perf_counter()
        if self.flow.write_paused or self.transport.is_closing():
            return False
        front = FRONT
        try:
            if lane[0] is _V2:
                out, pre, post, route = _v2_answer(front, lane[1], body, headers)
            else:
                out, (pre, post) = front.svc.hot(lane[0], body, headers), front.HOT_HEADERS
        except Exception:   # a shortcut's failure must not fail the request: ASGI answers it
            log.exception("template shortcut failed in the hot lane; answering through ASGI")
            return False
        if out is None:
            return False
        head = b"%s%s%s%d%s%s\r\n" % (_OK, _default_headers(self.server_state), pre, len(out), post,
                                        b"" if keep_alive else b"connection: close\r\n")
        self.transport.writelines((head, out))
        global answered
        answered += 1
        if not keep_alive:
            self.transport.close()
        if front.metrics is not None:
            if lane[0] is _V2:
                front.metrics.observe(route, 200, perf_counter() - t0, len(out))
            else:
                front.metrics.observe_at(lane[1], perf_counter() - t0, len(out))
        return True

    def _completed(self) -> None:
        """What uvicorn's on_response_complete does (with the keep-alive timer above), iterating
        over pipelined requests that the lane answers in turn (instead of recursing once per
        request)."""
        while True:
            self.server_state.total_requests += 1
            if self.transport.is_closing():
                return
            self.flow.resume_reading()
            if not self.pipeline:
                self._active = self.loop.time()
                if self.timeout_keep_alive_task is None:
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
