"""The hot path: a raw ASGI front that answers ``POST /v1/{family}`` itself and hands everything
else (docs, tables, health, metrics, lifespan) to the FastAPI app behind it.

FastAPI's per-request machinery (routing, dependency resolution, Request/Response objects) costs
~100 µs here, more than the work of a few-row lookup. This front reads the body, runs the
``Service`` path and writes the response with two ASGI sends (``handle_family``: the FastAPI
routes, documented in /docs, run it too, as their response: app.py ``FamilyAnswer``). It also
times every request, whichever side served it, into the shared metrics.

Before all that, a POST whose template this worker has learnt (a family with spec templates, with
the C shortcut in use: the ``shortcut`` setting, service/shortcut/templates.py; a v2 REST infer,
service/v2/hot.py) is answered by one call into service/shortcut/_hot.c through ``FastFront.shortcut``,
the one entry into the learnt templates for a request Python has read (the lane after httptools,
service/protocol/lane.py, calls it too; see docs/design.md); whatever it declines, or fails at,
continues on the path above.

With a bearer token configured (service/core/auth.py), both ask the gate first: the shortcut only for
a request that carries the token, the full path refuses any /v1 or /v2 request without it.
"""

from __future__ import annotations

import functools
import logging
import os
from time import perf_counter
from typing import NamedTuple

import anyio

from posenc.engine.tables import FAMILIES
from posenc.service.core import auth as guard
from posenc.service.core.body import read_body
from posenc.service.core.errors import error_response
from posenc.service.front.negotiate import JSON
from posenc.service.front.service import Service
from posenc.service.metrics.counters import Metrics
from posenc.service.metrics.layout import PATH_ROUTES, TO_SHORTCUT
from posenc.service.shortcut.templates import FIELDS, FORMATS
from posenc.service.v2.hot import head_lines, head_pairs

log = logging.getLogger("posenc.service")

FAMILY_PATHS = {f"/v1/{f}": f for f in FAMILIES}
INLINE_BODY = 64 << 10  # larger bodies are parsed in a thread (~1 ms of JSON ints and up)


def header(scope, name: bytes) -> str | None:
    """A request header's value; repeated lines are one value joined by ", " (RFC 9110 §5.3)."""
    values = [v for k, v in scope["headers"] if k == name]
    if not values:
        return None
    return (values[0] if len(values) == 1 else b", ".join(values)).decode("latin-1")


_WORKER = (b"x-posenc-worker", str(os.getpid()).encode())
_ST_HDR = (b"content-type", b"application/x-safetensors")
_OCTET_HDR = (b"content-type", b"application/octet-stream")  # a v2 REST binary answer's (service/v2/rest.py)
# a /v1 shortcut answer's content type, by its format (service/shortcut/templates.py FORMATS)
_CTYPES = {FORMATS["safetensors"]: _ST_HDR, FORMATS["json"]: (b"content-type", JSON.encode())}
_V2_CTYPES = (_OCTET_HDR, _CTYPES[FORMATS["json"]])  # a v2 answer C made, binary or JSON tensors
# the paths of families with spec templates -> (family, metrics offset of their "c" answers: the
# lane's whole-request C call; the shortcut's are at + TO_SHORTCUT, service/metrics/layout.py)
_HOT = {f"/v1/{name}": (name, Metrics.path_index(f"/v1/{name}", "c")) for name in FIELDS}


class Hit(NamedTuple):
    """A learnt template's answer (``FastFront.shortcut``), in the headers both writers send."""

    out: bytes | None  # None: ``fill()`` makes it, off the loop
    fill: object
    ctype: tuple  # the content-type header (then the content length)
    post: bytes  # the headers after the content length, as head lines (v2/hot.py head_lines)
    route: object  # where it is counted: a metrics offset (a C answer) or a v2 route (an Entry's)


async def respond(send, status: int, body, ctype: bytes) -> None:
    """``body``: bytes, or a large JSON text's consecutive blocks (service/core/sizing.py
    ``Blocks``), each sent as its own ASGI message."""
    whole = type(body) is bytes
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", ctype),
                (b"content-length", str(len(body) if whole else body.nbytes).encode()),
                _WORKER,
            ],
        }
    )
    if whole:
        await send({"type": "http.response.body", "body": body})
        return
    last = len(body) - 1
    for i, block in enumerate(body):
        await send({"type": "http.response.body", "body": block, "more_body": i < last})


async def answer(svc: Service, family: str, receive, accept: str | None) -> tuple[int, bytes, str]:
    """``POST /v1/{family}``: (status, body, content type), the one handler behind the raw-ASGI
    front and the FastAPI route. Every failure becomes a status and none escapes, except
    ConnectionAbortedError: the client left while sending its body."""
    try:
        raw = await read_body(receive, svc.settings.max_body_bytes)
        if len(raw) > INLINE_BODY:  # parsing alone may take milliseconds: all of it off the loop
            payload, ctype = await anyio.to_thread.run_sync(svc.run, family, raw, accept)
            return 200, payload, ctype
        job = svc.prepare(family, raw, accept)
        if job.inline and svc.is_mapped(job):
            payload, ctype = svc.execute(job)
        else:
            payload, ctype = await anyio.to_thread.run_sync(svc.execute, job)
        return 200, payload, ctype
    except ConnectionAbortedError:
        raise
    except Exception as e:
        status, body = error_response(e)
        return status, body, "application/json"


async def handle_family(svc: Service, family: str, scope, receive, send, metrics_status: list) -> None:
    try:
        status, body, ctype = await answer(svc, family, receive, header(scope, b"accept"))
    except ConnectionAbortedError:
        metrics_status.append(499)
        return
    metrics_status.append(status)
    await respond(send, status, body, ctype.encode())


class FastFront:
    def __init__(self, app, svc: Service):
        self.app = app
        self.svc = svc
        self.c_shortcut = svc.shortcut == "c"
        self.metrics: Metrics | None = None
        # what the hot lane below ASGI (service/protocol/lane.py) answers: the same paths and headers
        self.hot_paths = _HOT if self.c_shortcut else {}
        self.hot_urls = {p.encode(): lane for p, lane in self.hot_paths.items()}  # as request targets
        # the bearer token's check (None: no token), which the lane asks too (service/core/auth.py)
        self.gate = guard.gate_for(svc.settings)
        self.v2 = None  # service/v2/rest.py's handler of every /v2 path (set by the app)
        self.v2_hot = None  # service/v2/hot.py's templates of v2 REST infer requests (set by the app)
        self.lane = None  # the hot lane below ASGI (service/protocol/lane.py), when the app makes one
        self.lane_off = "off"  # why not, when there is none

    def lane_state(self) -> tuple[str, int]:
        """(/v1/tables' ``lane``: "on", "off" or why off; requests the lane answered)."""
        lane = self.lane
        if lane is None:
            return self.lane_off, 0
        return ("on" if lane.serving else "off"), lane.answered

    # The front's headers of a shortcut answer as uvicorn writes ASGI headers: what comes before
    # the content length's digits and what follows them (the lane writes them around len(body)).
    HOT_HEADERS = (b"%s: %s\r\ncontent-length: " % _ST_HDR, b"\r\n%s: %s\r\n" % _WORKER)
    V2_PRE = b"%s: %s\r\ncontent-length: " % _OCTET_HDR  # a v2 binary answer's head, as the lane writes it
    JSON_PRE = (
        b"content-type: %s\r\ncontent-length: " % JSON.encode()
    )  # a JSON answer's, as respond() writes it

    def takes(self, path: str) -> bool:
        """Whether ``path`` has learnt templates: a family with spec templates (with the C shortcut
        on) or a v2 REST infer (service/v2/hot.py)."""
        return path in self.hot_paths or (self.v2_hot is not None and self.v2_hot.route(path) is not None)

    def shortcut(self, path: str, body: bytes, headers) -> Hit | None:
        """The one entry into the learnt templates for a request Python has read whole (a path of
        ``takes``): the raw front below and the lane after httptools (service/protocol/lane.py
        ``Lane.respond``) both call it. None: not learnt, or the shortcut failed (logged); the full
        path answers."""
        try:
            hot = self.hot_paths.get(path)
            if hot is not None:
                got = self.svc.hot(hot[0], body, headers, json=True)
                if got is None:
                    return None
                return Hit(got[0], None, _CTYPES[got[1]], self.HOT_HEADERS[1], hot[1] + TO_SHORTCUT)
            got = self.v2_hot.rest(path, body, headers)  # C's lookup, the lane's (binary and JSON)
            if got is None:
                return None
            if len(got) == 4:  # answered in C: (answer, json, post, its route's "c" offset)
                return Hit(got[0], None, _V2_CTYPES[got[1]], got[2], got[3] + TO_SHORTCUT)
            e, positions = got  # an Entry C hands back: outputs into shared memory, or a large answer
            if len(positions) != e.nbytes:
                return None
            post = head_lines(e.headers)
            if not e.inline:  # a large answer: filled off the loop, by the raw front only
                return Hit(None, functools.partial(e.answer, positions), _OCTET_HDR, post, e.route)
            out = e.answer(positions)
            return None if out is None else Hit(out, None, _OCTET_HDR, post, e.route)
        except Exception:  # a shortcut's failure must not fail the request
            log.exception("template shortcut failed; answering through the full path")
            return None

    def count(self, hit: Hit, seconds: float, nbytes: int) -> None:
        """A shortcut answer counted on its route, path "shortcut"."""
        m = self.metrics
        if m is not None:
            if type(hit.route) is int:
                m.observe_at(hit.route, seconds, nbytes)
            else:
                m.observe_path(hit.route, "shortcut", seconds, nbytes)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = perf_counter()
        path = scope["path"]
        if (
            scope["method"] == "POST"
            and self.takes(path)
            and (self.gate is None or self.gate.allows(scope["headers"]))
        ):
            # The commonest requests, a repeated spec or v2 infer, answered by its learnt template:
            # one receive, one C call, two sends. Anything else continues below.
            msg = await receive()
            if msg["type"] == "http.request" and not msg.get("more_body", False):
                hit = self.shortcut(path, msg["body"], scope["headers"])
                out = None if hit is None else hit.out
                if hit is not None and out is None:
                    try:
                        out = await anyio.to_thread.run_sync(hit.fill)
                    except Exception:  # a shortcut's failure must not fail the request
                        log.exception("v2 shortcut failed; answering through the full path")
                if out is not None:
                    await send(
                        {
                            "type": "http.response.start",
                            "status": 200,
                            "headers": [
                                hit.ctype,
                                (b"content-length", b"%d" % len(out)),
                                *head_pairs(hit.post),
                            ],
                        }
                    )
                    await send({"type": "http.response.body", "body": out})
                    self.count(hit, perf_counter() - t0, len(out))
                    return
            receive = _prepend(msg, receive)
        return await self._general(scope, receive, send, path, t0)

    async def _general(self, scope, receive, send, path, t0):
        statuses: list[int] = []
        family = FAMILY_PATHS.get(path)
        route = None
        sent = [0]  # response body bytes

        async def counted(msg, send=send):
            if msg["type"] == "http.response.body":
                sent[0] += len(msg.get("body", b""))
            await send(msg)

        send = counted
        try:
            if self.gate is not None and guard.guarded(path) and not self.gate.allows(scope["headers"]):
                statuses.append(401)
                await self.gate.refuse(scope["headers"], send)
            elif family is not None and scope["method"] == "POST":
                await handle_family(self.svc, family, scope, receive, send, statuses)
            elif self.v2 is not None and (path == "/v2" or path.startswith("/v2/")):
                route = await self.v2(scope, receive, send, statuses)
            else:

                async def timed_send(msg):
                    if msg["type"] == "http.response.start":
                        statuses.append(msg["status"])
                    await send(msg)

                await self.app(scope, receive, timed_send)
        finally:
            if self.metrics is not None:
                route = route or (path if path in PATH_ROUTES else "other")
                self.metrics.observe(route, statuses[0] if statuses else 500, perf_counter() - t0, sent[0])


def _prepend(first: dict, receive):
    """A receive() that gives ``first`` (already read) before the rest of the stream."""
    pending = [first]

    async def again():
        if pending:
            return pending.pop()
        return await receive()

    return again
