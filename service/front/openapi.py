"""The OpenAPI document and /docs, generated from the registry (engine.tables.FAMILIES) and the
errors (engine/core/errors.py, service/core/errors.py), so that a family or an error is described
where it is defined.

- components.schemas: per family ``{Name}Request`` (its request schema, with the shared pieces
  ``Selection`` and ``Dtype`` referenced) and ``{Name}Response`` (its JSON answer);
  ``ValidationError`` (the 422 body) and ``Error`` (every other refusal's body).
- each ``POST /v1/{family}``: the request body by reference with the family's examples; 200 with
  the JSON schema and the binary media types; 406, 413, 422 and 503 with their bodies' schemas.
- an explicit ``null`` for a field with a default is that default (the parsers read it so): each
  such field's schema allows null (``nullable_defaults``). Integer fields: JSON Schema's
  ``integer`` also matches ``1.0`` (a number with no fraction), which the parsers refuse; the
  document says so in each integer's description (no schema keyword can tell ``1.0`` from ``1``).
- the KServe v2 REST routes (service/v2/rest.py, raw ASGI past FastAPI's routing): ``v2_paths``.
- with a bearer token set (service/core/auth.py): an http bearer security scheme and a 401 on every
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

from posenc.engine.answer.pipeline import body_schema
from posenc.engine.core.encode import CONTENT_TYPES
from posenc.engine.core.errors import EngineUnavailable, PosencError, SpecError, TooLarge
from posenc.engine.tables import FAMILIES
from posenc.engine.tables.base import SHARED_SCHEMAS
from posenc.service.core import auth as guard
from posenc.service.core.errors import NotAcceptable, Unauthorized
from posenc.service.core.settings import Settings

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


INTEGER_NOTE = "written without a fraction or exponent (1, not 1.0)"


def nullable_defaults(schema):
    """A copy of a request schema where a property with a default also allows ``null`` (which
    the parser reads as the default), and every integer says it is written as one."""
    if isinstance(schema, list):
        return [nullable_defaults(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: nullable_defaults(v) for k, v in schema.items()}
    if out.get("type") == "integer" or (isinstance(out.get("type"), list) and "integer" in out["type"]):
        out["description"] = (out["description"] + "; " if "description" in out else "") + INTEGER_NOTE
    props = out.get("properties")
    if isinstance(props, dict):
        for name, p in props.items():
            if isinstance(p, dict) and "default" in p:
                props[name] = _nullable(p)
    return out


def _nullable(p: dict) -> dict:
    if "$ref" in p:
        return {"anyOf": [p, {"type": "null"}], "default": p.get("default")}
    p = dict(p)
    t = p.get("type")
    if t is not None and not (isinstance(t, list) and "null" in t):
        p["type"] = [*(t if isinstance(t, list) else [t]), "null"]
    if "enum" in p and None not in p["enum"]:
        p["enum"] = [*p["enum"], None]
    return p


def components() -> dict:
    out = {}
    for name, part in SHARED_SCHEMAS.items():  # Dtype has a default: null is it, as for any field
        part = nullable_defaults(copy.deepcopy(part))
        out[name] = _nullable(part) if "default" in part else part
    for fam in FAMILIES.values():
        out[component_name(fam.name) + "Request"] = nullable_defaults(_with_refs(body_schema(fam)[0]))
        out[component_name(fam.name) + "Response"] = copy.deepcopy(fam.response_schema)
    out["ValidationError"] = copy.deepcopy(SpecError.schema)
    out["Error"] = copy.deepcopy(PosencError.schema)
    return out


def _refusal(exc: type[PosencError], description: str) -> tuple[str, dict]:
    name = "ValidationError" if exc.schema is SpecError.schema else "Error"
    return str(exc.status), {
        "description": description,
        "content": {"application/json": {"schema": _ref(name)}},
    }


# The refusals of a family route, each with its error class (its status and body schema).
_REFUSALS = dict(
    [
        _refusal(NotAcceptable, "no format the Accept header allows"),
        _refusal(TooLarge, "response, selection or body over its limit"),
        _refusal(SpecError, "invalid spec or selection; detail[].loc names the field"),
        _refusal(EngineUnavailable, "the engine is not reachable for an on-demand build"),
    ]
)


def family_responses(fam) -> dict:
    """The responses of ``POST /v1/{family}`` (FastAPI's ``responses=``)."""
    binary = {
        CONTENT_TYPES[f]: {"schema": {"type": "string", "format": "binary"}}
        for f in CONTENT_TYPES
        if f != "json"
    }
    ok = {
        "description": fam.returns,
        "content": {CONTENT_TYPES["json"]: {"schema": _ref(component_name(fam.name) + "Response")}, **binary},
    }
    return {"200": ok, **_REFUSALS}


def family_request(fam) -> dict:
    """The request body of ``POST /v1/{family}`` (FastAPI's ``openapi_extra=``)."""
    return {
        "requestBody": {
            "required": True,
            "content": {
                CONTENT_TYPES["json"]: {
                    "schema": _ref(component_name(fam.name) + "Request"),
                    "examples": body_schema(fam)[1],
                }
            },
        }
    }


_V2_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}
_V2_TENSOR = {
    "type": "object",
    "required": ["name", "shape", "datatype"],
    "properties": {
        "name": {"type": "string"},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "datatype": {"type": "string"},
        "parameters": {"type": "object"},
        "data": {"type": "array", "description": "the tensor's values, row-major (absent when binary)"},
    },
}
_V2_SCHEMAS = {
    "V2Error": _V2_ERROR,
    "V2InferenceRequest": {
        "type": "object",
        "required": ["inputs"],
        "properties": {
            "id": {"type": "string"},
            "parameters": {
                "type": "object",
                "description": "spec (a JSON string) for a family model; dtype; binary_data_output",
            },
            "inputs": {"type": "array", "items": _V2_TENSOR},
            "outputs": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}, "parameters": {"type": "object"}},
                },
            },
        },
    },
    "V2InferenceResponse": {
        "type": "object",
        "properties": {
            "model_name": {"type": "string"},
            "model_version": {"type": "string"},
            "id": {"type": "string"},
            "outputs": {"type": "array", "items": _V2_TENSOR},
        },
    },
    "V2RegisterRequest": {
        "type": "object",
        "additionalProperties": False,
        "required": ["key", "byte_size"],
        "properties": {
            "key": {"type": "string"},
            "offset": {"type": "integer", "minimum": 0},
            "byte_size": {"type": "integer", "minimum": 1},
        },
    },
}


def _v2_op(summary: str, ok: str, params=(), body: str | None = None, ok_schema: dict | None = None) -> dict:
    err = {
        "description": "refused; error names the field",
        "content": {"application/json": {"schema": _ref("V2Error")}},
    }
    op = {
        "summary": summary,
        "tags": ["KServe v2"],
        "responses": {
            "200": {
                "description": ok,
                "content": {"application/json": {"schema": ok_schema or {"type": "object"}}},
            },
            **{code: err for code in ("400", "404", "405", "413", "503")},
        },
        "parameters": [
            {"name": n, "in": "path", "required": True, "schema": {"type": "string"}} for n in params
        ],
    }
    if body == "infer":
        op["requestBody"] = {
            "required": True,
            "content": {
                "application/json": {"schema": _ref("V2InferenceRequest")},
                "application/octet-stream": {
                    "schema": {
                        "type": "string",
                        "format": "binary",
                        "description": "binary tensor data: the JSON header (Inference-Header-Content-Length "
                        "bytes), then the tensors' bytes",
                    }
                },
            },
        }
        op["responses"]["200"]["content"]["application/octet-stream"] = {
            "schema": {"type": "string", "format": "binary"}
        }
    elif body:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(body)}}}
    return op


def v2_paths() -> dict:
    """The KServe v2 REST routes (service/v2/rest.py; Open Inference Protocol)."""
    model, version = ("model",), ("model", "version")
    paths = {
        "/v2": {"get": _v2_op("Server metadata", "name, version, extensions")},
        "/v2/health/live": {"get": _v2_op("Server live", "{live: true}")},
        "/v2/health/ready": {"get": _v2_op("Server ready (503 until the tables are attached)", "{ready}")},
        "/v2/systemsharedmemory/status": {"get": _v2_op("Registered regions", "their status")},
        "/v2/systemsharedmemory/unregister": {"post": _v2_op("Unregister every region", "{}")},
    }
    for base, params in (("/v2/models/{model}", model), ("/v2/models/{model}/versions/{version}", version)):
        paths[base] = {"get": _v2_op("Model metadata", "name, versions, platform, inputs, outputs", params)}
        paths[base + "/ready"] = {"get": _v2_op("Model ready", "{name, ready}", params)}
        paths[base + "/infer"] = {
            "post": _v2_op("Inference", "the outputs", params, "infer", _ref("V2InferenceResponse"))
        }
    region = "/v2/systemsharedmemory/region/{region}"
    paths[region + "/status"] = {"get": _v2_op("A region's status", "its status", ("region",))}
    paths[region + "/register"] = {
        "post": _v2_op("Register a region", "{}", ("region",), "V2RegisterRequest")
    }
    paths[region + "/unregister"] = {"post": _v2_op("Unregister a region", "{}", ("region",))}
    return paths


def document(app: FastAPI, settings: Settings) -> dict:
    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    doc.setdefault("components", {}).setdefault("schemas", {}).update(components())
    doc["components"]["schemas"].update(copy.deepcopy(_V2_SCHEMAS))
    doc.setdefault("paths", {}).update(v2_paths())
    if settings.auth_token:
        doc["components"]["securitySchemes"] = {SECURITY: {"type": "http", "scheme": "bearer"}}
        for path, ops in doc["paths"].items():
            if guard.guarded(path):
                for op in ops.values():
                    op["security"] = [{SECURITY: []}]
                    op.setdefault("responses", {})["401"] = _refusal(
                        Unauthorized, "no or a wrong bearer token"
                    )[1]
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
            openapi_url=root + app.openapi_url,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_PATH}/favicon-32x32.png",
            # no call to swagger.io's validator: the page talks to this server only
            swagger_ui_parameters={"validatorUrl": None},
        )
