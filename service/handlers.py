"""The request path shared by the raw-ASGI hot path and the FastAPI routes.

validate (strict parser; the spec part of a body is parsed once and cached under its canonical
bytes) -> size limits -> which shared table -> read-only view (built once by the engine if new)
-> gather / block -> encode. Domain errors carry their status; ``error_response`` maps them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict

import orjson

from engine.client import Client, EngineUnavailable, _ensure_request, serve
from engine.compute import check_size, output_nbytes, parse_request, precheck
from engine.errors import PosencError, SpecError, TooLarge
from engine.selection import parse_selection
from engine.tabledefs import DEFAULT_LENGTH, TableDef, table_for
from engine.tables import FAMILIES, rope

from .encode import encode, error_body
from .negotiate import NotAcceptable, choose
from .settings import Settings

log = logging.getLogger("posenc.service")
INLINE_BYTES = 256 * 1024    # larger responses are built off the event loop
PLAN_CACHE = 1024
_MISSING = object()


@dataclasses.dataclass
class Job:
    family: str
    mod: object
    spec: object
    sel: dict
    dtype: str | None
    fmt: str
    body: dict
    inline: bool
    table: TableDef | None   # the shared table that answers, None: computed directly


class Plan:
    """A validated spec (the 'precompiled validator' result) and the tables it resolves to."""
    __slots__ = ("spec", "dtype", "tables")

    def __init__(self, spec, dtype):
        self.spec, self.dtype, self.tables = spec, dtype, {}



class Service:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.client = Client(settings.shm_dir, settings.namespace, build_timeout=settings.build_timeout_s)
        self.ready = False
        self._plans: OrderedDict = OrderedDict()

    # -- phase 1: cheap, on the event loop ------------------------------------------------------
    def prepare(self, family: str, raw: bytes, accept: str | None) -> Job:
        fmt = choose(accept)                                  # 406 before any work
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise SpecError((), f"JSON decode error: {e}", "json_invalid") from None
        if not isinstance(body, dict):
            raise SpecError((), "the body must be a JSON object", "dict_type")
        mod = FAMILIES[family]
        spec_part = {k: v for k, v in body.items() if k not in mod.SELECTIONS}
        key = (family, orjson.dumps(spec_part, option=orjson.OPT_SORT_KEYS))
        plan = self._plans.get(key)
        if plan is None:
            _, spec, sel, dtype = parse_request(family, body)  # full validation, names the field
            plan = self._plans[key] = Plan(spec, dtype)
            if len(self._plans) > PLAN_CACHE:
                self._plans.popitem(last=False)
        else:
            spec, dtype = plan.spec, plan.dtype
            sel = {n: parse_selection(body.get(n), (n,)) for n in mod.SELECTIONS}
        limit = self.settings.max_positions
        for n, s in sel.items():
            if s.n > limit:
                raise TooLargeSelection(n, s.n, limit)
        nbytes = output_nbytes(mod, spec, sel, dtype)
        check_size(nbytes, self.settings.max_response_bytes)
        precheck(mod, spec, sel, dtype)
        # Which table: fixed per plan, except rope types whose frequencies follow the length.
        variant = rope.variant(spec, rope.effective_seq_len(spec, sel["positions"])) \
            if family == "rope" and spec.rope_type in ("dynamic", "longrope") else None
        table = plan.tables.get(variant, _MISSING)
        if table is _MISSING:
            if len(plan.tables) > 64:   # dynamic NTK: one variant per length; keep it bounded
                plan.tables.clear()
            table = plan.tables[variant] = table_for(family, spec, dtype, sel, DEFAULT_LENGTH)
        return Job(family, mod, spec, sel, dtype, fmt, body, nbytes <= INLINE_BYTES, table)

    # -- phase 2: the work (inline for small answers from mapped tables, else in a thread) -----
    def execute(self, job: Job) -> tuple[bytes, str]:
        if job.table is None:
            result = job.mod.compute(job.spec, job.sel, job.dtype)
        else:
            view = self.client.attach(job.table, request=lambda: _ensure_request(job.family, job.body))
            result = serve(view, job.spec, job.sel, job.dtype)
        return encode(job.family, result, job.dtype, job.fmt)

    def is_mapped(self, job: Job) -> bool:
        return job.table is None or job.table.digest in self.client._views

    # -- readiness -----------------------------------------------------------------------------
    def attach_all(self) -> int:
        """Map every table in the manifest and verify its checksum (readiness)."""
        return self.client.attach_all(verify=True, timeout=self.settings.build_timeout_s)

    def tables(self) -> dict:
        from engine import kernels_info
        m = self.client.manifest() or {}
        return {"generation": m.get("generation"), "engine_pid": m.get("pid"), "backend": kernels_info(),
                "engine_backend": m.get("backend"), "ready": self.ready,
                "tables": [{k: e[k] for k in ("name", "family", "dtype", "length", "nbytes", "pinned",
                                              "crc32", "file")} | {"key": orjson.loads(e["key"]), "digest": d}
                           for d, e in (m.get("tables") or {}).items()]}


class TooLargeSelection(TooLarge):
    def __init__(self, name: str, n: int, limit: int):
        PosencError.__init__(self, f"{name}: {n} positions, over the limit of {limit} per request")
        self.nbytes, self.limit = n, limit


def error_response(exc: BaseException) -> tuple[int, bytes]:
    """(status, JSON body) for any exception on the request path; never lets one escape."""
    if isinstance(exc, SpecError):
        return 422, error_body(exc.detail())
    if isinstance(exc, NotAcceptable):
        return 406, error_body(str(exc))
    if isinstance(exc, (TooLarge, EngineUnavailable, PosencError)):
        return exc.status, error_body(str(exc))
    log.exception("unexpected error on the request path", exc_info=exc)
    return 500, error_body("internal error")
