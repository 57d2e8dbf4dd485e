"""One v2 inference, whichever transport brought it: a decoded request -> pipeline bodies -> the
answer's arrays as output tensors.

A v2 request becomes pipeline bodies (engine/answer/pipeline.py): the model's spec (the ``spec``
parameter of a family model, or a table model's fixed spec and its ``dtype`` parameter) plus the
inputs as selections. A worker's ``Pipeline`` validates each distinct spec once. Batches:
- one-selection families (rope, sinusoidal): the B rows of a [B, N] input are one selection of
  B·N positions, answered in one gather and reshaped to [B, N, ...]. The frequencies of
  ``dynamic`` and ``longrope`` without ``seq_len`` therefore follow the whole batch's largest
  position, as transformers computes them for position_ids of shape [B, N];
- query/key families (alibi, t5-buckets): one pipeline request per row, stacked.
Every row of a batch is otherwise what /v1 answers for that row, bit for bit.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import orjson

from posenc.engine.answer import pipeline
from posenc.engine.core import jsonread
from posenc.engine.core.errors import SpecError, TooLarge, TooManyPositions
from posenc.service.core import sizing
from posenc.service.core.settings import INLINE_BYTES, INLINE_JSON_BYTES
from posenc.service.v2.errors import BadRequest, path_of
from posenc.service.v2.models import Model, Models, example_spec
from posenc.service.v2.shm import Regions
from posenc.service.v2.tensors import as_output, check_shape, from_bytes, from_json, output_datatype

# KServe's extensions: the binary data extension's header (the JSON inference header's bytes, REST),
# the shared-memory extension's parameters
LENGTH_HEADER = b"inference-header-content-length"
SHM_PARAMS = ("shared_memory_region", "shared_memory_byte_size", "shared_memory_offset")


@dataclasses.dataclass(slots=True)
class Input:
    name: object
    datatype: object
    shape: object
    params: dict
    raw: object = None  # bytes (binary data / raw contents), or None
    data: object = None  # JSON data, or None


@dataclasses.dataclass(slots=True)
class Output:
    name: object
    params: dict


@dataclasses.dataclass(slots=True)
class Inference:
    model: object
    version: object = ""
    id: object = ""
    params: dict = dataclasses.field(default_factory=dict)
    inputs: list = dataclasses.field(default_factory=list)
    outputs: list | None = None


@dataclasses.dataclass(slots=True)
class Tensor:
    """An output of the answer: its array, or (``region`` set) already written into the
    client's shared memory."""

    name: str
    datatype: str
    shape: list
    array: np.ndarray
    params: dict
    region: dict | None = None


@dataclasses.dataclass(slots=True)
class Plan:
    model: Model
    where: dict  # selection name -> index of its input (for error paths)
    batch: tuple | None  # (B, N) of a batch answered as one selection, else None
    stacked: bool  # rows answered one by one and stacked along a new leading axis
    reqs: list = dataclasses.field(default_factory=list)  # pipeline Requests: one, or one per row
    outputs: list = dataclasses.field(default_factory=list)  # [(name, Output | None)] in answer order
    inline: bool = True
    nbytes: int = 0  # the answer's arrays, all together (known before they are built)
    text: int = 0  # at least the bytes of the outputs answered as JSON text (v2 REST), 0: none

    def path(self, loc: tuple, row: int | None = None) -> str:
        """The v2 field path of a pipeline error's ``loc``."""
        if loc and loc[0] in self.where:
            at = ["inputs", self.where[loc[0]], "data"]
            ints = [x for x in loc[1:] if isinstance(x, int)]
            if ints:
                *axis, i = ints  # per-axis positions ([k, N]): the axis comes first
                at += (
                    [*divmod(i, self.batch[1])][:1] + axis + [i % self.batch[1]]
                    if self.batch
                    else ([row] if row is not None else []) + axis + [i]
                )
            return path_of(at)
        if loc and loc[0] in self.model.family.selection_fields:  # a selection no input gave
            return "inputs"
        if self.model.is_table:  # a fixed spec was checked by the engine: only dtype can be wrong
            return path_of(("parameters", "dtype") if loc[:1] == ("dtype",) else loc)
        return path_of(("parameters", "spec", *loc))


class Inferer:
    """Plans and answers v2 inferences against a worker's engine client (or, with
    ``client=None``, by computing every answer)."""

    def __init__(self, settings, client=None, models: Models | None = None, regions: Regions | None = None):
        self.settings = settings
        self.client = client
        self.pipeline = client.pipeline if client is not None else pipeline.Pipeline()
        self.models = models or Models(client)
        self.regions = regions

    # -- phase 1: validate and plan (cheap, on the event loop) ----------------------------------
    def plan(self, inf: Inference, as_json=None) -> Plan:
        """``as_json(i)``: whether output ``i`` of the answer goes as JSON text (v2 REST); None:
        every output is binary (gRPC). The response limit holds for the answer's bytes: binary
        outputs' arrays plus a bound on the JSON outputs' text (service/core/sizing.py)."""
        model = self.models.get(inf.model, inf.version if isinstance(inf.version, str) else "?")
        fam = model.family
        spec = self._spec(model, inf.params)
        arrays, where = self._inputs(model, inf.inputs)
        ranks = {n: fam.selection_rank(n) for n in arrays}
        batched = {a.ndim > ranks[n] for n, a in arrays.items()}
        if len(batched) > 1 or (batched == {True} and len({a.shape[0] for a in arrays.values()}) > 1):
            raise BadRequest(
                "inputs",
                "inputs must be all [N] or all [B, N] with one B (per-axis inputs [k, N] "
                "or [B, k, N]), got " + ", ".join(f"{n} {list(a.shape)}" for n, a in arrays.items()),
            )
        for name, a in arrays.items():
            if a.shape[-1] > self.settings.max_positions:
                raise TooManyPositions(name, a.shape[-1], self.settings.max_positions)
        batched = batched == {True}
        one = len(fam.selections) == 1
        shape = next((a.shape[0], a.shape[-1]) for a in arrays.values()) if batched and one else None
        plan = Plan(model, where, shape, batched and not one)
        if plan.batch:  # one gather for the whole batch ([B, k, N] -> [k, B·N])
            bodies = [
                {
                    **spec,
                    **{
                        n: a.reshape(-1) if a.ndim == 2 else np.moveaxis(a, 0, -2).reshape(a.shape[1], -1)
                        for n, a in arrays.items()
                    },
                }
            ]
        elif plan.stacked:
            bodies = [
                {**spec, **{n: a[i] for n, a in arrays.items()}}
                for i in range(next(iter(arrays.values())).shape[0])
            ]
        else:
            bodies = [{**spec, **arrays}]
        nbytes = 0
        for row, body in enumerate(bodies):
            try:
                r = self.pipeline.request(fam.name, body)
                nbytes += pipeline.check(r, None, None)
            except SpecError as e:
                raise BadRequest(plan.path(e.loc, row if plan.stacked else None), e.msg) from None
            plan.reqs.append(r)
        limit = self.settings.max_response_bytes
        if nbytes > limit:
            raise TooLarge(nbytes, limit)
        plan.outputs = self._outputs(model, inf.outputs)
        plan.nbytes = nbytes
        if as_json is not None:
            plan.text = self._text_bound(plan, as_json)
            if plan.text and nbytes + plan.text > limit:
                raise sizing.AnswerTooLarge(nbytes + plan.text, limit, "json", plan.reqs[0])
        plan.inline = (
            nbytes <= INLINE_BYTES
            and plan.text <= INLINE_JSON_BYTES
            and all(self.client is None or self.client.is_mapped(r) for r in plan.reqs)
        )
        return plan

    @staticmethod
    def _text_bound(plan: Plan, as_json) -> int:
        """At least the bytes of the JSON ``data`` of the outputs ``as_json`` picks (an output in
        shared memory is not in the body), each as one flat list."""
        picked = {
            name
            for i, (name, o) in enumerate(plan.outputs)
            if as_json(i) and not (o is not None and "shared_memory_region" in o.params)
        }
        if not picked:
            return 0
        text = 0
        for r in plan.reqs:
            for name, shape, dt in r.shapes():
                if name in picked:
                    cells = 1 if shape is None else sizing.cells(shape)
                    text += sizing.flat_json_bound(cells, dt, r.spec) + 2  # (a comma between rows)
        return text

    def _spec(self, model: Model, params: dict) -> dict:
        known = ("dtype",) if model.is_table else ("spec",)
        for k in params:
            if k not in known and k != "binary_data_output":
                raise BadRequest(
                    f"parameters.{k}", f"unknown parameter; model {model.name!r} takes " + " and ".join(known)
                )
        if model.is_table:
            dtype = params.get("dtype", model.dtype)
            if not model.family.has_dtype:
                if "dtype" in params:
                    raise BadRequest("parameters.dtype", f"{model.family.name} answers have no dtype (int32)")
                return dict(model.fixed)
            return {**model.fixed, "dtype": dtype}
        raw = params.get("spec")
        if raw is None:
            raise BadRequest(
                "parameters.spec",
                "field required: the spec as a JSON string, e.g. "
                + orjson.dumps(example_spec(model.family)).decode(),
            )
        if not isinstance(raw, str):
            raise BadRequest("parameters.spec", f"must be a JSON string, got {type(raw).__name__}")
        try:
            spec = jsonread.loads(raw, jsonread.in_hf_config)  # config.json's NaN/Infinity: in hf_config only
        except SpecError as e:
            raise BadRequest(path_of(("parameters", "spec", *e.loc)), e.msg) from None
        except orjson.JSONDecodeError as e:
            raise BadRequest("parameters.spec", f"not valid JSON: {e}") from None
        if not isinstance(spec, dict):
            raise BadRequest("parameters.spec", "must be a JSON object")
        for name in model.family.selection_fields:
            if name in spec:
                raise BadRequest(f"parameters.spec.{name}", "selections come as inputs, not in the spec")
        return spec

    def _inputs(self, model: Model, inputs: list) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        fam, out, where = model.family, {}, {}
        for i, t in enumerate(inputs):
            path = f"inputs[{i}]"
            if t.name not in fam.selection_fields:
                raise BadRequest(
                    f"{path}.name",
                    f"unknown input {t.name!r}; {model.name} takes " + ", ".join(fam.selection_fields),
                )
            if t.name in out:
                raise BadRequest(f"{path}.name", f"input {t.name!r} given twice")
            for k in t.params:
                if k not in SHM_PARAMS and k != "binary_data_size":
                    raise BadRequest(f"{path}.parameters.{k}", "unknown parameter")
            shape = check_shape(t.shape, path, fam.selection_rank(t.name))
            if "shared_memory_region" in t.params:
                if self.regions is None:
                    raise BadRequest(
                        f"{path}.parameters.shared_memory_region", "shared memory is not served here"
                    )
                p = t.params
                raw = self.regions.read(
                    p["shared_memory_region"],
                    p.get("shared_memory_offset"),
                    p.get("shared_memory_byte_size"),
                    f"{path}.parameters",
                )
                a = from_bytes(raw, t.datatype, shape, path)
            elif t.raw is not None:
                a = from_bytes(t.raw, t.datatype, shape, path)
            elif t.data is not None:
                a = from_json(t.data, t.datatype, shape, path)
            else:
                raise BadRequest(f"{path}.data", "field required (or binary data, or a shared memory region)")
            out[t.name], where[t.name] = a, i
        for name in fam.required_selections:
            if name not in out:
                raise BadRequest(
                    "inputs", f"missing input {name!r}; {model.name} takes {', '.join(fam.selection_fields)}"
                )
        return out, where

    def _outputs(self, model: Model, outputs: list | None) -> list:
        if outputs is None:
            return model.all_outputs
        names = [n for n, _ in model.all_outputs]
        seen, out = set(), []
        for i, o in enumerate(outputs):
            if o.name not in names:
                raise BadRequest(
                    f"outputs[{i}].name",
                    f"unknown output {o.name!r}; {model.name} answers " + ", ".join(names),
                )
            if o.name in seen:
                raise BadRequest(f"outputs[{i}].name", f"output {o.name!r} asked twice")
            for k in o.params:
                if k not in SHM_PARAMS and k != "binary_data":
                    raise BadRequest(f"outputs[{i}].parameters.{k}", "unknown parameter")
            seen.add(o.name)
            out.append((o.name, o))
        return out

    # -- phase 2: the arrays (inline for small answers from mapped tables, else in a thread) ------
    def execute(self, plan: Plan) -> list[Tensor]:
        rows = []
        for row, r in enumerate(plan.reqs):
            try:
                rows.append(pipeline.arrays(r, self.client.view(r) if self.client is not None else None))
            except SpecError as e:  # e.g. a value that overflows the dtype
                raise BadRequest(plan.path(e.loc, row if plan.stacked else None), e.msg) from None
        first, fam, dtype = rows[0], plan.model.family, plan.reqs[0].dtype
        tensors = []
        for i, (name, o) in enumerate(plan.outputs):
            a = as_output(first[name])
            if name in fam.batched and plan.batch is not None:
                a = a.reshape(*plan.batch, *a.shape[1:])
            elif name in fam.batched and plan.stacked:
                a = _stack([r[name] for r in rows])
            t = Tensor(
                name,
                output_datatype(a, dtype == "bfloat16" and name in fam.dtyped),
                list(a.shape),
                a,
                o.params if o is not None else {},
            )
            if self.regions is not None and "shared_memory_region" in t.params:
                p = t.params
                self.regions.write(
                    p["shared_memory_region"],
                    p.get("shared_memory_offset"),
                    p.get("shared_memory_byte_size"),
                    a,
                    f"outputs[{i}].parameters",
                )
                t.region = {
                    "shared_memory_region": p["shared_memory_region"],
                    "shared_memory_byte_size": a.nbytes,
                }
            tensors.append(t)
        return tensors

    def infer(self, inf: Inference) -> list[Tensor]:
        return self.execute(self.plan(inf))


def _stack(arrays: list) -> np.ndarray:
    out = np.empty((len(arrays), *arrays[0].shape), arrays[0].dtype)
    for i, a in enumerate(arrays):
        out[i] = a
    return out
