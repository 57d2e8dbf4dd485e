"""The hot lane's policy: which requests the protocol may answer below ASGI, and their bytes.

Most of a small answer's cost in a uvicorn worker is the ASGI machinery (message dicts, the app
call chain, the cycle object and its task), not posenc: a RoPE row costs posenc ~2 µs. So the
worker's HTTP protocol (service/protocol/uvicorn_api.py, the only code that touches uvicorn's
internals) asks this worker's ``Lane`` first, and answers what it accepts with the C template
shortcut, straight to the transport:

- the requests that arrive whole in one read, on a connection with nothing else in progress, are
  offered whole (``Service.hot_requests``: one C call from the read's bytes to every response
  written and counted, one that needs a header or text computed first too);
- otherwise a POST to a hot path is admitted at its headers (``admits``) and offered once its body
  is whole (``respond``), as is a pipelined request when uvicorn would start it.

A request is offered once: when the shortcut declines it (a template not learnt yet, a format
its template does not write, anything unusual; JSON it answers, as the full path writes it), the
protocol marks its ASGI scope (``OFFERED``) and nothing on its way offers it again; the full path
answers it and learns its template.

The app (service/front/app.py) makes one ``Lane`` per worker from its raw-ASGI front and hands it
to the protocol through the ASGI lifespan state (``STATE_KEY``): no module global, no import of
the front. Without one (``--lane off``, CORS, a token's refusal, an unsupported uvicorn) the
protocol is plain guarded uvicorn.

The answer's head is the one the ASGI path writes (uvicorn's default headers, then the front's);
the protocol module checks at import that uvicorn writes heads that way.
"""

from __future__ import annotations

import logging
from time import perf_counter

from posenc.service.core.settings import LANE_OFF_HEADERS
from posenc.service.metrics.layout import TO_SHORTCUT
from posenc.service.v2.hot import head_lines

log = logging.getLogger("posenc.service")

STATE_KEY = "posenc.lane"  # the lifespan state entry holding the worker's Lane
OFFERED = "posenc.shortcut.offered"  # the scope extension of a request the shortcut declined
OK = b"HTTP/1.1 200 OK\r\n"
_CLOSE = b"connection: close\r\n"
_OFF = frozenset(name.encode() for name in LANE_OFF_HEADERS)
# A lane connection's write-buffer high-water mark: a write that leaves more than this buffered is
# sent at once. uvloop otherwise sends every write at the end of the loop's iteration, after the
# other connections' reads are answered: a 12 KiB answer's bytes had left the cache by then and
# the kernel's copy of them (_copy_from_iter) was 18% of the worker's time on 4-row sinusoidal
# answers, 8% written at once (perf). Smaller answers still go out together at the iteration's end.
# (Also where writing pauses: more than this left unsent, as with any high-water mark.)
WRITE_AT_ONCE = 4096
_V2 = object()  # the route of a v2 REST binary infer: (_V2, path)


def offered(scope) -> bool:
    """Whether the shortcut has already declined this request (the lane marked its scope)."""
    ext = scope.get("extensions")
    return ext is not None and OFFERED in ext


def mark_offered(scope) -> None:
    ext = scope.get("extensions")
    if ext is None:
        scope["extensions"] = {OFFERED: {}}
    else:
        ext[OFFERED] = {}


class Lane:
    """One worker's hot lane, over its raw-ASGI front (service/front/front.py ``FastFront``)."""

    def __init__(self, front):
        self.front = front
        self.svc = front.svc
        # request target (bytes) -> (family, metrics offset of its "c" answers), and v2 REST infers'
        # routes (service/v2/hot.py)
        self.urls = (front.hot_urls, front.v2_hot.lane_routes if front.v2_hot is not None else {})
        self.paths = front.hot_paths  # the same by ASGI path
        self.gate = front.gate
        self.post = front.HOT_HEADERS[1]  # a hot answer's head after its content length's digits
        self.answered = 0  # requests answered in the lane (/v1/tables shows it)
        self.serving = False  # a connection of this worker was served by the lane
        # (uvicorn's default header list, as bytes, (OK + them + the pre of a safetensors, JSON, v2 answer))
        self.heads = (None, b"", (b"", b"", b""))

    def heads_of(self, defaults) -> tuple:
        """(defaults, their bytes, the whole-request heads up to the content length's digits, of a
        safetensors answer and of a JSON one) for uvicorn's default header list (renewed each
        second: the date)."""
        h = self.heads
        if h[0] is not defaults:
            d = b"".join(b"%s: %s\r\n" % x for x in defaults)
            f = self.front
            h = self.heads = (
                defaults,
                d,
                (OK + d + f.HOT_HEADERS[0], OK + d + f.JSON_PRE, OK + d + f.V2_PRE),
            )
        return h

    # -- admission --------------------------------------------------------------------------------
    def route(self, target) -> tuple | None:
        """The route of a request target (bytes, the exact target: no query, no escapes) or ASGI
        path (str) that the lane may answer, else None."""
        r = (self.urls[0] if type(target) is bytes else self.paths).get(target)
        if r is not None:
            return r
        v2 = self.front.v2_hot
        if v2 is None:
            return None
        path = target.decode("latin-1") if type(target) is bytes else target
        return (_V2, path) if path in v2.paths else None

    def admits(self, headers) -> bool:
        """No header that changes how the request is read, and the bearer token when one is set."""
        for name, _ in headers:
            if name in _OFF:
                return False
        return self.gate is None or self.gate.allows(headers)

    # -- answers ----------------------------------------------------------------------------------
    def respond(self, route, body: bytes, headers, keep_alive: bool, defaults) -> tuple | None:
        """(head, answer) of an admitted request whose body is whole, or None: the shortcut declined
        it (then ASGI answers) or failed (logged; ASGI answers)."""
        t0 = perf_counter()
        try:
            if route[0] is _V2:
                out, pre, post, name = self._v2(route[1], body, headers)
            else:
                out = self.svc.hot(route[0], body, headers)
                (pre, post), name = self.front.HOT_HEADERS, None
        except Exception:  # a shortcut's failure must not fail the request: ASGI answers it
            log.exception("template shortcut failed in the hot lane; answering through ASGI")
            return None
        if out is None:
            return None
        head = b"%s%s%s%d%s%s\r\n" % (
            OK,
            self.heads_of(defaults)[1],
            pre,
            len(out),
            post,
            b"" if keep_alive else _CLOSE,
        )
        self.answered += 1
        metrics = self.front.metrics
        if metrics is not None:
            # the C template after httptools read the request: the "shortcut" path (not "c")
            if name is not None:
                metrics.observe_path(name, "shortcut", perf_counter() - t0, len(out))
            else:
                metrics.observe_at(route[1] + TO_SHORTCUT, perf_counter() - t0, len(out))
        return head, out

    def _v2(self, path: str, body: bytes, headers):
        """(body, head before its length, head after it, metrics route) of a learnt v2 REST binary
        infer answered on the loop, or Nones: small answers only (larger ones go to ASGI, which
        fills them in a thread). The head holds the headers the raw front's v2 shortcut sends."""
        hit = self.front.v2_hot.rest(path, body, headers)
        if hit is None or not hit[0].inline:
            return None, None, None, None
        e, positions = hit
        out = e.answer(positions)
        if out is None:
            return None, None, None, None
        return out, self.front.V2_PRE, head_lines(e.headers), e.route
