"""The one answer pipeline: parse -> plan -> arrays. Every way in uses it: ``posenc compute``,
``Client.lookup``, the HTTP handler (whose hot-path templates are learnt from its requests).

    req = parse("rope", body)              # strict validation; SpecError (422) names the field
    check(req, max_bytes, max_positions)   # 413 before anything is allocated; 422 if dtype overflows
    req.table                              # plan: the stored table that answers it, or None
    arrays(req)                            # the float64 reference, rounded once
    arrays(req, view)                      # the same bits from a mapped table

``Pipeline`` does parse and plan with a cache: the spec part of a body (everything but its
selections) is validated once per distinct spec, under its canonical bytes; later bodies with that
spec only parse their selections.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Mapping

import orjson

from . import dtypes as _dt
from .errors import SpecError, TooLarge, TooManyPositions
from .fields import require_object
from .selection import parse_selection
from .tables import FAMILIES, Family, TableDef
from .tables.base import DEFAULT_LENGTH

DEFAULT_MAX_BYTES = 64 * 2**20     # API.md: the default response limit
SPEC_CACHE = 1024                  # distinct specs a Pipeline remembers
SPEC_CACHE_BYTES = 8 * 2**20       # ... and the most bytes of their keys together (client input)


def family_of(name: str) -> Family:
    try:
        return FAMILIES[name]
    except (KeyError, TypeError):
        raise SpecError(("family",), f"must be one of {', '.join(FAMILIES)}, got {name!r}") from None


class Request:
    """A validated request: its family, frozen spec, selections, dtype (None for int32 families),
    the body it came from, and (once planned) the stored table that answers it."""

    __slots__ = ("family", "spec", "sel", "dtype", "body", "table")

    def __init__(self, family: Family, spec, sel: dict, dtype, body: Mapping, table: TableDef | None = None):
        self.family, self.spec, self.sel, self.dtype, self.body, self.table = family, spec, sel, dtype, body, table

    def nbytes(self) -> int:
        return self.family.output_nbytes(self.spec, self.sel, self.dtype)


def parse(family: str, body: Mapping, length: int = DEFAULT_LENGTH) -> Request:
    """Validate a whole request and plan it (uncached)."""
    fam = family_of(family)
    require_object(body)
    spec, sel = fam.parse(body)
    dtype = _dt.check_dtype(body.get("dtype")) if fam.has_dtype else None
    return Request(fam, spec, sel, dtype, body, fam.table_for(spec, dtype, sel, length))


def check(req: Request, max_bytes: int | None = DEFAULT_MAX_BYTES, max_positions: int | None = None) -> int:
    """Every limit, before anything is allocated: positions per selection and response bytes
    (413), then what would overflow the dtype (422 at dtype). Returns the response's bytes."""
    if max_positions is not None:
        for name, s in req.sel.items():
            if s.n > max_positions:
                raise TooManyPositions(name, s.n, max_positions)
    nbytes = req.nbytes()
    if max_bytes is not None and nbytes > max_bytes:
        raise TooLarge(nbytes, max_bytes)
    req.family.precheck(req.spec, req.sel, req.dtype)
    return nbytes


def arrays(req: Request, view=None) -> dict:
    """The answer's arrays: computed, or served from ``view`` (the mapped ``req.table``)."""
    if view is None:
        return req.family.compute(req.spec, req.sel, req.dtype)
    return req.family.serve(view, req.spec, req.sel, req.dtype)


def compute(family: str, body: Mapping, max_bytes: int | None = DEFAULT_MAX_BYTES) -> dict:
    """One request computed exactly, no shared memory: {array name: ndarray | float}."""
    req = parse(family, body)
    check(req, max_bytes)
    return arrays(req)


class _Spec:
    __slots__ = ("spec", "dtype", "tables")

    def __init__(self, spec, dtype):
        self.spec, self.dtype, self.tables = spec, dtype, {}


_MISSING = object()


class Pipeline:
    """parse + plan with a cache of validated specs (and of their tables per variant)."""

    def __init__(self, length: int = DEFAULT_LENGTH, cache: int = SPEC_CACHE, cache_bytes: int = SPEC_CACHE_BYTES):
        self.length, self.cache, self.cache_bytes = length, cache, cache_bytes
        self._specs: OrderedDict = OrderedDict()
        self._bytes = 0

    def request(self, family: str, body: Mapping) -> Request:
        fam = family_of(family)
        require_object(body)
        part = {k: v for k, v in body.items() if k not in fam.selections}
        try:
            key = (fam.name, orjson.dumps(part, option=orjson.OPT_SORT_KEYS))
        except (TypeError, orjson.JSONEncodeError):   # not JSON data: validate the long way
            key = None
        known = self._specs.get(key) if key is not None else None
        if known is None:
            req = parse(family, body, self.length)    # full validation, names the field
            if key is not None and len(key[1]) <= self.cache_bytes // 64:
                self._specs[key] = _Spec(req.spec, req.dtype)
                self._bytes += len(key[1])
                while self._specs and (len(self._specs) > self.cache or self._bytes > self.cache_bytes):
                    self._bytes -= len(self._specs.popitem(last=False)[0][1])
            return req
        sel = {n: parse_selection(body.get(n), (n,)) for n in fam.selections}
        fam.check_selections(known.spec, sel)
        # The table is fixed per spec, except where a rope type's frequencies follow the length.
        variant = fam.variant_of(known.spec, sel)
        table = known.tables.get(variant, _MISSING)
        if table is _MISSING:
            if len(known.tables) > 64:   # dynamic NTK: one variant per length; keep it bounded
                known.tables.clear()
            table = known.tables[variant] = fam.table_for(known.spec, known.dtype, sel, self.length)
        return Request(fam, known.spec, sel, known.dtype, body, table)
