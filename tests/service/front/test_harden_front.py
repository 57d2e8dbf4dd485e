"""Issue 15's smaller faults, in-process: a client that leaves mid-body on the FastAPI route is
not a 500 (nor a logged traceback), and repeated Accept lines are one value on both routes."""

from __future__ import annotations

import asyncio
import logging

from posenc.service.core.settings import Settings
from posenc.service.front.app import create_app


def _drive(app, path: str, messages: list[dict], headers: list) -> list[dict]:
    sent, pending = [], list(messages)

    async def receive():
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(m):
        sent.append(m)

    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "headers": headers,
        "query_string": b"",
        "http_version": "1.1",
        "scheme": "http",
        "server": ("x", 80),
        "client": ("y", 1),
        "root_path": "",
    }
    asyncio.run(app(scope, receive, send))
    return sent


def test_a_client_leaving_mid_body_is_no_500_on_either_route(caplog):
    """Nobody is left to answer: nothing is sent (uvicorn sends no 500 to a gone client) and
    nothing is logged, by the raw front and by the FastAPI route (the same handler)."""
    front = create_app(Settings(namespace="posenc-test-no-engine", shortcut="off"))
    caplog.set_level(logging.ERROR)
    part = {"type": "http.request", "body": b'{"head_dim": 64, "posi', "more_body": True}
    for app in (front, front.app):
        sent = _drive(app, "/v1/rope", [part, {"type": "http.disconnect"}], [(b"host", b"x")])
        assert sent == [], (app, sent)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_repeated_accept_lines_are_one_value_on_both_routes():
    front = create_app(Settings(namespace="posenc-test-no-engine", shortcut="off"))
    body = {"type": "http.request", "body": b'{"head_dim": 64, "positions": [1]}', "more_body": False}
    hdrs = [(b"accept", b"application/x-safetensors;q=0.5"), (b"accept", b"application/json;q=0.9")]
    for app in (front, front.app):  # the raw front and the FastAPI route behind it
        sent = _drive(app, "/v1/rope", [body], hdrs)
        assert sent[0]["status"] == 200
        assert dict(sent[0]["headers"])[b"content-type"].startswith(b"application/json"), sent[0]
