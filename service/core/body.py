"""A request's body under ASGI, read whole up to a limit: the one reader of every HTTP route that
takes a body (/v1 in service/front/front.py, /v2 in service/v2/rest.py)."""

from __future__ import annotations

from posenc.service.core.errors import BodyTooLarge


async def read_body(receive, limit: int) -> bytes:
    """The body's bytes; BodyTooLarge (413) past ``limit``, ConnectionAbortedError if the client
    left before its end."""
    chunks, size = [], 0
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise ConnectionAbortedError
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
        if not msg.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
