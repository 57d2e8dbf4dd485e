"""The OpenAPI document of a real ``posenc serve`` against its validator: the document is valid
OpenAPI (openapi-spec-validator), it describes the KServe v2 REST routes too, and for generated
bodies (hypothesis) the server accepts exactly what the schema allows: an explicit ``null`` for
a field with a default (the parsers read it as the default) is allowed by both. An integer
written ``1.0`` is one case no schema can refuse (JSON Schema's ``integer`` matches it): the
server refuses it, and the document says so on every integer field."""

from __future__ import annotations

import httpx
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openapi_spec_validator import validate

from posenc.service.front.openapi import INTEGER_NOTE, component_name
from tests.service_cases import CONFIG

BASES = {
    "rope": {"head_dim": 64, "positions": [1, 2]},
    "sinusoidal": {"d_model": 64, "positions": [3]},
    "alibi": {"num_heads": 8, "query": [1], "key": [0, 1]},
    "t5-buckets": {"query": [1], "key": [2]},
}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    from tests.procs import Procs

    reg = Procs(tmp_path_factory.mktemp("openapi"))
    s = reg.serve(CONFIG, workers=1)
    try:
        with httpx.Client(base_url=s.url, timeout=30) as c:
            yield c, c.get("/openapi.json").json()
    finally:
        assert s.stop() == 0, s.output()
        reg.cleanup()


def spec_form(doc: dict, family: str) -> dict:
    """The request schema's first form (the spec fields), resolvable against the document."""
    return {
        **doc["components"]["schemas"][component_name(family) + "Request"]["oneOf"][0],
        "components": doc["components"],
    }


def test_the_document_is_valid_openapi_and_has_the_v2_routes(srv):
    _, doc = srv
    validate(doc)
    for path, method in [
        ("/v2", "get"),
        ("/v2/health/ready", "get"),
        ("/v2/models/{model}", "get"),
        ("/v2/models/{model}/infer", "post"),
        ("/v2/models/{model}/versions/{version}/infer", "post"),
        ("/v2/systemsharedmemory/region/{region}/register", "post"),
    ]:
        assert method in doc["paths"].get(path, {}), path


def test_every_documented_v2_get_route_is_served(srv):
    c, doc = srv
    for path, ops in doc["paths"].items():
        if path.startswith("/v2") and "get" in ops:
            r = c.get(path.format(model="rope", version="1", region="none"))
            assert r.status_code in (200, 400, 404), (path, r.status_code, r.text)
            assert r.status_code != 404 or "error" in r.json(), (path, r.text)


def _check_nulls(c, doc, rng) -> None:
    """40 bodies, each a family's base body with a random subset of the fields whose lone null the
    schema allows set to null, plus one more field set to null: the server accepts exactly the
    bodies the schema does. (A seeded loop: hypothesis' data() reported its own draws as flaky
    here, across families whose field lists differ in length.)"""
    for _ in range(40):
        family = sorted(BASES)[rng.integers(len(BASES))]
        schema = spec_form(doc, family)
        fields = sorted(
            k
            for k, p in schema["properties"].items()
            if k not in BASES[family]
            and jsonschema.Draft202012Validator(schema).is_valid({**BASES[family], k: None})
        )
        nulls = [k for k in fields if rng.integers(2)]
        others = sorted(set(schema["properties"]) - set(BASES[family]))
        extra = others[rng.integers(len(others))]
        body = {**BASES[family], **{k: None for k in nulls}, extra: None}
        allowed = jsonschema.Draft202012Validator(schema).is_valid(body)
        r = c.post(f"/v1/{family}", json=body)
        assert (r.status_code == 200) == allowed, (family, body, allowed, r.status_code, r.text[:300])


def test_an_explicit_null_is_accepted_where_the_schema_allows_it_and_only_there(srv, rng):
    c, doc = srv
    _check_nulls(c, doc, rng)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(position=st.integers(0, 2**31 - 1), as_float=st.booleans())
def _check_integers(c, doc, position, as_float):
    body = {"head_dim": 64, "positions": [float(position) if as_float else position]}
    r = c.post("/v1/rope", json=body)
    assert r.status_code == (422 if as_float else 200), (body, r.status_code, r.text[:300])
    if as_float:
        assert r.json()["detail"][0]["loc"] == ["body", "positions", 0], r.text


def test_an_integer_written_with_a_fraction_is_refused_and_the_document_says_so(srv):
    c, doc = srv
    items = doc["components"]["schemas"]["Selection"]["oneOf"][0]["items"]
    assert items["type"] == "integer" and INTEGER_NOTE in items["description"]
    rope = spec_form(doc, "rope")["properties"]
    assert INTEGER_NOTE in rope["head_dim"]["description"]
    _check_integers(c, doc)
