"""v2 over HTTP: every ``/v2`` path, answered as raw ASGI (service/front/front.py's front hands them
here, past FastAPI, whose routing would cost more than a small inference).

    GET  /v2/health/live | /v2/health/ready | /v2
    GET  /v2/models/{m}[/versions/{v}] | .../ready          POST .../infer
    GET  /v2/systemsharedmemory/status | /region/{r}/status
    POST /v2/systemsharedmemory/region/{r}/register | /region/{r}/unregister | /unregister

Inference requests and answers use the binary tensor data extension: a JSON header of
``Inference-Header-Content-Length`` bytes, then the tensors' bytes in order. An output is binary
when its ``binary_data`` parameter (or the request's ``binary_data_output``) says so; BF16 only
travels binary. Errors are ``{"error": "<field path>: <message>"}`` (service/v2/errors.py).
"""

from __future__ import annotations

import zlib
from urllib.parse import unquote

import anyio
import numpy as np
import orjson

from posenc.service.core import sizing
from posenc.service.core.body import read_body
from posenc.service.core.errors import BodyTooLarge
from posenc.service.core.settings import INLINE_JSON_BYTES
from posenc.service.v2.core import V2
from posenc.service.v2.errors import BadRequest, ModelNotFound, describe, rest_body
from posenc.service.v2.infer import LENGTH_HEADER, Inference, Input, Output, Tensor

JSON = b"application/json"
OCTET = b"application/octet-stream"
_REQUEST_KEYS = ("id", "parameters", "inputs", "outputs")


class Reply(Exception):
    """A finished answer (status, body, content type, extra headers), raised from deep inside."""

    def __init__(self, status: int, body: bytes, ctype: bytes = JSON, headers: tuple = ()):
        self.status, self.body, self.ctype, self.headers = status, body, ctype, headers


async def handle(v2: V2, scope, receive, send, statuses: list) -> str:
    """Answer one ``/v2`` request; returns its metrics route (``/v2/models/{family}/infer``,
    ``/v2/models/<table>/infer`` or ``/v2``)."""
    route = ["/v2"]
    try:
        reply = await _route(v2, scope, receive, route)
    except ConnectionAbortedError:
        statuses.append(499)
        return route[0]
    except Reply as r:
        reply = r
    except Exception as e:
        status, msg = describe(e)
        reply = Reply(status, rest_body(msg))
    statuses.append(reply.status)
    body = reply.body
    whole = type(body) is bytes
    await send(
        {
            "type": "http.response.start",
            "status": reply.status,
            "headers": [
                (b"content-type", reply.ctype),
                (b"content-length", b"%d" % (len(body) if whole else body.nbytes)),
                *reply.headers,
            ],
        }
    )
    if whole:
        await send({"type": "http.response.body", "body": body})
    else:  # a long JSON text's blocks (service/core/sizing.py), one message each
        last = len(body) - 1
        for i, block in enumerate(body):
            await send({"type": "http.response.body", "body": block, "more_body": i < last})
    return route[0]


def _json(obj, status: int = 200) -> Reply:
    return Reply(status, orjson.dumps(obj))


async def _route(v2: V2, scope, receive, route: list) -> Reply:
    """The answer to a /v2 request; ``route[0]`` is set to its metrics route as soon as known."""
    parts = [unquote(p) for p in scope["path"].split("/")[2:]]
    method = scope["method"]
    if parts and parts[-1] == "":
        parts.pop()
    get, post = method in ("GET", "HEAD"), method == "POST"
    if not parts and get:
        return _json(v2.server_metadata())
    if parts[:1] == ["health"] and len(parts) == 2 and get and parts[1] in ("live", "ready"):
        ok = parts[1] == "live" or v2.is_ready()
        return _json({parts[1]: ok}, 200 if ok else 503)
    if parts[:1] == ["models"] and len(parts) >= 2:
        name, rest, version = parts[1], parts[2:], ""
        if rest[:1] == ["versions"] and len(rest) >= 2:
            version, rest = rest[1], rest[2:]
        if rest == [] and get:
            return _json(v2.model_metadata(name, version))
        if rest == ["ready"] and get:
            ok = v2.model_ready(name, version)
            return _json({"name": name, "ready": ok}, 200 if ok else 503)
        if rest == ["infer"] and post:
            model = v2.models.get(name, version)
            route[0] = f"/v2/models/{'<table>' if model.is_table else name}/infer"
            return await _infer(v2, scope, receive, name, version, route[0])
    if parts[:1] == ["systemsharedmemory"]:
        return await _shm(v2, parts[1:], get, post, receive)
    known = parts[:1] in (["health"], ["models"], ["systemsharedmemory"]) or not parts
    raise Reply(
        405 if known else 404, rest_body(f"{method} {scope['path']}: not served (see docs/kserve.md)")
    )


async def _shm(v2: V2, parts: list, get: bool, post: bool, receive) -> Reply:
    regions = v2.regions
    if parts == ["status"] and get:
        return _json(regions.status())
    if parts == ["unregister"] and post:
        regions.unregister(None)
        return _json({})
    if len(parts) == 3 and parts[0] == "region":
        name, op = parts[1], parts[2]
        if op == "status" and get:
            return _json(regions.status(name))
        if op == "unregister" and post:
            regions.unregister(name)
            return _json({})
        if op == "register" and post:
            body = _object(await read_body(receive, 1 << 16), "the register request")
            for k in body:
                if k not in ("key", "offset", "byte_size"):
                    raise BadRequest(k, "unknown field; a register request has key, offset, byte_size")
            regions.register(name, body.get("key"), body.get("offset", 0), body.get("byte_size"))
            return _json({})
    raise Reply(405, rest_body("not a system shared memory operation (status, register, unregister)"))


def _object(raw: bytes, what: str) -> dict:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise BadRequest("", f"{what} is not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise BadRequest("", f"{what} must be a JSON object")
    return obj


def _header(scope, name: bytes) -> bytes | None:
    for k, v in scope["headers"]:
        if k == name:
            return v
    return None


async def _infer(v2: V2, scope, receive, name: str, version: str, route: str) -> Reply:
    limit = v2.settings.max_body_bytes
    raw = await read_body(receive, limit)
    encoding = _header(scope, b"content-encoding")
    body = _decoded(raw, encoding, limit)
    hl = _header(scope, LENGTH_HEADER)
    if hl is None:
        n = len(body)
    else:
        try:
            n = int(hl)
        except ValueError:
            n = -1
        if not 0 <= n <= len(body):
            raise BadRequest(
                "Inference-Header-Content-Length",
                f"must be an integer in [0, {len(body)}], the body's length; got {hl.decode('latin-1')!r}",
            )
    inf = inference(name, version, _object(body[:n], "the inference header"), memoryview(body)[n:])
    default, binary = _binary_choices(inf)
    plan, tensors = await v2.infer(inf, as_json=lambda i: not binary.get(i, default))
    binary = [binary.get(i, default) for i in range(len(tensors))]
    for i, t in enumerate(tensors):
        if t.datatype == "BF16" and not binary[i] and t.region is None:
            raise BadRequest(
                f"outputs[{i}].parameters.binary_data", "BF16 travels only as binary data: set it true"
            )
    # a long JSON text: built in a thread (over 1 MiB: in pieces, sent in blocks)
    if plan.text > INLINE_JSON_BYTES:
        reply, segments = await anyio.to_thread.run_sync(
            _answer, name, inf.id, tensors, binary, plan.text > sizing.BLOCK_BYTES
        )
    else:
        reply, segments = _answer(name, inf.id, tensors, binary)
    if type(reply.body) is not bytes:  # a long text in blocks: too large for the shortcut's templates
        return reply
    if v2.hot.on and hl is not None and encoding is None and reply.ctype == OCTET:
        v2.hot.learn_rest(scope["path"], body[:n], inf, plan, tensors, segments, route, reply.headers)
    elif (
        v2.hot.on and hl is None and encoding is None and reply.ctype == JSON
    ):  # JSON tensors (v2/hot_json.py)
        v2.hot.learn_json(
            scope["path"],
            body,
            inf,
            plan,
            tensors,
            route,
            reply.headers,
            lambda ts: _answer(name, inf.id, ts, binary)[0].body,
            reply.body,
        )
    return reply


def _decoded(body: bytes, encoding: bytes | None, limit: int) -> bytes:
    """The body, decompressed (Content-Encoding gzip or deflate, as tritonclient sends them),
    never to more than the body limit."""
    if encoding is None or encoding in (b"identity", b""):
        return body
    wbits = {b"gzip": 31, b"deflate": 15}.get(encoding.lower())
    if wbits is None:
        raise BadRequest("Content-Encoding", f"unsupported: {encoding.decode('latin-1')!r} (gzip, deflate)")
    d = zlib.decompressobj(wbits)
    try:
        out = d.decompress(body, limit + 1)
    except zlib.error as e:
        raise BadRequest("Content-Encoding", f"the body is not valid {encoding.decode()}: {e}") from None
    if len(out) > limit:
        raise BodyTooLarge(limit)
    return out


def inference(name: str, version: str, head: dict, binary: memoryview) -> Inference:
    """A v2 REST inference header (and the binary data after it) as an Inference."""
    for k in head:
        if k not in _REQUEST_KEYS:
            raise BadRequest(k, f"unknown field; an inference request has {', '.join(_REQUEST_KEYS)}")
    params = head.get("parameters") or {}
    if not isinstance(params, dict):
        raise BadRequest("parameters", "must be an object")
    inputs, at = [], 0
    raw_inputs = head.get("inputs")
    if not isinstance(raw_inputs, list):  # may be empty: sinusoidal-grid's positions are optional
        raise BadRequest("inputs", "must be a list")
    for i, t in enumerate(raw_inputs):
        t = _fields(t, f"inputs[{i}]", ("name", "shape", "datatype", "parameters", "data"))
        p = _params(t, f"inputs[{i}]")
        raw = None
        size = p.get("binary_data_size")
        if size is not None:
            if type(size) is not int or size < 0 or at + size > len(binary):
                raise BadRequest(
                    f"inputs[{i}].parameters.binary_data_size",
                    f"{size!r} bytes, but {len(binary) - at} bytes of binary data are left",
                )
            raw, at = binary[at : at + size], at + size
        inputs.append(Input(t.get("name"), t.get("datatype"), t.get("shape"), p, raw, t.get("data")))
    if at != len(binary):
        raise BadRequest(
            "Inference-Header-Content-Length",
            f"{len(binary) - at} bytes of binary data after the inputs' binary_data_size",
        )
    outputs = head.get("outputs")
    if outputs is not None:
        if not isinstance(outputs, list):
            raise BadRequest("outputs", "must be a list")
        # each entry checked at its own index, before it is read (a generator inside enumerate()
        # read the enclosing function's `i`, the last input's, and with no inputs none at all: a 500)
        checked = []
        for j, o in enumerate(outputs):
            o = _fields(o, f"outputs[{j}]", ("name", "parameters"))
            checked.append(Output(o.get("name"), _params(o, f"outputs[{j}]")))
        outputs = checked
    rid = head.get("id", "")
    if not isinstance(rid, str):
        raise BadRequest("id", "must be a string")
    return Inference(name, version, rid, params, inputs, outputs)


def _fields(obj, path: str, allowed: tuple) -> dict:
    if not isinstance(obj, dict):
        raise BadRequest(path, "must be an object")
    for k in obj:
        if k not in allowed:
            raise BadRequest(f"{path}.{k}", f"unknown field; allowed: {', '.join(allowed)}")
    return obj


def _params(obj: dict, path: str) -> dict:
    p = obj.get("parameters") or {}
    if not isinstance(p, dict):
        raise BadRequest(f"{path}.parameters", "must be an object")
    return p


def _binary_choices(inf: Inference) -> tuple[bool, dict]:
    """(the request's binary_data_output, {output index: its own binary_data}): an output is
    binary if its own parameter says so, else as the request says (default: JSON)."""
    default = inf.params.get("binary_data_output", False)
    if not isinstance(default, bool):
        raise BadRequest("parameters.binary_data_output", "must be true or false")
    out = {}
    for i, o in enumerate(inf.outputs or ()):
        b = o.params.get("binary_data", default)
        if not isinstance(b, bool):
            raise BadRequest(f"outputs[{i}].parameters.binary_data", "must be true or false")
        out[i] = b
    return default, out


_DATA_MARK = "posenc:data:%d"  # stands for a JSON output's data while its text is written in pieces
_HEADS: dict = {}  # the JSON header of an all-binary answer, per (model, id, outputs' layout)


def _answer(
    name: str, rid: str, tensors: list[Tensor], binary: list, pieces: bool = False
) -> tuple[Reply, list]:
    """The answer: its JSON header (built once per layout when every output is binary or in
    shared memory: decode steps repeat their shapes), then the binary outputs' bytes; and those
    pieces (the JSON header, then each binary output's array). ``pieces``: the JSON outputs'
    data written in bounded orjson calls (service/core/sizing.py), the same bytes."""
    cacheable = all(b or t.region is not None for t, b in zip(tensors, binary))
    key = (
        (
            name,
            rid,
            *((t.name, t.datatype, *t.shape, t.region and t.region["shared_memory_region"]) for t in tensors),
        )
        if cacheable
        else None
    )
    js = _HEADS.get(key) if cacheable else None
    bufs = [
        t.array if t.array.flags.c_contiguous else np.ascontiguousarray(t.array)
        for t, b in zip(tensors, binary)
        if b and t.region is None
    ]
    if js is None:
        outs, k = [], 0
        for i, t in enumerate(tensors):
            o = {"name": t.name, "datatype": t.datatype, "shape": t.shape}
            if t.region is not None:
                o["parameters"] = t.region
            elif binary[i]:
                o["parameters"] = {"binary_data_size": bufs[k].nbytes}
                k += 1
            else:
                o["data"] = _DATA_MARK % i if pieces else t.array.reshape(-1)
            outs.append(o)
        head = {"model_name": name, "model_version": "1", "outputs": outs}
        if rid:
            head["id"] = rid
        js = orjson.dumps(head, option=orjson.OPT_SERIALIZE_NUMPY)
        if pieces:  # each mark's first occurrence is its output's data (the id comes after the outputs)
            out, rest = [], js
            for i, t in enumerate(tensors):
                if t.region is None and not binary[i]:
                    head, _, rest = rest.partition(b'"%s"' % (_DATA_MARK % i).encode())
                    out.append(head)
                    sizing.array_pieces(np.ascontiguousarray(t.array).reshape(-1), sizing.CHUNK_CELLS, out)
            out.append(rest)
            js = sizing.as_blocks(out)  # (never one copy of the whole text: service/core/sizing.py)
        if cacheable and len(rid) < 64:
            if len(_HEADS) > 4096:
                _HEADS.clear()
            _HEADS[key] = js
    if not bufs:
        return Reply(200, js), [js]
    if type(js) is not bytes:  # blocks of a JSON text, then the binary outputs
        return Reply(
            200, sizing.Blocks([*js, b"".join(bufs)]), OCTET, ((LENGTH_HEADER, b"%d" % js.nbytes),)
        ), [js, *bufs]
    segments = [js, *bufs]
    return Reply(200, b"".join(segments), OCTET, ((LENGTH_HEADER, b"%d" % len(js)),)), segments


__all__ = ["handle", "inference", "ModelNotFound"]
