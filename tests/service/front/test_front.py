"""The service driven in-process (no HTTP server; an engine process holds the tables): the raw-ASGI
front and its shortcuts against the documented FastAPI routes and the library's bytes."""

from __future__ import annotations

import asyncio

import httpx
import orjson

from posenc.service.front.app import create_app
from posenc.service.front.service import Service
from tests.service.hot_helpers import needs_native
from tests.service_cases import ACCEPT_HDRS, BIN, REQUESTS, orjson_dumps, reference_safetensors

BIG_BODY = b'{"head_dim": 64, "positions": [' + b"1," * 3_000_000 + b"1]}"  # over the 4 MiB body limit


def front_for(settings):
    """The app ``posenc serve`` runs (the raw-ASGI front around the FastAPI app), attached."""
    front = create_app(settings)
    front.svc.attach_all()
    return front


async def post(front, raw: bytes, path: str = "/v1/rope", chunks: int = 1, headers=ACCEPT_HDRS):
    """One request straight into the ASGI app: (status, body bytes)."""
    step = max(1, -(-len(raw) // chunks))
    msgs = [
        {"type": "http.request", "body": raw[i : i + step], "more_body": i + step < len(raw)}
        for i in range(0, len(raw), step)
    ] or [{"type": "http.request", "body": b"", "more_body": False}]
    sent = []

    async def receive():
        return msgs.pop(0)

    async def send(m):
        sent.append(m)

    await front({"type": "http", "method": "POST", "path": path, "headers": headers}, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_fastapi_routes_answer_like_the_front(settings):
    """The documented FastAPI routes (the front's shortcuts disabled) give the same status and
    bytes as the front, for answers, refusals and an oversized body."""
    front = front_for(settings)
    routes = front.app  # the FastAPI app behind the raw-ASGI front

    async def go(app):
        out = []
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            for family, body in REQUESTS[:6] + [("rope", {"head_dim": "x", "positions": [1]})]:
                for h in ({}, BIN):
                    r = await c.post(f"/v1/{family}", json=body, headers=h)
                    out.append((family, r.status_code, r.content))
            r = await c.post("/v1/rope", content=BIG_BODY)
            out.append(("big", r.status_code, r.content))
        return out

    got, want = asyncio.run(go(routes)), asyncio.run(go(front))
    assert [s for _, s, _ in want].count(200) == 12 and want[-1][1] == 413
    assert got == want


@needs_native
def test_template_shortcut_is_taken_and_exact(settings):
    svc = Service(settings)
    accept = BIN["accept"]
    spec = {"head_dim": 64, "layout": "interleaved"}
    svc.hot("rope", b"{}", ACCEPT_HDRS)  # first sight of the manifest
    assert (
        svc.hot("rope", orjson_dumps({**spec, "positions": [5]}), ACCEPT_HDRS) is None
    )  # nothing learnt yet
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        svc.execute(svc.prepare("rope", orjson_dumps({**spec, "positions": [5]}), accept))
    for positions in ([7, 9], [0], list(range(64)), [2047, 3, 3], [2048, 5, 2**31 - 1]):  # past the table too
        body = {**spec, "positions": positions}
        assert svc.hot("rope", orjson_dumps(body), ACCEPT_HDRS) == reference_safetensors("rope", body)
    for positions in ([2**31], list(range(65)), [1.0], [True], [-2]):  # past the limit, too many, bad
        assert svc.hot("rope", orjson_dumps({**spec, "positions": positions}), ACCEPT_HDRS) is None
    assert (
        svc.hot("rope", orjson_dumps({**spec, "positions": [1]}), [(b"accept", b"application/json")]) is None
    )
    assert svc.hot("rope", orjson_dumps({**spec, "dtype": "float16", "positions": [1]}), ACCEPT_HDRS) is None


def test_front_answers_a_repeated_spec_without_the_full_path(settings):
    """The ASGI front, driven directly: with the C shortcut a repeated spec never reaches
    Service.prepare (without it every body does), a body in two chunks still gets the same
    answer, and every answer is the reference's bytes."""
    front = front_for(settings)
    prepared = []
    real_prepare = front.svc.prepare
    front.svc.prepare = lambda *a: prepared.append(a) or real_prepare(*a)

    spec = {"head_dim": 64, "layout": "interleaved"}
    sent = [[5], [4], [5], [9, 1], [2047], [3, 3, 3]]
    for i, positions in enumerate(sent):
        body = {**spec, "positions": positions}
        status, got = asyncio.run(post(front, orjson_dumps(body), chunks=2 if i == 4 else 1))
        assert status == 200 and got == reference_safetensors("rope", body), positions
    # the spec's first two answers (it is learnt at its second: service/shortcut/store.py), and the
    # body in two chunks (the shortcut takes single-message bodies only); without the C shortcut,
    # every body takes the full path
    seen = [orjson.loads(a[1])["positions"] for a in prepared]
    assert seen == ([[5], [4], [2047]] if front.svc.shortcut == "c" else sent)


@needs_native
def test_a_failing_shortcut_falls_back_to_the_full_path(settings):
    """Whatever goes wrong in the C shortcut, the request is still answered, exactly."""
    front = front_for(settings)
    front.svc.hot = lambda *a: 1 / 0
    body = {"head_dim": 64, "positions": [3, 1]}
    for _ in range(2):
        status, got = asyncio.run(post(front, orjson_dumps(body)))
        assert status == 200 and got == reference_safetensors("rope", body)
