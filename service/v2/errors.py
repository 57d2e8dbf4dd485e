"""Errors of the v2 protocol and how both transports report them (docs/reference.md): an invalid spec,
selection or parameter is REST 400 ``{"error": "<field path>: <message>"}`` and gRPC
INVALID_ARGUMENT with the same message; an unknown model 404 / NOT_FOUND; an answer over the size
limit 413 / RESOURCE_EXHAUSTED. Every other domain error keeps its HTTP status (503 for an engine
that cannot build a table: UNAVAILABLE); anything else is a bug, logged, and the only 500.

Field paths name the request's own fields: ``parameters.spec.rope_scaling.factor``,
``inputs[0].shape``, ``inputs[0].data[1][3]``, ``outputs[2].parameters.shared_memory_region``.
"""

from __future__ import annotations

import logging

import grpc
import orjson

from posenc.engine.core.errors import PosencError, SpecError
from posenc.service.core.errors import GRPC_CODES

log = logging.getLogger("posenc.service")


class BadRequest(PosencError):
    """A request the protocol refuses (REST 400, INVALID_ARGUMENT), naming the field."""

    status = 400

    def __init__(self, path: str, msg: str):
        self.path, self.msg = path, msg
        super().__init__(f"{path}: {msg}" if path else msg)


class ModelNotFound(PosencError):
    """An unknown model or version (REST 404, NOT_FOUND)."""

    status = 404


def path_of(loc) -> str:
    """``("inputs", 0, "data", 3)`` -> ``inputs[0].data[3]``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def describe(exc: BaseException) -> tuple[int, str]:
    """(HTTP status, message) of any exception on a v2 request path; never raises. A SpecError
    that was not given a v2 field path (a bug in the caller) still names its own field."""
    if isinstance(exc, PosencError):
        status = exc.status
        if isinstance(exc, SpecError) or status == 422:
            status = 400
        return status, str(exc)
    log.exception("unexpected error on a v2 request path", exc_info=exc)
    return 500, "internal error"


def grpc_code(status: int) -> grpc.StatusCode:
    return GRPC_CODES.get(status, grpc.StatusCode.INTERNAL)


def rest_body(message: str) -> bytes:
    return orjson.dumps({"error": message})
