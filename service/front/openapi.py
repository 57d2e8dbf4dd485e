"""The OpenAPI document and /docs, generated from the registry (engine.tables.FAMILIES) and the
errors (engine.errors), so that a family or an error is described where it is defined.

- components.schemas: per family ``{Name}Request`` (its request schema, with the shared pieces
  ``Selection`` and ``Dtype`` referenced) and ``{Name}Response`` (its JSON answer);
  ``ValidationError`` (the 422 body) and ``Error`` (every other refusal's body).
- each ``POST /v1/{family}``: the request body by reference with the family's examples; 200 with
  the JSON schema and the binary media types; 406, 413, 422 and 503 with their bodies' schemas.
- with a bearer token set (service/front/auth.py): an http bearer security scheme and a 401 on every
  guarded path, so Swagger UI's "Authorize" sends the token.
- /docs: Swagger UI from files shipped in this package (service/front/static/swagger-ui: swagger-ui-dist
  5.35.0 from npm, with its LICENSE and NOTICE), so an air-gapped cluster gets a working page;
  the page names no URL outside this server.
"""

from __future__ import annotations

import copy
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from starlette.staticfiles import StaticFiles

from posenc.engine.errors import EngineUnavailable, NotAcceptable, PosencError, SpecError, TooLarge, Unauthorized
from posenc.engine.encode import CONTENT_TYPES
from posenc.engine.pipeline import body_schema
from posenc.engine.settings import Settings
from posenc.engine.tables import FAMILIES
from posenc.engine.tables.base import SHARED_SCHEMAS

from posenc.service.front import auth as guard

DOCS_PATH = "/docs"
ASSETS_PATH = DOCS_PATH + "/assets"
ASSETS = Path(__file__).resolve().parent / "static" / "swagger-ui"
REF = "#/components/schemas/"
SECURITY = "bearer"


def component_name(family: str) -> str:
    """'t5-buckets' -> 'T5Buckets' (OpenAPI component names allow no '-' in generated clients)."""
    return "".join(part[:1].upper() + part[1:] for part in family.replace("_", "-").split("-"))


def _ref(name: str) -> dict:
    return {"$ref": REF + name}


def _with_refs(schema):
    """A copy of a request schema with the shared pieces (by identity) replaced by references."""
    for name, part in SHARED_SCHEMAS.items():
        if schema is part:
            return _ref(name)
    if isinstance(schema, dict):
        return {k: _with_refs(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_with_refs(v) for v in schema]
    return copy.deepcopy(schema)


def components() -> dict:
    out = {name: copy.deepcopy(part) for name, part in SHARED_SCHEMAS.items()}
    for fam in FAMILIES.values():
        out[component_name(fam.name) + "Request"] = _with_refs(body_schema(fam)[0])   # spec, hf_config or table
        out[component_name(fam.name) + "Response"] = copy.deepcopy(fam.response_schema)
    out["ValidationError"] = copy.deepcopy(SpecError.schema)
    out["Error"] = copy.deepcopy(PosencError.schema)
    return out


def _refusal(exc: type[PosencError], description: str) -> tuple[str, dict]:
    name = "ValidationError" if exc.schema is SpecError.schema else "Error"
    return str(exc.status), {"description": description,
                             "content": {"application/json": {"schema": _ref(name)}}}


# The refusals of a family route, each with its error class (its status and body schema).
_REFUSALS = dict([
    _refusal(NotAcceptable, "no format the Accept header allows"),
    _refusal(TooLarge, "response, selection or body over its limit"),
    _refusal(SpecError, "invalid spec or selection; detail[].loc names the field"),
    _refusal(EngineUnavailable, "the engine is not reachable for an on-demand build"),
])


def family_responses(fam) -> dict:
    """The responses of ``POST /v1/{family}`` (FastAPI's ``responses=``)."""
    binary = {CONTENT_TYPES[f]: {"schema": {"type": "string", "format": "binary"}}
              for f in CONTENT_TYPES if f != "json"}
    ok = {"description": fam.returns, "content": {
        CONTENT_TYPES["json"]: {"schema": _ref(component_name(fam.name) + "Response")}, **binary}}
    return {"200": ok, **_REFUSALS}


def family_request(fam) -> dict:
    """The request body of ``POST /v1/{family}`` (FastAPI's ``openapi_extra=``)."""
    return {"requestBody": {"required": True, "content": {CONTENT_TYPES["json"]: {
        "schema": _ref(component_name(fam.name) + "Request"), "examples": body_schema(fam)[1]}}}}


def document(app: FastAPI, settings: Settings) -> dict:
    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    doc.setdefault("components", {}).setdefault("schemas", {}).update(components())
    if settings.auth_token:
        doc["components"]["securitySchemes"] = {SECURITY: {"type": "http", "scheme": "bearer"}}
        for path, ops in doc["paths"].items():
            if guard.guarded(path):
                for op in ops.values():
                    op["security"] = [{SECURITY: []}]
                    op.setdefault("responses", {})["401"] = _refusal(Unauthorized, "no or a wrong bearer token")[1]
    return doc


def install(app: FastAPI, settings: Settings) -> None:
    """The typed document at app.openapi_url and Swagger UI at /docs, with its bundled assets.
    The app must be created with ``docs_url=None`` (FastAPI's page loads its assets from a CDN)."""
    def openapi() -> dict:
        if app.openapi_schema is None:
            app.openapi_schema = document(app, settings)
        return app.openapi_schema
    app.openapi = openapi
    app.mount(ASSETS_PATH, StaticFiles(directory=ASSETS), name="swagger-ui")

    @app.get(DOCS_PATH, include_in_schema=False)
    async def docs(request: Request):
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=root + app.openapi_url, title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_PATH}/favicon-32x32.png",
            # no call to swagger.io's validator: the page talks to this server only
            swagger_ui_parameters={"validatorUrl": None})
