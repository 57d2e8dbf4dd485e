"""The one answer pipeline: parse -> plan -> arrays. Every way in uses it: ``posenc compute``,
``Client.lookup``, the HTTP handler (whose hot-path templates are learnt from its requests).

    req = parse("rope", body)              # strict validation; SpecError (422) names the field
    check(req, max_bytes, max_positions)   # 413 before anything is allocated; 422 if dtype overflows
    req.table                              # plan: the stored table that answers it, or None
    arrays(req)                            # the float64 reference, rounded once
    arrays(req, view)                      # the same bits from a mapped table

A body may stand for its spec fields with a model's config (``hf_config``, and ``layer_type``) or
with the name of a configured table (``table``): ``expand`` turns it into the ordinary body before
the family parses it, and the Request keeps the canonical spec it used (``Request.shown``), which
every answer to such a body returns as ``spec``.

``Pipeline`` does parse and plan with a cache: the spec part of a body (everything but its
selections) is validated once per distinct spec, under its canonical bytes; later bodies with that
spec only parse their selections.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping

import orjson

from ..core import dtypes as _dt
from ..core.errors import SpecError, TooLarge, TooManyPositions
from ..core.fields import json_repr, require_object
from ..models import grid as model_grid
from ..models import registry
from ..models.config import Derived
from ..tables import FAMILIES, Family, TableDef
from ..tables.base import DEFAULT_LENGTH

DEFAULT_MAX_BYTES = 64 * 2**20  # docs/reference.md: the default response limit
SPEC_CACHE = 1024  # distinct specs a Pipeline remembers
SPEC_CACHE_BYTES = 8 * 2**20  # ... and the most bytes of their keys together (client input)


def family_of(name: str) -> Family:
    try:
        return FAMILIES[name]
    except (KeyError, TypeError):
        raise SpecError(("family",), f"must be one of {', '.join(FAMILIES)}, got {name!r}") from None


BODY_FORMS = ("hf_config", "layer_type", "grid", "table")  # body fields that stand for the spec fields
# {table name: (family, spec fields)}: the configured tables a ``table`` body may name
Named = Mapping[str, tuple[str, Mapping]]


class Request:
    """A validated request: its family, frozen spec, selections, dtype (None for int32 families),
    the body it came from, (once planned) the stored table that answers it, and the canonical spec
    it shows (``shown``: for hf_config and table bodies only, else None)."""

    __slots__ = ("family", "spec", "sel", "dtype", "body", "table", "shown")

    def __init__(
        self,
        family: Family,
        spec,
        sel: dict,
        dtype,
        body: Mapping,
        table: TableDef | None = None,
        shown: dict | None = None,
    ):
        self.family, self.spec, self.sel, self.dtype, self.body, self.table = (
            family,
            spec,
            sel,
            dtype,
            body,
            table,
        )
        self.shown = shown

    def nbytes(self) -> int:
        """The answer's arrays' bytes (a scalar: 8)."""
        return self.family.output_nbytes(self.spec, self.sel, self.dtype)

    def shapes(self) -> list[tuple]:
        """(name, shape, numpy dtype name) of each array of the answer, in its order (a scalar's
        shape None): the family's ``outputs`` for this request."""
        return self.family.output_shapes(self.spec, self.sel, self.dtype)

    def reach(self) -> int | None:
        """How long ``table`` must be to hold every row this request reads (None: any length)."""
        r = self.family.reach(self.spec, self.sel)
        return None if r is None else int(r)


def expand(fam: Family, body: Mapping, named: Named | None = None) -> tuple[Mapping, Derived | None]:
    """(the ordinary body, how its spec fields were found): a body with ``hf_config`` (and
    ``layer_type``) or ``table`` becomes the derived or named spec fields plus the body's own
    selections and dtype (docs/reference.md: either of them beside explicit spec fields is a 422). An
    ordinary body comes back as it is, with None."""
    cfg, name = body.get("hf_config"), body.get("table")
    if cfg is None and name is None:
        if body.get("layer_type") is not None:
            raise SpecError(("layer_type",), "only with hf_config (it picks one part of a model's config)")
        if body.get("grid") is not None:
            raise SpecError(("grid",), "only with hf_config (a model's config says what its grid means)")
        if any(k in body for k in BODY_FORMS):  # explicit nulls are absent fields (docs/reference.md)
            body = {k: v for k, v in body.items() if k not in BODY_FORMS}
        return body, None
    if cfg is not None and name is not None:
        raise SpecError(("table",), "send either hf_config or table, not both")
    given = "hf_config" if cfg is not None else "table"
    keep = (*fam.selection_fields, "dtype")
    for k in body:
        if k not in keep and k not in BODY_FORMS:
            raise SpecError(
                (k,), f"not allowed beside {given}, which gives every spec field", "extra_forbidden"
            )
    rest = {k: body[k] for k in keep if k in body}
    if cfg is not None:
        derived = registry.derive(fam.name, cfg, body.get("layer_type"), body.get("grid"))
        model_grid.check_selections(derived, rest, fam.selection_fields)
        return {**derived.fields, **rest}, derived
    for k in ("layer_type", "grid"):
        if body.get(k) is not None:
            raise SpecError((k,), "only with hf_config (a named table has one spec)")
    spec = named_spec(fam, name, named)
    return {**spec, **rest}, Derived(dict(spec), {k: ("table",) for k in spec})


def named_spec(fam: Family, name, named: Named | None) -> Mapping:
    """The spec fields of the configured table ``name`` (422 at ``table`` naming the known ones)."""
    named = named or {}
    if not isinstance(name, str):
        raise SpecError(("table",), f"must be a table name (a string), got {json_repr(name)}", "string_type")
    entry = named.get(name)
    if entry is not None and entry[0] != fam.name:
        raise SpecError(("table",), f"{name!r} is a {entry[0]} table; ask /v1/{entry[0]}")
    if entry is None:
        known = sorted(n for n, (f, _) in named.items() if f == fam.name)
        raise SpecError(
            ("table",), f"unknown table {name!r}; known {fam.name} tables: {', '.join(known) or 'none'}"
        )
    return entry[1]


def body_schema(fam: Family) -> tuple[dict, dict]:
    """(JSON schema, named examples) of a request body for the OpenAPI docs: the family's spec
    fields, or a model config (families that configs give), or a configured table's name; each
    with the family's selections and dtype. (A named table has no example: names are the engine's.)"""
    props = fam.schema["properties"]
    rest = {k: props[k] for k in (*fam.selection_fields, "dtype") if k in props}
    required = list(fam.required_selections)
    alts, examples = [fam.schema], dict(fam.examples)
    sel = {k: [0, 1, 2] for k in fam.selections}
    models = registry.supported(fam.name)
    if models:
        alts.append(
            {
                "type": "object",
                "additionalProperties": False,
                "required": ["hf_config", *required],
                "properties": {
                    "hf_config": {
                        "type": "object",
                        "description": f"a model's whole config.json; model_type one of {', '.join(models)}",
                    },
                    "layer_type": {
                        "type": ["string", "null"],
                        "description": "which part of the model: one entry of a per-layer-type "
                        "rope_parameters, or the stack (encoder, decoder) where "
                        "an encoder-decoder model's tables differ",
                    },
                    "grid": model_grid.SCHEMA,
                    **rest,
                },
            }
        )
        example = {"hf_config": registry.EXAMPLES[fam.name], **sel}
        if fam.name in registry.EXAMPLE_LAYER_TYPES:
            example["layer_type"] = registry.EXAMPLE_LAYER_TYPES[fam.name]
        examples["a model's config.json"] = {"value": example}
    alts.append(
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["table", *required],
            "properties": {"table": {"type": "string", "description": "a name from GET /v1/tables"}, **rest},
        }
    )
    return {"oneOf": alts}, examples


def parse(family: str, body: Mapping, length: int = DEFAULT_LENGTH, named: Named | None = None) -> Request:
    """Validate a whole request and plan it (uncached). ``named``: the configured tables a
    ``table`` body may name."""
    fam = family_of(family)
    require_object(body)
    plain, derived = expand(fam, body, named)
    try:
        spec, sel = fam.parse(plain)
    except SpecError as e:  # a derived field's error names the config key (or the table)
        if derived is None or (e.loc and e.loc[0] in fam.selection_fields):
            raise
        raise derived.relocate(e) from None
    dtype = _dt.check_dtype(body.get("dtype")) if fam.has_dtype else None
    shown = fam.spec_json(spec) if derived is not None else None
    return Request(fam, spec, sel, dtype, body, fam.table_for(spec, dtype, sel, length), shown)


def check(
    req: Request,
    max_bytes: int | None = DEFAULT_MAX_BYTES,
    max_positions: int | None = None,
    size: Callable[[Request, int | None], int] | None = None,
) -> int:
    """Every limit, before anything is allocated: positions per selection and response bytes
    (413), then what would overflow the dtype (422 at dtype). Returns the response's bytes.

    The response's bytes are its arrays' (``Request.nbytes``, what ``posenc compute`` and the
    readers hold to ``max_bytes``), or ``size(req, max_bytes)``'s: the bytes of the body a way in
    sends (the HTTP service's, in the negotiated format: service/core/sizing.py), which raises
    its own TooLarge when they pass ``max_bytes``."""
    if max_positions is not None:
        for name, s in req.sel.items():
            if s.n > max_positions:
                raise TooManyPositions(name, s.n, max_positions)
    if size is not None:
        nbytes = size(req, max_bytes)
    else:
        nbytes = req.nbytes()
        if max_bytes is not None and nbytes > max_bytes:
            raise TooLarge(nbytes, max_bytes)
    req.family.precheck(req.spec, req.sel, req.dtype)
    return nbytes


def arrays(req: Request, view=None) -> dict:
    """The answer's arrays: computed, or served from ``view`` (the mapped ``req.table``); plus
    ``spec`` (a JSON object) where the body gave hf_config or table."""
    if view is None:
        out = req.family.compute(req.spec, req.sel, req.dtype)
    else:
        out = req.family.serve(view, req.spec, req.sel, req.dtype)
    if req.shown is not None:
        out["spec"] = req.shown
    return out


def compute(family: str, body: Mapping, max_bytes: int | None = DEFAULT_MAX_BYTES) -> dict:
    """One request computed exactly, no shared memory: {array name: ndarray | float}."""
    req = parse(family, body)
    check(req, max_bytes)
    return arrays(req)


class _Spec:
    __slots__ = ("spec", "dtype", "shown", "tables")

    def __init__(self, spec, dtype, shown):
        self.spec, self.dtype, self.shown, self.tables = spec, dtype, shown, {}


_MISSING = object()


class Pipeline:
    """parse + plan with a cache of validated specs (and of their tables per variant).
    ``named()`` gives the configured tables a ``table`` body may name (they may change between
    calls: the named spec is part of the cache key)."""

    def __init__(
        self,
        length: int = DEFAULT_LENGTH,
        cache: int = SPEC_CACHE,
        named=lambda: None,
        cache_bytes: int = SPEC_CACHE_BYTES,
    ):
        self.length, self.cache, self.named, self.cache_bytes = length, cache, named, cache_bytes
        self._specs: OrderedDict = OrderedDict()
        self._bytes = 0

    def request(self, family: str, body: Mapping) -> Request:
        fam = family_of(family)
        require_object(body)
        part = {k: v for k, v in body.items() if k not in fam.selection_fields}
        named = self.named() if body.get("table") is not None else None
        try:
            key = (
                fam.name,
                orjson.dumps(part, option=orjson.OPT_SORT_KEYS),
                orjson.dumps((named or {}).get(part["table"]), option=orjson.OPT_SORT_KEYS) if named else b"",
            )
        except (TypeError, KeyError, orjson.JSONEncodeError):  # not JSON data: validate the long way
            key = None
        if body.get("grid") is not None:  # its position_ids come with the spec: no cached spec answers it
            key = None
        known = self._specs.get(key) if key is not None else None
        if known is None:
            req = parse(family, body, self.length, named)  # full validation, names the field
            if key is not None and len(key[1]) <= self.cache_bytes // 64:
                self._specs[key] = _Spec(req.spec, req.dtype, req.shown)
                self._bytes += len(key[1])
                while self._specs and (len(self._specs) > self.cache or self._bytes > self.cache_bytes):
                    self._bytes -= len(self._specs.popitem(last=False)[0][1])
            return req
        sel = fam.parse_selections(known.spec, body)
        fam.check_selections(known.spec, sel)
        # The table is fixed per spec, except where a rope type's frequencies follow the length.
        variant = fam.variant_of(known.spec, sel)
        table = known.tables.get(variant, _MISSING)
        if table is _MISSING:
            if len(known.tables) > 64:  # dynamic NTK: one variant per length; keep it bounded
                known.tables.clear()
            table = known.tables[variant] = fam.table_for(known.spec, known.dtype, sel, self.length)
        return Request(fam, known.spec, sel, known.dtype, body, table, known.shown)
