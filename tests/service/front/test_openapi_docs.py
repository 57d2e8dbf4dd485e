"""The OpenAPI document and /docs (service/front/openapi.py): the document passes openapi-spec-validator,
its components are every family's request and JSON answer (generated from the registry) and the
refusals' bodies, real answers of the app validate against them, and /docs with its assets loads
from this server alone (no CDN: an air-gapped cluster gets a working page)."""

from __future__ import annotations

import asyncio
import copy
import fnmatch
import re
from pathlib import Path

import httpx
import jsonschema
import pytest
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

from posenc.engine.answer.pipeline import body_schema
from posenc.engine.tables import FAMILIES
from posenc.service.core.settings import Settings
from posenc.service.front import openapi
from posenc.service.front.app import create_app
from tests.service_cases import REQUESTS, VALID

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[3]
NO_ENGINE = Settings(namespace="ptest-openapi-no-engine")


def document(settings: Settings = NO_ENGINE) -> dict:
    return create_app(settings).app.openapi()


def schema_validator(doc: dict, component: str) -> jsonschema.Draft202012Validator:
    """A validator of one component, its references resolved inside the document."""
    return jsonschema.Draft202012Validator({"$ref": openapi.REF + component, "components": doc["components"]})


def fetch(app, *paths) -> list[httpx.Response]:
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return [await c.get(p) for p in paths]

    return asyncio.run(go())


# -- the document --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings",
    [NO_ENGINE, Settings(namespace="ptest-openapi-no-engine", auth_token="tok")],
    ids=["open", "token"],
)
def test_the_document_is_valid_openapi(settings):
    doc = document(settings)
    validate(doc)
    broken = copy.deepcopy(doc)
    broken["components"]["schemas"]["RopeRequest"]["type"] = 5  # the validator does look
    with pytest.raises(OpenAPIValidationError):
        validate(broken)


def test_components_name_every_family_request_and_answer_and_the_refusals():
    doc = document()
    names = {openapi.component_name(f) for f in FAMILIES}
    assert names == {"Rope", "Sinusoidal", "SinusoidalGrid", "Alibi", "T5Buckets"}
    want = {f"{n}{kind}" for n in names for kind in ("Request", "Response")} | {
        "Selection",
        "Dtype",
        "ValidationError",
        "Error",
        "V2Error",
        "V2InferenceRequest",
        "V2InferenceResponse",
        "V2RegisterRequest",
    }
    assert set(doc["components"]["schemas"]) == want
    for name, fam in FAMILIES.items():
        op = doc["paths"][f"/v1/{name}"]["post"]
        body = op["requestBody"]["content"]["application/json"]
        assert body["schema"] == {"$ref": f"{openapi.REF}{openapi.component_name(name)}Request"}
        assert body["examples"] == body_schema(fam)[1]  # the family's, a config's
        assert fam.examples.items() <= body["examples"].items()
        ok = op["responses"]["200"]["content"]
        assert ok["application/json"]["schema"] == {
            "$ref": f"{openapi.REF}{openapi.component_name(name)}Response"
        }
        assert {"application/x-safetensors", "application/x-npz"} <= set(ok)
        assert op["responses"]["422"]["content"]["application/json"]["schema"] == {
            "$ref": openapi.REF + "ValidationError"
        }
        for status in ("406", "413", "503"):
            assert op["responses"][status]["content"]["application/json"]["schema"] == {
                "$ref": openapi.REF + "Error"
            }
        assert "security" not in op and "401" not in op["responses"]
        # every body form (spec fields, hf_config, table) refers to the one Selection component
        for form in doc["components"]["schemas"][f"{openapi.component_name(name)}Request"]["oneOf"]:
            assert all(form["properties"][s] == {"$ref": openapi.REF + "Selection"} for s in fam.selections)


def test_with_a_token_guarded_operations_need_bearer_and_health_does_not():
    doc = document(Settings(namespace="ptest-openapi-no-engine", auth_token="tok"))
    assert doc["components"]["securitySchemes"] == {"bearer": {"type": "http", "scheme": "bearer"}}
    for path, ops in doc["paths"].items():
        for op in ops.values():
            guarded = path.startswith(("/v1/", "/v2/")) or path == "/v2"
            assert (op.get("security") == [{"bearer": []}]) is guarded, path
            assert ("401" in op["responses"]) is guarded, path
    assert {"/healthz", "/readyz", "/metrics", "/v1/tables"} <= set(doc["paths"])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_example_and_valid_body_match_its_request_schema(family):
    v = schema_validator(document(), openapi.component_name(family) + "Request")
    for ex in FAMILIES[family].examples.values():
        v.validate(ex["value"])
    v.validate(VALID[family])
    assert not v.is_valid({**VALID[family], "unknown_field": 1})


def test_the_apps_answers_and_refusals_match_their_schemas(settings):
    """Real JSON answers of the app (every family, every dtype in REQUESTS) against the 200
    schema, and real 422 / 413 / 406 bodies against theirs."""
    front = create_app(settings)
    front.svc.attach_all()
    doc = front.app.openapi()

    async def go():
        out = []
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=front), base_url="http://t") as c:
            for family, body in REQUESTS:
                out.append((family, 200, await c.post(f"/v1/{family}", json=body)))
            for family, body in VALID.items():
                out.append((family, 422, await c.post(f"/v1/{family}", json={**body, "bogus": 1})))
                out.append(
                    (family, 406, await c.post(f"/v1/{family}", json=body, headers={"accept": "text/html"}))
                )
            out.append(
                (
                    "rope",
                    413,
                    await c.post("/v1/rope", json={"head_dim": 64, "positions": {"start": 0, "stop": 2**20}}),
                )
            )
        return out

    results = asyncio.run(go())
    for family, status, r in results:
        assert r.status_code == status, (family, r.text[:300])
        component = {200: openapi.component_name(family) + "Response", 422: "ValidationError"}.get(
            status, "Error"
        )
        schema_validator(doc, component).validate(r.json())
    # the schema is strict enough to notice a wrong shape
    rope_answer = next(r for f, s, r in results if f == "rope" and s == 200).json()
    v = schema_validator(doc, "RopeResponse")
    assert not v.is_valid({**rope_answer, "cos": rope_answer["cos"][0]})
    assert not v.is_valid({k: x for k, x in rope_answer.items() if k != "inv_freq"})


# -- /docs ---------------------------------------------------------------------------------------


def test_docs_and_their_assets_load_from_this_server_alone():
    app = create_app(NO_ENGINE)
    page, spec = fetch(app, "/docs", "/openapi.json")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    assert not re.search(r"(?:https?:)?//", html), "the page names an outside URL"
    urls = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sorted(urls) == sorted(
        f"{openapi.ASSETS_PATH}/{n}" for n in ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png")
    )
    assert "url: '/openapi.json'" in html and '"validatorUrl": null' in html
    assert spec.status_code == 200 and spec.json()["openapi"].startswith("3.1")
    for url, r in zip(urls, fetch(app, *urls)):
        f = openapi.ASSETS / url.rsplit("/", 1)[1]
        assert r.status_code == 200 and r.content == f.read_bytes(), url
    js = (openapi.ASSETS / "swagger-ui-bundle.js").read_bytes()
    assert js.count(b"SwaggerUIBundle") >= 1
    assert fetch(app, "/redoc")[0].status_code == 404  # FastAPI's ReDoc page loads from a CDN


def test_the_swagger_assets_ship_in_the_wheel_with_their_license():
    assets = sorted(p.name for p in openapi.ASSETS.iterdir())
    assert {"LICENSE", "NOTICE", "swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"} <= set(assets)
    assert "Apache License" in (openapi.ASSETS / "LICENSE").read_text()
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "posenc.service.front"
    ]
    rel = openapi.ASSETS.relative_to(ROOT / "service" / "front")
    assert all(any(fnmatch.fnmatch(f"{rel}/{name}", g) for g in globs) for name in assets), (assets, globs)
