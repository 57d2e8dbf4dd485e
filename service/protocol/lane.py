"""The hot lane's policy: which requests the protocol may answer below ASGI, and their bytes.

Most of a small answer's cost in a uvicorn worker is the ASGI machinery (message dicts, the app
call chain, the cycle object and its task), not posenc: a RoPE row costs posenc ~2 µs. So the
worker's HTTP protocol (service/protocol/uvicorn_api.py, the only code that touches uvicorn's
internals) asks this worker's ``Lane`` first, and answers what it accepts with the C template
shortcut, straight to the transport:

- the requests that arrive whole in one read, on a connection with nothing else in progress, are
  answered whole (the worker's ``Reader``, ``Service.lane_reader``, bound to the connection: one C
  call from the read's bytes to every response written and counted, one that needs a header or
  text computed first too);
- a request httptools read (its head and body in separate reads, or pipelined behind one the C
  call did not take) is answered through the raw front's door, ``FastFront.shortcut``
  (``respond``), when uvicorn would start its ASGI task, and written here.

Whatever either declines goes to ASGI: the raw front offers it to the same door (a decline is one
C lookup, on a spec's first requests), then the full path answers it and learns its template.

The app (service/front/app.py) makes one ``Lane`` per worker from its raw-ASGI front and hands it
to the protocol through the ASGI lifespan state (``STATE_KEY``): no module global, no import of
the front. Without one (``--lane off``, CORS, a token's refusal, an unsupported uvicorn) the
protocol is plain guarded uvicorn.

The answer's head is the one the ASGI path writes (uvicorn's default headers, then the front's);
the protocol module checks at import that uvicorn writes heads that way.
"""

from __future__ import annotations

from time import perf_counter

from posenc.service.core.settings import LANE_OFF_HEADERS

STATE_KEY = "posenc.lane"  # the lifespan state entry holding the worker's Lane
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
_NO_COUNTS = (None, b"")  # a worker without metrics: its Reader counts nothing


class Lane:
    """One worker's hot lane, over its raw-ASGI front (service/front/front.py ``FastFront``)."""

    def __init__(self, front):
        self.front = front
        self.svc = front.svc
        # request target (bytes) -> (family, metrics offset of its "c" answers), and v2 REST infers'
        # routes (service/v2/hot.py)
        self.urls = (front.hot_urls, front.v2_hot.lane_routes if front.v2_hot is not None else {})
        self.gate = front.gate
        self.post = front.HOT_HEADERS[1]  # a hot answer's head after its content length's digits
        self.answered = 0  # requests answered in the lane (/v1/tables shows it)
        self.serving = False  # a connection of this worker was served by the lane
        # (uvicorn's default header list, as bytes, (OK + them + the pre of a safetensors, JSON, v2 answer))
        self.heads = (None, b"", (b"", b"", b""))
        self._reader = None  # made at the first connection (reader())

    def reader(self):
        """The worker's whole-request Reader (``Service.lane_reader``), which each connection binds
        to its transport; made at the first connection, once the lifespan has opened the worker's
        metrics (a worker without them counts nothing)."""
        r = self._reader
        if r is None:
            m = self.front.metrics
            r = self._reader = self.svc.lane_reader(
                self.urls, self.post, _NO_COUNTS if m is None else m.native
            )
        return r

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

    def takes(self, path: str, headers) -> bool:
        """Whether a request httptools read may be answered here: a path with learnt templates, no
        header that changes how the request is read, and the bearer token when one is set."""
        if not self.front.takes(path):
            return False
        for name, _ in headers:
            if name in _OFF:
                return False
        return self.gate is None or self.gate.allows(headers)

    def respond(self, path: str, body: bytes, headers, keep_alive: bool, defaults) -> tuple | None:
        """(head, answer) of a request ``takes`` admitted, its body whole, or None: the door
        declined it or its answer is filled off the loop (ASGI answers it)."""
        t0 = perf_counter()
        hit = self.front.shortcut(path, body, headers)
        out = None if hit is None else hit.out
        if out is None:
            return None
        head = b"%s%s%s: %s\r\ncontent-length: %d%s%s\r\n" % (
            OK,
            self.heads_of(defaults)[1],
            *hit.ctype,
            len(out),
            hit.post,
            b"" if keep_alive else _CLOSE,
        )
        self.answered += 1
        self.front.count(hit, perf_counter() - t0, len(out))
        return head, out
