"""The raw ASGI floor: the cheapest app uvicorn can run, answering the probe's requests with the
bytes posenc answered them with.

It reads the whole body (as posenc does) and answers with two ASGI sends carrying the same
status, content-type and body posenc returned, captured beforehand: per request (``--requests``,
a JSON list ``[path, base64 request body, content_type, base64 answer, [[header, value], ...]]``,
looked up by path and body: the realistic mix, where every request has its own answer) or per path
(``--bodies``, ``{path: [content_type, base64 body]}``) for anything else. Run under the same uvicorn settings
as ``posenc serve`` (uvloop, httptools, one worker, no access log, no server header), on the same pinned core,
the probe's figures on it are everything that is not posenc: the probe, the kernel's loopback and
uvicorn's HTTP handling. posenc minus floor is what posenc costs.

    python -m posenc.loadtest.floors.asgi_app --port 8100 --bodies bodies.json
"""

from __future__ import annotations

import argparse
import base64
import json

_DEFAULT = (b"application/octet-stream", b"floor")


def make_app(bodies: dict[str, tuple[bytes, bytes]], requests: dict | None = None):
    """``requests``: {(path, request body): (content_type, answer, extra headers)} (load_requests)."""
    responses = {}
    for path, (ctype, body) in bodies.items():
        responses[path] = [(b"content-type", ctype), (b"content-length", str(len(body)).encode())], body
    exact = {
        key: ([(b"content-type", ct), (b"content-length", b"%d" % len(body)), *extra], body)
        for key, (ct, body, extra) in (requests or {}).items()
    }
    dflt = [(b"content-type", _DEFAULT[0]), (b"content-length", str(len(_DEFAULT[1])).encode())], _DEFAULT[1]

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        chunks = []
        while True:  # read the body, as posenc does
            msg = await receive()
            chunks.append(msg.get("body", b""))
            if msg["type"] == "http.disconnect" or not msg.get("more_body", False):
                break
        hit = (
            exact.get((scope["path"], chunks[0] if len(chunks) == 1 else b"".join(chunks))) if exact else None
        )
        headers, body = hit or responses.get(scope["path"], dflt)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


def load_bodies(path: str | None) -> dict[str, tuple[bytes, bytes]]:
    if not path:
        return {}
    with open(path) as f:
        raw = json.load(f)
    return {p: (ct.encode(), base64.b64decode(b)) for p, (ct, b) in raw.items()}


def save_bodies(path: str, bodies: dict[str, tuple[str, bytes]]) -> None:
    with open(path, "w") as f:
        json.dump({p: [ct, base64.b64encode(b).decode()] for p, (ct, b) in bodies.items()}, f)


def save_requests(path: str, answers: list[tuple[str, bytes, str, bytes, list]]) -> None:
    """answers: (path, request body, content type, answer, [(header, value)]) per request."""
    b64 = base64.b64encode
    with open(path, "w") as f:
        json.dump(
            [
                [p, b64(rb).decode(), ct, b64(a).decode(), [list(h) for h in extra]]
                for p, rb, ct, a, extra in answers
            ],
            f,
        )


def load_requests(path: str | None) -> dict:
    """{(path, request body): (content type, answer, [(header, value)])}, all bytes."""
    if not path:
        return {}
    with open(path) as f:
        raw = json.load(f)
    return {
        (p, base64.b64decode(rb)): (
            ct.encode(),
            base64.b64decode(a),
            [(k.encode(), v.encode()) for k, v in extra],
        )
        for p, rb, ct, a, extra in raw
    }


def server_args(module: str, doc: str, port: int, argv=None) -> argparse.Namespace:
    """--host, --port, --bodies of a floor server (this one, or loadtest/floors/http_protocol.py)."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=port)
    p.add_argument("--bodies", help="JSON {path: [content_type, base64 body]} (default: a 5-byte body)")
    p.add_argument(
        "--requests", help="JSON list of [path, base64 request body, content_type, base64 answer, headers]"
    )
    return p.parse_args(argv)


def main(argv=None) -> int:
    import uvicorn

    args = server_args("posenc.loadtest.floors.asgi_app", __doc__, 8100, argv)
    app = make_app(load_bodies(args.bodies), load_requests(args.requests))
    # The settings service/supervise/serve.py gives uvicorn, so only the app differs.
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        workers=1,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        log_level="warning",
        access_log=False,
        timeout_keep_alive=5,
        timeout_graceful_shutdown=10,
        limit_concurrency=None,
        server_header=False,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
