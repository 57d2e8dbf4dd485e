"""The bare floor: an asyncio Protocol with httptools' parser on uvloop, and nothing else — no
ASGI, no uvicorn. It answers every request with the bytes posenc answered that path with
(captured into the same JSON file as loadtest/floor.py's), after reading the whole body. It is the
most a Python server can do per core here, the ceiling the hot lane (service/protocol/lane.py) is measured
against; the raw-ASGI floor (floor.py) is uvicorn's ceiling.

    python -m posenc.loadtest.bare --port 8101 --bodies bodies.json
"""

from __future__ import annotations

import asyncio

import httptools
import uvloop

from .floor import _DEFAULT, load_bodies, server_args


class BareProtocol(asyncio.Protocol):
    def __init__(self, responses: dict[bytes, bytes], default: bytes):
        self.responses, self.default = responses, default
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
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

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_message_complete(self) -> None:
        self.transport.write(self.responses.get(self.url, self.default))
        if not self.parser.should_keep_alive():
            self.transport.close()


def responses_of(bodies: dict[str, tuple[bytes, bytes]]) -> tuple[dict[bytes, bytes], bytes]:
    """Whole HTTP responses per path (status line, content-type, content-length, body)."""
    def whole(ctype: bytes, body: bytes) -> bytes:
        return b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (ctype, len(body), body)
    return {p.encode(): whole(*cb) for p, cb in bodies.items()}, whole(*_DEFAULT)


async def serve(host: str, port: int, bodies: dict) -> None:
    responses, default = responses_of(bodies)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: BareProtocol(responses, default), host, port, backlog=2048)
    async with server:
        await server.serve_forever()


def main(argv=None) -> int:
    args = server_args("posenc.loadtest.bare", __doc__, 8101, argv)
    try:
        uvloop.run(serve(args.host, args.port, load_bodies(args.bodies)))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
