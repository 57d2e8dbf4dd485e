"""What every table family provides, and the stored-table identity they share.

A family is one object (``Family``) that owns everything about it: its request fields and
selections, strict parsing, its answer's arrays (``outputs``: the one description of their
names, shapes and dtypes, from which their bytes, the JSON answer's schema and which arrays take
the requested dtype are derived), the float64 reference ``compute``, the table it stores in shared
memory (layout and fill), how a mapped view of that table answers a selection, its OpenAPI
request schema and examples, and its hot-path template factory. Routes,
metric labels, CLI choices, the engine's config and the docs iterate ``posenc.engine.tables.FAMILIES``;
nothing outside a family's module asks which family it is holding.

A ``TableDef`` is a stored table's identity: a canonical key (everything that changes its numbers,
nothing that only arranges or selects them) that also names its segment and its manifest entry,
plus how to build it. Its length is not part of the identity: any stored length serves a request
(rows past it are computed).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..core import formats
from ..core.dtypes import BFLOAT16, DEFAULT_DTYPE, DTYPES, check_dtype
from ..core.errors import SpecError
from ..core.selection import POSITION_LIMIT, Selection, parse_selection

DEFAULT_LENGTH = 131072  # rows (or distances) of a table unless the config says otherwise
CHUNK = 8192  # rows per build step: a build never holds a whole table in float64
MIN_ON_DEMAND = 4096  # the shortest on-demand table: a few small asks do not each rebuild it


def on_demand_length(reach: int | None, cap: int) -> int:
    """How long the engine builds an on-demand table that must hold ``reach`` rows (or
    distances): ``reach`` rounded up to a power of two, at least MIN_ON_DEMAND, at most ``cap``
    (positions past a table are computed exactly). No reach: ``cap``."""
    if reach is None:
        return cap
    return min(cap, max(MIN_ON_DEMAND, 1 << (max(1, reach) - 1).bit_length()))


# Pieces of the request schemas (OpenAPI) that every family shares.
SELECTION_SCHEMA = {
    "oneOf": [
        {
            "type": "array",
            "items": {"type": "integer", "minimum": 0, "maximum": POSITION_LIMIT - 1},
            "minItems": 1,
        },
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["start", "stop"],
            "properties": {
                "start": {"type": "integer", "minimum": 0},
                "stop": {"type": "integer", "maximum": POSITION_LIMIT},
                "step": {"type": "integer", "minimum": 1},
            },
        },
    ],
    "description": "positions: a list (any order, repeats allowed) or a half-open range",
}
DTYPE_SCHEMA = {"type": "string", "enum": list(DTYPES), "default": DEFAULT_DTYPE}
# Request pieces that OpenAPI names once (components) wherever a family's schema holds them.
SHARED_SCHEMAS = {"Selection": SELECTION_SCHEMA, "Dtype": DTYPE_SCHEMA}
# The ``spec`` of a JSON answer to an hf_config or table body (engine/answer/pipeline.py ``shown``).
ANSWER_SPEC_SCHEMA = {
    "type": "object",
    "description": "the spec fields the body's hf_config or table stood for (only for such a body)",
}


@dataclasses.dataclass(frozen=True)
class Output:
    """One array of a family's answer: the one description of it that everything else reads (the
    answer's bytes before it exists, ``Family.output_nbytes``, the service's size bounds, the JSON
    answer's schema in OpenAPI, which arrays take the dtype or a v2 batch, the docs' line).

    ``axes`` name its dimensions for the docs (``("n", "d")``); ``shape(spec, sel)`` gives their
    sizes for a parsed request. A scalar (rope's ``attention_scaling``) has no axes and no shape: a
    JSON number, a 0-d float64 array in binary answers."""

    name: str
    axes: tuple[str, ...]
    shape: Callable[[Any, Mapping[str, Selection]], tuple[int, ...]] | None
    dtype: str | None = None  # None: the request's dtype; else a numpy dtype name, always the same
    batched: bool = False  # shaped by the selections: a KServe v2 batch of B selections adds a B axis
    note: str = ""  # what the values mean, after the axes and the dtype

    @property
    def dims(self) -> str:
        """``[axes] dtype`` (the dtype when it is fixed; nothing for a scalar)."""
        if not self.axes:
            return ""
        return f"[{', '.join(self.axes)}]" + ("" if self.dtype is None else f" {self.dtype}")

    @property
    def description(self) -> str:
        """The docs' and the JSON schema's text: its dims, then the note."""
        return self.dims + self.note

    @property
    def json_schema(self) -> dict:
        """Its JSON answer's schema: nested lists, one per axis (bfloat16 and float16 values are
        written as their float values); a scalar is a number."""
        schema: dict = {"type": "integer" if self.dtype == "int32" else "number"}
        for _ in self.axes:
            schema = {"type": "array", "items": schema}
        return {**schema, "description": self.description}

    def of(self, spec, sel: Mapping[str, Selection], dtype) -> tuple[str, tuple[int, ...] | None, str]:
        """(name, shape, numpy dtype name) in a request's answer (a scalar's shape None)."""
        return self.name, None if self.shape is None else self.shape(spec, sel), self.dtype or dtype


def itemsize(dtype: str) -> int:
    """Bytes of one value of an answer's dtype name (bfloat16: 2, numpy has none)."""
    return DTYPES[dtype].itemsize if dtype in DTYPES else np.dtype(dtype).itemsize


def canonical(obj) -> str:
    """The one canonical JSON spelling of a key (sorted keys, no spaces, tuples as lists)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=list)


class Family:
    """The surface every family implements (one module per family, one registry line: engine/tables/__init__.py)."""

    name: str  # the family's name in URLs, specs and the manifest
    fields: tuple[str, ...]  # every field a request may hold
    selections: tuple[str, ...]  # the fields that select positions
    outputs: tuple[Output, ...]  # the answer's arrays, in the answer's order
    schema: dict  # the request's JSON schema (OpenAPI)
    examples: dict  # named request examples (OpenAPI)

    # -- what ``outputs`` gives (computed once per family) --------------------------------------
    @functools.cached_property
    def dtyped(self) -> frozenset[str]:
        """The arrays that take the request's dtype (the rest are fixed)."""
        return frozenset(o.name for o in self.outputs if o.dtype is None)

    @functools.cached_property
    def batched(self) -> frozenset[str]:
        """The arrays shaped by the selections: a KServe v2 batch of B selections gives them a
        leading B (the rest are shared)."""
        return frozenset(o.name for o in self.outputs if o.batched)

    @functools.cached_property
    def returns(self) -> str:
        """One line for the docs: the arrays that come back."""
        return ", ".join(f"{o.name} {o.dims}".rstrip() for o in self.outputs)

    @functools.cached_property
    def answer(self) -> dict:
        """The JSON answer: array name -> its JSON schema (OpenAPI)."""
        return {o.name: o.json_schema for o in self.outputs}

    @property
    def has_dtype(self) -> bool:
        return bool(self.dtyped)

    @property
    def response_schema(self) -> dict:
        """The JSON answer's schema: an object holding every array of ``answer``, and ``spec``
        where the body gave hf_config or table; nothing else."""
        return {
            "type": "object",
            "description": self.returns,
            "required": list(self.answer),
            "properties": {**self.answer, "spec": ANSWER_SPEC_SCHEMA},
            "additionalProperties": False,
        }

    @property
    def selection_fields(self) -> tuple[str, ...]:
        """Every field that may carry a selection (``selections``, the ones the template shortcut
        cuts out, and any a spec takes instead of them, such as rope's ``position_ids``)."""
        return self.selections

    axis_fields: frozenset[str] = frozenset()  # selections of per-axis positions ([k, n])

    def selection_rank(self, name: str) -> int:
        """The rank of one selection of field ``name``: 1 (a list of positions), or 2 for
        per-axis positions ([k, n], rope's ``position_ids``)."""
        return 2 if name in self.axis_fields else 1

    @property
    def required_selections(self) -> tuple[str, ...]:
        """The selection fields every request holds (a v2 request's required inputs)."""
        return tuple(k for k in self.schema.get("required", ()) if k in self.selection_fields)

    # -- requests ----------------------------------------------------------------------------
    def parse_spec(self, req: Mapping):
        """The frozen spec of a request's spec fields (SpecError naming the field)."""
        raise NotImplementedError

    def spec_json(self, spec) -> dict:
        """The canonical spec fields of a parsed spec as a JSON object (what an answer to an
        ``hf_config`` or ``table`` body shows): parsing them again gives the same spec. By default
        the spec dataclass's fields, which are the API's field names."""
        return {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in dataclasses.asdict(spec).items()
            if v is not None
        }

    def parse(self, req: Mapping):
        """(spec, {selection name: Selection}) of a whole request (dtype is read by the caller)."""
        spec = self.parse_spec(req)
        sel = self.parse_selections(spec, req)
        self.check_selections(spec, sel)
        return spec, sel

    def parse_selections(self, spec, req: Mapping) -> dict:
        """{selection name: parsed selection} of a request with this (parsed) spec."""
        return {k: parse_selection(req.get(k), (k,)) for k in self.selections}

    def probe_selections(self, spec, position: int) -> dict:
        """Selection fields of a body reading one ``position`` with this spec (None: an invalid
        one), as JSON: what picks a spec's table without a request's selections."""
        return {name: [position] for name in self.selections}

    def check_selections(self, spec, sel: Mapping[str, Selection]) -> None:
        """Rules joining a spec and its selections (run for every request, cached spec or not)."""

    def output_shapes(self, spec, sel: Mapping[str, Selection], dtype) -> list[tuple]:
        """(name, shape, numpy dtype name) of each array of the answer, in its order, known
        before anything is allocated (a scalar's shape None)."""
        return [o.of(spec, sel, dtype) for o in self.outputs]

    def output_nbytes(self, spec, sel: Mapping[str, Selection], dtype) -> int:
        """Bytes of every array of the answer (a scalar: 8, a float64), known before anything is
        allocated."""
        return sum(
            itemsize(dt) * (1 if shape is None else math.prod(shape))
            for _, shape, dt in self.output_shapes(spec, sel, dtype)
        )

    def precheck(self, spec, sel: Mapping[str, Selection], dtype) -> None:
        """Refusals decidable before computing (e.g. a result that would overflow the dtype)."""

    def compute(self, spec, sel: Mapping[str, Selection], dtype) -> dict:
        """The float64 reference, rounded once: {array name: ndarray | float}."""
        raise NotImplementedError

    # -- stored tables -------------------------------------------------------------------------
    def table_for(self, spec, dtype, sel: Mapping[str, Selection], length: int) -> TableDef | None:
        """The stored table that answers this request, or None when it is computed directly."""
        raise NotImplementedError

    def variant_of(self, spec, sel: Mapping[str, Selection]):
        """Which of a spec's stored tables these selections need (None: the spec's only one)."""
        return None

    def stable_tables(self, spec, dtype, length: int) -> list[TableDef]:
        """Every table a configured spec stores (one, or several where frequencies switch)."""
        t = self.table_for(spec, dtype, {}, length)
        return [t] if t is not None else []

    def table_key(self, tspec, variant) -> dict:
        """The identity of the table a (stripped) table spec fills, as a JSON object."""
        raise NotImplementedError

    def table_spec(self, key: Mapping) -> tuple[Any, Any]:
        """(table spec, variant) from ``table_key``'s object: what the engine builds from. It is
        re-validated by the family's own parser, so a malformed key is a SpecError."""
        raise NotImplementedError

    def stored_length(self, tspec, length: int) -> int:
        """The length a table of this spec is stored with when the engine's length is ``length``."""
        return length

    def reach(self, spec, sel: Mapping[str, Selection]) -> int | None:
        """How long a stored table must be to hold every row (or distance) these selections read:
        what an on-demand table is sized to. None: the table's length does not follow requests."""
        return None

    def layout(self, t: TableDef) -> dict[str, tuple[tuple, str]]:
        """name -> (shape, numpy dtype name) of every array of the stored table."""
        raise NotImplementedError

    def fill(self, t: TableDef, out: dict[str, np.ndarray]) -> dict:
        """Write the table into preallocated arrays (views of a new segment); scalar metadata."""
        raise NotImplementedError

    def attach(self, view) -> None:
        """Per-view facts computed once when a reader maps a table (default: none)."""

    def serve(self, view, spec, sel: Mapping[str, Selection], dtype) -> dict:
        """Answer a parsed request from a mapped table view: exactly ``compute``'s arrays."""
        raise NotImplementedError

    # -- binary answers ------------------------------------------------------------------------
    def answer_metadata(self, shown: Mapping | None = None) -> dict:
        """The safetensors ``__metadata__`` of an answer: the family, and the canonical spec of an
        hf_config or table body (its JSON text)."""
        return {"family": self.name} if shown is None else {"family": self.name, "spec": canonical(shown)}

    def safetensors_header(self, arrays: Mapping, dtype, shown: Mapping | None = None) -> bytes:
        """The safetensors header of an answer with these arrays (shapes and dtypes only matter):
        the one the full path's encoder writes, so a template's answers are byte-identical."""
        bf16 = self.dtyped if dtype == BFLOAT16 else frozenset()
        return formats.safetensors_parts(arrays, bf16, self.answer_metadata(shown))[0]

    # -- the hot path ------------------------------------------------------------------------
    def template(self, hot, req, view, limits) -> Any:
        """A C spec template (``hot`` is posenc.service.shortcut._hot) answering later bodies that differ
        from ``req``'s only in their selections, or None where the shortcut does not apply."""
        return None

    def row_plan(self, req, view) -> RowPlan | None:
        """How ``serve`` answers ``req``'s spec from ``view`` as a row gather (any positions), or None
        where it does not: what the shortcut's RowsTemplate (service/shortcut/hot_rows.c) and the
        co-located reader's lookup (engine/reader/lookup.py, engine.kernels._native.RowGather) both
        read, copying rows by the one row gather (engine/kernels/row_gather.h)."""
        return None


# A row family's answer as a gather (Family.row_plan), read by its fields' names.
@dataclasses.dataclass(frozen=True)
class PastRows:
    """How a row past the stored table is computed, as ``serve`` computes it: the [cos | sin] of
    float64(row) * ``freqs`` times ``scale``, rounded once to ``dtype`` (the engine's sincos kernel);
    stored array a's column c is item ``maps[a][c]`` of it. Rows up to ``row_limit``."""

    freqs: np.ndarray  # float64
    scale: float
    dtype: str
    maps: tuple  # one sequence of ints per stored array
    row_limit: int


@dataclasses.dataclass(frozen=True)
class RowPlan:
    """Output row i of array a is stored row ``positions[i] + offset`` of ``arrays[a]`` through
    ``colmap`` (output column j <- stored column colmap[j], -1: a zero); rows past the stored table
    by ``past`` (None: not computed). With ``axes`` (each output column's axis, of ``naxes``
    position lists: rope's ``position_ids``) column j is read at the position of its axis."""

    arrays: tuple  # 2-d C-contiguous arrays [length, W] of one dtype
    colmap: tuple  # ints
    offset: int = 0
    past: PastRows | None = None
    axes: tuple | None = None
    naxes: int = 1


# The registry, name -> family: posenc.engine.tables fills it (one line per family) and everyone
# reads it from there. It is held here, below the families, so that a TableDef finds its family
# without importing the package that imports every family.
FAMILIES: dict[str, Family] = {}


@dataclasses.dataclass(frozen=True)
class TableDef:
    family: str  # a FAMILIES key
    spec: Any  # the family's table spec (stripped of what only arranges or selects)
    dtype: str | None
    length: int  # rows (rope, sinusoidal), distances (alibi), radius (t5)
    variant: Any = None  # rope: None, 'short'/'long' (longrope) or L (dynamic)

    @property
    def fam(self) -> Family:
        return FAMILIES[self.family]

    @functools.cached_property
    def key(self) -> str:
        return canonical({"table": self.fam.table_key(self.spec, self.variant), "dtype": self.dtype})

    @functools.cached_property
    def digest(self) -> str:
        return hashlib.sha1(self.key.encode()).hexdigest()[:20]

    def layout(self) -> dict[str, tuple[tuple, str]]:
        return self.fam.layout(self)

    def nbytes(self) -> int:
        return sum(int(np.prod(shape)) * np.dtype(dt).itemsize for shape, dt in self.layout().values())

    def build(self) -> tuple[dict[str, np.ndarray], dict]:
        """The arrays (freshly allocated) and scalar metadata."""
        out = {name: np.empty(shape, dtype) for name, (shape, dtype) in self.layout().items()}
        return out, self.fill(out)

    def fill(self, out: dict[str, np.ndarray]) -> dict:
        return self.fam.fill(self, out)

    @classmethod
    def from_key(cls, key: str, length: int) -> TableDef:
        """The table a key names, re-validated: what the engine builds when a reader asks. A key
        that no request could have produced is a SpecError at ``table``."""
        try:
            obj = json.loads(key)
            fam = FAMILIES[obj["table"]["family"]]
            dtype = obj["dtype"]
        except (ValueError, TypeError, KeyError):
            raise SpecError(("table",), "not a table key") from None
        if fam.has_dtype:
            check_dtype(dtype, ("table", "dtype"))
        elif dtype is not None:
            raise SpecError(("table", "dtype"), f"{fam.name} tables have no dtype")
        tspec, variant = fam.table_spec(obj["table"])
        t = cls(fam.name, tspec, dtype, fam.stored_length(tspec, length), variant)
        if t.key != key:
            raise SpecError(("table",), "not a canonical table key")
        return t
