"""The bare floor: an asyncio Protocol with httptools' parser on uvloop, and nothing else — no
ASGI, no uvicorn. It answers every request with the bytes posenc answered it (or its path) with
(captured into the same JSON files as loadtest/floors/asgi_app.py's), after reading the whole body. It is the
most a Python server can do per core here, the ceiling the hot lane (service/protocol/lane.py) is measured
against; the raw-ASGI floor (floor.py) is uvicorn's ceiling.

    python -m posenc.loadtest.floors.http_protocol --port 8101 --bodies bodies.json
"""

from __future__ import annotations

import asyncio

import httptools
import uvloop

from .asgi_app import _DEFAULT, load_bodies, load_requests, server_args


class BareProtocol(asyncio.Protocol):
    def __init__(self, responses: dict[bytes, bytes], default: bytes, exact: dict | None = None):
        self.responses, self.default, self.exact = responses, default, exact or {}
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body = []
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    def on_message_begin(self) -> None:
        self.url = b""
        self.body = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        if self.exact:
            self.body.append(body)

    def on_message_complete(self) -> None:
        hit = self.exact.get((self.url, b"".join(self.body))) if self.exact else None
        self.transport.write(hit or self.responses.get(self.url, self.default))
        if not self.parser.should_keep_alive():
            self.transport.close()


def _whole(ctype: bytes, body: bytes, extra=()) -> bytes:
    """A whole HTTP response (status line, content-type, content-length, extra headers, body)."""
    more = b"".join(b"%s: %s\r\n" % kv for kv in extra)
    return b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s\r\n%s" % (
        ctype,
        len(body),
        more,
        body,
    )


def responses_of(bodies: dict[str, tuple[bytes, bytes]]) -> tuple[dict[bytes, bytes], bytes]:
    """Whole HTTP responses per path."""
    return {p.encode(): _whole(*cb) for p, cb in bodies.items()}, _whole(*_DEFAULT)


async def serve(host: str, port: int, bodies: dict, requests: dict | None = None) -> None:
    responses, default = responses_of(bodies)
    exact = {(p.encode(), b): _whole(*answer) for (p, b), answer in (requests or {}).items()}
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: BareProtocol(responses, default, exact), host, port, backlog=2048
    )
    async with server:
        await server.serve_forever()


def main(argv=None) -> int:
    args = server_args("posenc.loadtest.floors.http_protocol", __doc__, 8101, argv)
    try:
        uvloop.run(serve(args.host, args.port, load_bodies(args.bodies), load_requests(args.requests)))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
