"""The service's HTTP errors: the refusals only a server makes (a request body, a header, a bearer
token, an Accept header), each a domain error (engine/core/errors.py ``PosencError``) with its
status; ``error_response``, which turns any exception into (status, body) for every HTTP way in;
and ``GRPC_CODES``, the gRPC status code a domain error's HTTP status is told as."""

from __future__ import annotations

import logging

import grpc
import orjson

from posenc.engine.core.errors import PosencError

log = logging.getLogger("posenc.service")


class BodyTooLarge(PosencError):
    """A request body over the configured limit (HTTP 413), refused while it is read."""

    status = 413

    def __init__(self, limit: int):
        self.limit = limit
        super().__init__(f"request body over the limit of {limit} bytes")


class NotAcceptable(PosencError):
    """No response format the Accept header allows (HTTP 406); ``offers``: the media types."""

    status = 406

    def __init__(self, accept: str, offers):
        super().__init__(f"cannot produce any of {accept!r}; available: {', '.join(offers)}")


class HeaderTooLarge(PosencError):
    """A request header over its limit (HTTP 431, RFC 6585), refused before it is parsed."""

    status = 431

    def __init__(self, name: str, size: int, limit: int):
        self.limit = limit
        super().__init__(f"{name} header of {size} bytes, over the limit of {limit} bytes")


class Unauthorized(PosencError):
    """A request under /v1 or /v2 without the configured bearer token (HTTP 401; service/core/auth.py)."""

    status = 401


# HTTP status of a domain error -> gRPC status code (docs/reference.md); statuses not listed are bugs
GRPC_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    404: grpc.StatusCode.NOT_FOUND,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    503: grpc.StatusCode.UNAVAILABLE,
}


def error_response(exc: BaseException) -> tuple[int, bytes]:
    """(status, JSON body) for any exception on a request path; never lets one escape. A domain
    error gives its own status and detail; anything else is a bug: logged, and a plain 500."""
    if isinstance(exc, PosencError):
        return exc.status, orjson.dumps({"detail": exc.detail()})
    log.exception("unexpected error on the request path", exc_info=exc)
    return 500, _INTERNAL


_INTERNAL = orjson.dumps({"detail": "internal error"})
