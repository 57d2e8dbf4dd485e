"""Every domain error, in one module. Each carries the HTTP status it maps to and its response
``detail()``; ``error_response`` turns any exception into (status, body) for every HTTP way in,
and the CLI prints the same message and exits with ``exit_code``."""

from __future__ import annotations

import logging

import orjson

log = logging.getLogger("posenc.service")


class PosencError(Exception):
    status = 500
    # The JSON schema of the response body (OpenAPI components, service/front/openapi.py).
    schema = {
        "type": "object",
        "required": ["detail"],
        "additionalProperties": False,
        "properties": {"detail": {"type": "string"}},
    }

    def detail(self):
        """The response body's ``detail`` (docs/reference.md, "Errors and statuses"): the message,
        unless a subclass says more."""
        return str(self)

    @property
    def exit_code(self) -> int:
        """The CLI's exit status: 2 for a refused input (a 4xx), 1 for anything else."""
        return 2 if 400 <= self.status < 500 else 1


class SpecError(PosencError, ValueError):
    """An invalid spec or selection. ``loc`` names the field whose value must change, e.g.
    ``("rope_scaling", "factor")``; it becomes FastAPI's ``detail[].loc`` after ``"body"``."""

    status = 422
    schema = {
        "type": "object",
        "required": ["detail"],
        "additionalProperties": False,
        "properties": {
            "detail": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["type", "loc", "msg"],
                    "additionalProperties": False,
                    "properties": {
                        "type": {
                            "type": "string",
                            "description": "e.g. value_error, json_invalid, dict_type",
                        },
                        "loc": {
                            "type": "array",
                            "items": {"type": ["string", "integer"]},
                            "description": "'body', then the path of the field whose value must change",
                        },
                        "msg": {"type": "string"},
                    },
                },
            }
        },
    }

    def __init__(self, loc, msg: str, kind: str = "value_error"):
        if isinstance(loc, str):
            loc = (loc,)
        self.loc = tuple(loc)
        self.msg = msg
        self.kind = kind
        super().__init__(f"{self.field}: {msg}")

    @property
    def field(self) -> str:
        return ".".join(str(p) for p in self.loc) or "body"

    def detail(self) -> list[dict]:
        return [{"type": self.kind, "loc": ["body", *self.loc], "msg": self.msg}]


class TooLarge(PosencError):
    """A response whose arrays together exceed the configured size limit (HTTP 413)."""

    status = 413

    def __init__(self, nbytes: int, limit: int):
        self.nbytes = nbytes
        self.limit = limit
        super().__init__(
            f"response would be {nbytes} bytes, over the limit of {limit} bytes "
            f"({limit / 2**20:.0f} MiB); ask for fewer positions or heads"
        )


class TooManyPositions(PosencError):
    """A selection (positions, query or key) over the per-request positions limit (HTTP 413)."""

    status = 413

    def __init__(self, name: str, n: int, limit: int):
        self.n = n
        self.limit = limit
        super().__init__(f"{name}: {n} positions, over the limit of {limit} per request")


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


class EngineUnavailable(PosencError):
    """The engine cannot be reached, or could not build a table a request needs (HTTP 503)."""

    status = 503


class NotStored(PosencError):
    """The engine will not store this table: it alone exceeds the memory budget, shared memory is
    full (ENOSPC), or the engine is out of descriptors. Not an error for a request: its rows are
    computed exactly instead (no table limits positions)."""

    status = 507


class Unauthorized(PosencError):
    """A request under /v1 or /v2 without the configured bearer token (HTTP 401; service/front/auth.py)."""

    status = 401


class EngineRunning(PosencError):
    """Another engine holds this namespace's lock (the engine refuses to start; exit 1)."""


class ConfigError(PosencError, ValueError):
    """A setting (a ``POSENC_*`` variable or a flag) that is malformed, unknown or cannot be
    met; raised at start-up, naming the variable."""


def error_response(exc: BaseException) -> tuple[int, bytes]:
    """(status, JSON body) for any exception on a request path; never lets one escape. A domain
    error gives its own status and detail; anything else is a bug: logged, and a plain 500."""
    if isinstance(exc, PosencError):
        return exc.status, orjson.dumps({"detail": exc.detail()})
    log.exception("unexpected error on the request path", exc_info=exc)
    return 500, _INTERNAL


_INTERNAL = orjson.dumps({"detail": "internal error"})
