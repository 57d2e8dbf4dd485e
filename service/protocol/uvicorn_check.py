"""What ``Protocol`` (service/protocol/uvicorn_api.py) relies on of uvicorn's internals, checked
against the uvicorn installed, at import.

``METHODS`` and ``ATTRIBUTES`` list every name of uvicorn's httptools protocol, request cycle,
server state and flow control that the protocol overrides, calls or reads; ``problems()`` builds a
protocol and a cycle as uvicorn builds them, checks each name and the bytes of a response head
against the lane's (service/protocol/lane.py), and says what differs. ``SUPPORTED`` is False when
anything does: ``posenc serve`` then runs uvicorn's own protocol and says why (``WHY_OFF``, in its
log and /v1/tables).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from types import SimpleNamespace

import uvicorn
from uvicorn.config import Config
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from posenc.service.protocol import lane as lanes

log = logging.getLogger("posenc.service")
VERSION = uvicorn.__version__
METHODS = {  # HttpToolsProtocol's methods overridden or called here -> their parameters
    "connection_made": ("transport",),
    "connection_lost": ("exc",),
    "data_received": ("data",),
    "on_message_begin": (),
    "on_headers_complete": (),
    "on_body": ("body",),
    "on_message_complete": (),
    "on_response_complete": (),
    "shutdown": (),
    "timeout_keep_alive_handler": (),
    "send_400_response": ("msg",),
    "_unset_keepalive_if_required": (),
    "_start_asgi_task": ("cycle", "app"),
}
ATTRIBUTES = {  # what each object used here must have
    "protocol": (
        "app",
        "app_state",
        "loop",
        "access_log",
        "root_path",
        "limit_concurrency",
        "server_state",
        "connections",
        "timeout_keep_alive_task",
        "timeout_keep_alive",
        "transport",
        "flow",
        "pipeline",
        "cycle",
        "parser",
        "headers",
        "expect_100_continue",
        "scope",
        "url",
    ),
    "request cycle": (
        "scope",
        "body",
        "more_body",
        "keep_alive",
        "response_started",
        "response_complete",
        "message_event",
        "waiting_for_100_continue",
    ),
    "server state": ("default_headers", "total_requests", "connections"),
    "flow control": ("write_paused", "read_paused", "resume_reading"),
}


def _head(keep_alive: bool) -> bytes:  # what a request cycle writes for a 2-byte answer; checks attributes
    out = []
    t = SimpleNamespace(write=lambda b: out.append(bytes(b)), is_closing=lambda: False, close=lambda: None)
    c = RequestResponseCycle(
        scope={
            "type": "http",
            "method": "POST",
            "path": "/",
            "headers": [],
        },  # keep-alive off with no Connection header: HTTP/1.0
        transport=t,
        flow=FlowControl(t),
        logger=log,
        access_logger=log,
        access_log=False,
        default_headers=[(b"date", b"x")],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=keep_alive,
        on_response=lambda: None,
    )
    for m in (
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"t"), (b"content-length", b"2")],
        },
        {"type": "http.response.body", "body": b"ok"},
    ):
        _at_once(c.send(m))
    loop = asyncio.new_event_loop()  # built, never run: a worker imports this inside its running loop
    try:
        p = HttpToolsProtocol(
            config=Config(app=_at_once, log_config=None, ws="none"),
            server_state=ServerState(),
            app_state={},
            _loop=loop,
        )
        p.on_message_begin()  # a request's state (its url) exists from here
    finally:
        loop.close()
    objects = {"protocol": p, "request cycle": c, "server state": ServerState(), "flow control": c.flow}
    missing = [
        f"the {k} has no {a}" for k, names in ATTRIBUTES.items() for a in names if not hasattr(objects[k], a)
    ]
    if missing:
        raise LookupError("; ".join(missing))
    return b"".join(out)


def _at_once(coro) -> None:  # a coroutine that never waits (a send to a writable transport), no loop
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
    raise RuntimeError("a response send waited")


def problems() -> list[str]:
    """What this uvicorn lacks of what ``Protocol`` relies on (empty: all there)."""
    out = [
        f"HttpToolsProtocol.{name} is missing or not ({', '.join(params)})"
        for name, params in METHODS.items()
        if not callable(f := getattr(HttpToolsProtocol, name, None))
        or tuple(inspect.signature(f).parameters)[1:] != params
    ]
    for keep_alive in () if out else (True, False):
        try:
            got = _head(keep_alive)
        except Exception as e:  # another constructor or another shape: not the uvicorn this knows
            return [str(e) if isinstance(e, LookupError) else f"its protocol or cycle differs: {e!r}"]
        want = b"%sdate: x\r\ncontent-type: t\r\ncontent-length: 2\r\n%s\r\nok" % (
            lanes.OK,
            b"" if keep_alive else b"connection: close\r\n",
        )
        if got != want:
            out.append(f"its response head is not the lane's ({got[:100]!r})")
    return out


PROBLEMS = problems()
SUPPORTED = not PROBLEMS
WHY_OFF = None if SUPPORTED else f"off: uvicorn {VERSION} not supported ({'; '.join(PROBLEMS)})"
