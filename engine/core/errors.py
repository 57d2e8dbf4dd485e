"""Every domain error of the engine, in one module. Each carries the HTTP status it maps to and its
response ``detail()``; the CLI prints the same message and exits with ``exit_code``. The service's
own refusals (a body, a header, a token) and the one mapping of any exception to an HTTP answer are
in service/core/errors.py."""

from __future__ import annotations


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


class EngineUnavailable(PosencError):
    """The engine cannot be reached, or could not build a table a request needs (HTTP 503)."""

    status = 503


class NotStored(PosencError):
    """The engine will not store this table: it alone exceeds the memory budget, shared memory is
    full (ENOSPC), or the engine is out of descriptors. Not an error for a request: its rows are
    computed exactly instead (no table limits positions)."""

    status = 507


class EngineRunning(PosencError):
    """Another engine holds this namespace's lock (the engine refuses to start; exit 1)."""


class ConfigError(PosencError, ValueError):
    """A setting (a ``POSENC_*`` variable or a flag) that is malformed, unknown or cannot be
    met; raised at start-up, naming the variable."""
