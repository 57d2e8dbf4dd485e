"""OpenAPI held to the raw front (service/front/front.py), which answers every ``POST /v1/{family}``
before FastAPI's routing: every request example the document shows (each family's, and a model
config's) is a body its request schema accepts and the raw front answers, in JSON as the answer
schema says, and in safetensors and npz (read back by the safetensors library and numpy) with
exactly the arrays the answer schema names, of the ranks it nests; bodies the request schema
refuses, the raw front refuses with a 422 naming the field; every status it answers is one the
operation documents; and the FastAPI route OpenAPI describes gives the same status, headers and
bytes (one handler below their routing)."""

from __future__ import annotations

import asyncio
import io

import httpx
import jsonschema
import numpy as np
import pytest
from safetensors.torch import load as safetensors_load  # torch: it reads BF16, numpy has none

from posenc.engine.tables import FAMILIES
from posenc.service.front import openapi
from posenc.service.front.app import create_app
from tests.service_cases import VALID

ACCEPTS = ("application/json", "application/x-safetensors", "application/x-npz")


def front_for(settings):
    front = create_app(settings)
    front.svc.attach_all()
    return front


def validator(doc: dict, component: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"$ref": openapi.REF + component, "components": doc["components"]})


def post_all(app, family: str, bodies: list, accepts=ACCEPTS) -> list[list[httpx.Response]]:
    """Each body posted to ``app`` once per Accept value: [[response per accept] per body]."""

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return [
                [await c.post(f"/v1/{family}", json=b, headers={"accept": a}) for a in accepts]
                for b in bodies
            ]

    return asyncio.run(go())


def depth(schema: dict) -> int:
    """How many lists a JSON schema nests (0: a number)."""
    n = 0
    while schema.get("type") == "array":
        schema, n = schema["items"], n + 1
    return n


def shape_of(value) -> tuple:
    return np.shape(np.asarray(value, dtype=np.float64))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_example_is_answered_as_the_answer_schema_says(settings, family):
    front = front_for(settings)
    doc = front.app.openapi()
    op = doc["paths"][f"/v1/{family}"]["post"]
    name = openapi.component_name(family)
    request_schema, answer_schema = validator(doc, name + "Request"), validator(doc, name + "Response")
    arrays = doc["components"]["schemas"][name + "Response"]["required"]
    ranks = {a: depth(doc["components"]["schemas"][name + "Response"]["properties"][a]) for a in arrays}
    examples = op["requestBody"]["content"]["application/json"]["examples"]
    assert FAMILIES[family].examples.keys() <= examples.keys()
    bodies = [ex["value"] for ex in examples.values()]
    for body in bodies:
        request_schema.validate(body)
    for title, body, (js, st, npz) in zip(examples, bodies, post_all(front, family, bodies)):
        for r in (js, st, npz):
            # (an example Swagger UI's "Try it out" sends as it is: one answered only in part, or
            # over the response limit in JSON, fails here; give it positions)
            assert r.status_code == 200, (title, r.headers.get("content-type"), r.text[:300])
        answer = js.json()
        answer_schema.validate(answer)
        # spec: only where the body stood for its spec fields with a model's config (or a table)
        assert ("spec" in answer) == ("hf_config" in body), title
        tensors = safetensors_load(st.content)
        files = np.load(io.BytesIO(npz.content))
        assert sorted(tensors) == sorted(arrays), title
        assert sorted(set(files.files) - {"spec", "__bfloat16__"}) == sorted(arrays), title
        for a in arrays:
            assert tensors[a].ndim == ranks[a] and files[a].ndim == ranks[a], (title, a)
            assert shape_of(answer[a]) == tuple(tensors[a].shape) == files[a].shape, (title, a)
        # the FastAPI route: the same status, headers and bytes, in every format
        for ours, theirs in zip((js, st, npz), post_all(front.app, family, [body])[0]):
            assert (theirs.status_code, theirs.headers, theirs.content) == (
                ours.status_code,
                ours.headers,
                ours.content,
            ), title


def refused(family: str) -> list[tuple[dict, str]]:
    """(a body the request schema refuses, the field a 422 must name): an unknown field, each
    selection with a negative or a fractional position, and an unknown dtype."""
    valid, fam = VALID[family], FAMILIES[family]
    out = [({**valid, "bogus": 1}, "bogus")]
    for sel in fam.selections:
        out += [({**valid, sel: [-1]}, sel), ({**valid, sel: [1.5]}, sel)]
    if fam.has_dtype:
        out.append(({**valid, "dtype": "float8"}, "dtype"))
    return out


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_what_the_schema_refuses_the_raw_front_refuses_and_every_status_is_documented(settings, family):
    front = front_for(settings)
    doc = front.app.openapi()
    op = doc["paths"][f"/v1/{family}"]["post"]
    request_schema = validator(doc, openapi.component_name(family) + "Request")
    cases = refused(family)
    for body, _ in cases:
        assert not request_schema.is_valid(body), body
    answers = post_all(front, family, [b for b, _ in cases], ("application/json",))
    for (body, field), (r,) in zip(cases, answers):
        assert r.status_code == 422, (body, r.text[:300])
        validator(doc, "ValidationError").validate(r.json())
        assert r.json()["detail"][0]["loc"][:2] == ["body", field], (body, r.json())
    # the raw front's other refusals (406, 413): documented, with the bodies the document says
    valid = VALID[family]
    if family == "sinusoidal-grid":  # positions are rows of its grid: a grid of 2**20 wide rows
        big = {"embed_dim": 4096, "grid_size": 1024}
    else:
        big = {**valid, **{s: {"start": 0, "stop": 2**30} for s in FAMILIES[family].selections}}
    ((html,),) = post_all(front, family, [valid], ("text/html",))
    ((huge,),) = post_all(front, family, [big], ("application/json",))
    assert (html.status_code, huge.status_code) == (406, 413), (html.text, huge.text)
    for r in (html, huge):
        validator(doc, "Error").validate(r.json())
    seen = {str(r.status_code) for (r,) in answers} | {"406", "413"}
    assert seen <= set(op["responses"]), (seen, sorted(op["responses"]))
