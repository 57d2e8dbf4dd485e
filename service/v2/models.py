"""The v2 models (docs/reference.md): one per family, named as the family, whose spec comes with each
request (the ``spec`` parameter); and one per configured table of the engine, named as in
``GET /v1/tables``, whose spec is fixed (a request sends positions, and may set ``dtype``).

Family models come from the registry (``FAMILIES``); table models from the engine's manifest
(its pinned entries carry each configured table's name and spec), read again when it changes. A
configured table named like a family is served only through the family model.

Metadata lists the inputs (INT64 of shape [-1]; INT32 and [B, N] batches are accepted too) and
the outputs with their datatypes and shapes, -1 where a dimension varies: derived from two small
answers of the family itself, so no family's shapes are written here.
"""

from __future__ import annotations

import functools
import logging

import numpy as np

from posenc.engine.answer import pipeline
from posenc.engine.core.dtypes import DEFAULT_DTYPE
from posenc.engine.tables import FAMILIES, Family
from posenc.service.v2.errors import ModelNotFound
from posenc.service.v2.tensors import as_output, output_datatype

log = logging.getLogger("posenc.service")

VERSION = "1"  # every model has one version
PLATFORM = "posenc"


class Model:
    def __init__(self, name: str, family: Family, fixed: dict | None = None, dtype: str | None = None):
        self.name = name
        self.family = family
        self.fixed = fixed  # a table model's spec fields; None for a family model
        self.dtype = dtype if family.has_dtype else None  # a table model's default dtype

    @property
    def is_table(self) -> bool:
        return self.fixed is not None

    @functools.cached_property
    def all_outputs(self) -> list:
        """[(output name, None)] in the answer's order: what a request naming no outputs gets."""
        return [(o["name"], None) for o in self.metadata["outputs"]]

    @functools.cached_property
    def metadata(self) -> dict:
        fam = self.family
        inputs = [
            {"name": n, "datatype": "INT64", "shape": [-1] * fam.selection_rank(n)}
            for n in fam.selection_fields
        ]
        return {
            "name": self.name,
            "versions": [VERSION],
            "platform": PLATFORM,
            "inputs": inputs,
            "outputs": _output_metadata(fam, self.fixed, self.dtype or DEFAULT_DTYPE),
        }


def _output_metadata(fam: Family, fixed: dict | None, dtype: str) -> list[dict]:
    """Outputs of a model: names and datatypes from a small answer, shapes with -1 for every
    dimension that differs between two answers of different selection sizes (a family model:
    every dimension of an array, since the spec is the request's)."""
    spec = fixed if fixed is not None else example_spec(fam)
    dt = {"dtype": dtype} if fam.has_dtype else {}
    one = pipeline.compute(fam.name, {**spec, **dt, **{n: [0] for n in fam.selections}})
    two = pipeline.compute(
        fam.name, {**spec, **dt, **{n: list(range(2 + i)) for i, n in enumerate(fam.selections)}}
    )
    out = []
    for name, v in one.items():
        a, b = as_output(v), as_output(two[name])
        if isinstance(v, np.ndarray) and fixed is None:
            shape = [-1] * a.ndim
        else:
            shape = [x if x == y else -1 for x, y in zip(a.shape, b.shape)]
        bf16 = dtype == "bfloat16" and name in fam.dtyped
        out.append({"name": name, "datatype": output_datatype(a, bf16), "shape": shape})
    return out


def example_spec(fam: Family) -> dict:
    body = next(iter(fam.examples.values()))["value"]
    return {k: v for k, v in body.items() if k not in fam.selection_fields and k != "dtype"}


FAMILY_MODELS = {name: Model(name, fam) for name, fam in FAMILIES.items()}


class Models:
    """Every model this server answers: the family models and the client's configured tables."""

    def __init__(self, client=None):
        self.client = client
        self._seen = None
        self._tables: dict[str, Model] = {}

    def tables(self) -> dict[str, Model]:
        m = self.client.manifest() if self.client is not None else None
        if m is not self._seen:
            self._tables, self._seen = _table_models(m), m
        return self._tables

    def get(self, name, version: str = "") -> Model:
        model = FAMILY_MODELS.get(name) if isinstance(name, str) else None
        if model is None and isinstance(name, str):
            model = self.tables().get(name)
        if model is None:
            raise ModelNotFound(f"unknown model {name!r}; models: {', '.join(self.names())}")
        if version not in ("", VERSION):
            raise ModelNotFound(f"unknown version {version!r} of model {name!r}; versions: {VERSION}")
        return model

    def names(self) -> list[str]:
        return [*FAMILY_MODELS, *self.tables()]

    def ready(self, model: Model) -> bool:
        """A table model is ready while its table is in the engine's manifest."""
        return not model.is_table or model.name in self.tables()


def _table_models(manifest: dict | None) -> dict[str, Model]:
    out: dict[str, Model] = {}
    for e in (manifest or {}).get("tables", {}).values():
        name, fam = e.get("name"), FAMILIES.get(e.get("family"))
        if not e.get("pinned") or "spec" not in e or fam is None or name in out:
            continue  # the first entry of a name gives its default dtype (the config's first)
        if name in FAMILY_MODELS:
            log.warning(
                "configured table %r has a family's name: v2 serves it only as the family model", name
            )
            continue
        out[name] = Model(name, fam, dict(e["spec"]), e.get("dtype"))
    return out
