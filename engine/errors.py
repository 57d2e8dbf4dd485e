"""Domain errors. Each carries the HTTP status it maps to; one handler in service/ turns them
into responses, and the CLI prints the same message (STYLE.md §7)."""

from __future__ import annotations


class PosencError(Exception):
    status = 500


class SpecError(PosencError, ValueError):
    """An invalid spec or selection. ``loc`` names the field whose value must change, e.g.
    ``("rope_scaling", "factor")``; it becomes FastAPI's ``detail[].loc`` after ``"body"``."""

    status = 422

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


class TooManyPositions(TooLarge):
    """A selection with more positions than one request may hold (HTTP 413)."""

    def __init__(self, name: str, n: int, limit: int):
        PosencError.__init__(self, f"{name}: {n} positions, over the limit of {limit} per request")
        self.nbytes, self.limit = n, limit


class EngineUnavailable(PosencError):
    """No engine to build a table that is not in shared memory yet (HTTP 503)."""

    status = 503


class NotStored(PosencError):
    """The engine will not store this table (it alone exceeds the memory budget). Not an error
    for a request: its rows are computed exactly instead (API.md: no table limits positions)."""

    status = 507
