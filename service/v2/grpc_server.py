"""v2 over gRPC: ``inference.GRPCInferenceService`` (service/v2/proto) on grpcio's asyncio server.

Implemented: ServerLive, ServerReady, ServerMetadata, ModelMetadata, ModelReady, ModelInfer,
ModelStreamInfer and the three SystemSharedMemory methods; every other method of the service
answers UNIMPLEMENTED (grpcio's answer for a method no handler names). Requests are parsed by the
generated classes; inference answers are serialized here: the response without its tensors
through protobuf, then each tensor's bytes appended as a ``raw_output_contents`` field (protobuf
fields may come in any order), so the bytes of a large answer are copied once, not three times.
Errors: service/v2/errors.py (INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED, UNAVAILABLE).
"""

from __future__ import annotations

import logging
from time import perf_counter

import anyio
import grpc
from google.protobuf.message import DecodeError

from posenc.service.v2.admit import Admission, Busy
from posenc.service.v2.core import V2
from posenc.service.v2.errors import BadRequest, describe, grpc_code
from posenc.service.v2.hot import stream_route
from posenc.service.v2.infer import Inference, Input, Output, Tensor
from posenc.service.v2.proto import grpc_service_pb2 as pb
from posenc.service.v2.wire import varint

log = logging.getLogger("posenc.service")

SERVICE = "inference.GRPCInferenceService"
_RAW_OUTPUT = b"\x32"  # ModelInferResponse.raw_output_contents: field 6, length-delimited
STREAM_RESPONSE = b"\x12"  # ModelStreamInferResponse.infer_response: field 2, length-delimited
_ID = b"\x1a"  # ModelInferResponse.id: field 3, length-delimited
# a bound on a ModelInferResponse's bytes besides its outputs' arrays and what the request itself
# names (model, id, outputs): model_version, each output's datatype, shape and tags (answer_bytes)
ANSWER_FRAMING = 4096
_STATUS = {grpc.StatusCode.OK: 200, grpc.StatusCode.UNIMPLEMENTED: 405, grpc.StatusCode.CANCELLED: 499}


def _param(p: pb.InferParameter):
    kind = p.WhichOneof("parameter_choice")
    return None if kind is None else getattr(p, kind)


def _params(m) -> dict:
    return {k: _param(v) for k, v in m.items()} if m else {}


def inference(req: pb.ModelInferRequest) -> Inference:
    """A ModelInferRequest as an Inference (raw contents matched to inputs in order, skipping
    inputs that come from shared memory, as tritonclient sends them)."""
    raws, inputs, k = req.raw_input_contents, [], 0
    for t in req.inputs:
        params, raw, data = _params(t.parameters), None, None
        if raws and "shared_memory_region" not in params:
            raw = raws[k] if k < len(raws) else None
            k += 1
        elif not raws and t.HasField("contents"):
            c = t.contents
            data = list(c.int64_contents) if t.datatype == "INT64" else list(c.int_contents)
        inputs.append(Input(t.name, t.datatype, tuple(t.shape), params, raw, data))
    if raws and k != len(raws):
        raise BadRequest(
            "raw_input_contents",
            f"{len(raws)} entries for {k} inputs (one per input not in shared memory, in order)",
        )
    outputs = [Output(o.name, _params(o.parameters)) for o in req.outputs] or None
    return Inference(req.model_name, req.model_version, req.id, _params(req.parameters), inputs, outputs)


_HEADS: dict = {}  # (model, outputs' names, datatypes, shapes, regions) -> serialized response header


def response_bytes(inf: Inference, tensors: list[Tensor]) -> bytes:
    return b"".join(response_segments(inf, tensors))


def response_segments(inf: Inference, tensors: list[Tensor]) -> list:
    """The serialized ModelInferResponse, in pieces to join: its header (cached: decode steps
    repeat their shapes), the request's id, then each output's bytes (the array itself) as a
    raw_output_contents field."""
    key = (
        inf.model,
        *((t.name, t.datatype, *t.shape, t.region and t.region["shared_memory_region"]) for t in tensors),
    )
    head = _HEADS.get(key)
    if head is None:
        r = pb.ModelInferResponse(model_name=inf.model, model_version="1")
        for t in tensors:
            o = r.outputs.add(name=t.name, datatype=t.datatype, shape=t.shape)
            if t.region is not None:
                o.parameters["shared_memory_region"].string_param = t.region["shared_memory_region"]
                o.parameters["shared_memory_byte_size"].int64_param = t.region["shared_memory_byte_size"]
        head = r.SerializeToString()
        if len(_HEADS) > 4096:
            _HEADS.clear()
        _HEADS[key] = head
    parts = [head]
    if inf.id:
        rid = inf.id.encode()
        parts += (_ID, varint(len(rid)), rid)
    for t in tensors:
        if t.region is not None:
            parts.append(_RAW_OUTPUT + b"\x00")  # keeps raw_output_contents aligned with outputs
        else:
            a = t.array if t.array.flags.c_contiguous else t.array.copy(order="C")
            parts += (_RAW_OUTPUT, varint(a.nbytes), a)
    return parts


def parse(data: bytes) -> pb.ModelInferRequest:
    try:
        return pb.ModelInferRequest.FromString(data)
    except DecodeError as e:
        raise BadRequest("", f"not a ModelInferRequest: {e}") from None


# the service's unary methods (handler() serves them; the gRPC lane, service/grpclane, buffers
# their one request message whole); ModelStreamInfer is its one streamed method
UNARY_METHODS = (
    "ServerLive",
    "ServerReady",
    "ServerMetadata",
    "ModelMetadata",
    "ModelReady",
    "ModelInfer",
    "SystemSharedMemoryStatus",
    "SystemSharedMemoryRegister",
    "SystemSharedMemoryUnregister",
)


class GrpcV2:
    """The service's handlers; ``metrics`` (service/metrics.Metrics or None) times them."""

    def __init__(self, v2: V2, metrics=None):
        self.v2 = v2
        self.metrics = metrics
        self.hot = v2.hot
        s = v2.settings  # how much inference work runs at once (service/v2/admit.py)
        self.admission = Admission(s.grpc_max_concurrent, s.grpc_max_inflight_bytes)
        # set by the gRPC lane (service/grpclane), which looks up every ModelInfer call in the
        # learnt entries before it relays one here: grpcio's handler then does not look it up again
        self.behind_lane = False
        # where C counts the lane's learnt answers (Metrics.native: the counts, the buckets' bounds),
        # as grpc_answer's keyword arguments
        counts, buckets = (None, b"") if metrics is None else metrics.native
        self.native = {"counts": counts, "buckets": buckets}

    def _observe(self, route: str, code, t0: float, nbytes: int = 0, path: str = "python") -> None:
        """``path``: how an OK answer was made (service/metrics/layout.py PATHS)."""
        if self.metrics is not None:  # nbytes: the serialized response's
            if path != "python" and code == grpc.StatusCode.OK:
                self.metrics.observe_path(route, path, perf_counter() - t0, nbytes)
            else:
                self.metrics.observe(route, _STATUS.get(code) or _http(code), perf_counter() - t0, nbytes)

    def _route(self, method: str, model) -> str:
        try:
            m = self.v2.models.get(model)
        except Exception:
            return "grpc"
        return f"grpc {method} {'<table>' if m.is_table else m.name}"

    async def answer_found(self, hit) -> bytes | None:
        """The answer of a learnt entry the gRPC lane found and leaves to Python (``hit``: grpc_answer's
        (entry, positions): an answer over the inline bound, filled in a thread, or outputs into
        shared memory), within the Admission, counted on its route; None: the full path answers it
        (past the Admission's bounds, or a position the entry does not answer)."""
        t0, (e, positions) = perf_counter(), hit
        try:
            with self.admission.call() as reserve:
                reserve(e.size)
                out = e.answer(positions) if e.inline else await anyio.to_thread.run_sync(e.answer, positions)
        except Busy:
            return None
        if out is not None:
            self._observe(e.route, grpc.StatusCode.OK, t0, len(out), "shortcut")
        return out

    def answer_bytes(self, data: bytes) -> int:
        """The bytes ModelInfer's answer to a serialized ModelInferRequest will have, planned as
        ``_answer`` plans it (nothing is built): the outputs' bytes plus a bound on the response's
        framing (its header, the request's id, each output's tag; ``ANSWER_FRAMING`` and the
        request's own size bound them); a request ModelInfer refuses gets an error, small
        (``ANSWER_FRAMING``). The gRPC lane's reservation for a call it relays."""
        try:
            nbytes = self.v2.inferer.plan(inference(parse(data)), None).nbytes
        except Exception:  # refused: its answer is a status, no message
            return ANSWER_FRAMING
        return nbytes + len(data) + ANSWER_FRAMING

    async def _hot(self, data: bytes, route: list, reserve, hit=None) -> bytes | None:
        """The shortcut's answer to a serialized ModelInferRequest (``route[0]`` set), or None
        (service/v2/hot.py); ``reserve``: the call's Admission. ``route``: [metrics route, path].
        ``hit``: what the lane's lookup found ((entry, positions), or False: nothing); None: looked
        up here, but for a call the lane relayed (``behind_lane``: it looked it up already)."""
        if hit is None:
            hit = None if self.behind_lane else self.hot.grpc(data)
        if not hit:
            return None
        e, positions = hit
        route[0] = e.route
        reserve(e.size)
        return e.answer(positions) if e.inline else await anyio.to_thread.run_sync(e.answer, positions)

    async def _answer(self, data: bytes, route: list, reserve) -> bytes:
        """The full path's answer to a serialized ModelInferRequest (``route[0]`` set on the way),
        which the shortcut then learns."""
        req = parse(data)
        route[0] = self._route("ModelInfer", req.model_name)
        inf = inference(req)
        plan, tensors = await self.v2.infer(inf, reserve)
        segments = response_segments(inf, tensors)
        if self.hot.on:
            self.hot.learn_grpc(data, inf, plan, tensors, segments, route[0])
        return b"".join(segments)

    # -- unary methods ----------------------------------------------------------------------------
    async def _unary(self, fn, req, ctx, route: str | list = "grpc"):
        t0, code, nbytes = perf_counter(), grpc.StatusCode.OK, 0
        try:
            out = await fn(req)
            nbytes = out.ByteSize() if hasattr(out, "ByteSize") else len(out)
            return out
        except Exception as e:
            status, msg = describe(e)
            code = getattr(e, "grpc_status", None) or grpc_code(status)  # TooManyRegions: RESOURCE_EXHAUSTED
            await ctx.abort(code, msg)
        finally:
            if isinstance(route, str):
                self._observe(route, code, t0, nbytes)
            else:
                self._observe(route[0], code, t0, nbytes, route[1])

    async def ModelInfer(self, data: bytes, ctx):
        """Raw bytes in and out: the shortcut first, then the full path (within the Admission)."""
        return await self._unary(lambda d: self._infer(d, route), data, ctx, route := ["grpc", "python"])

    async def _infer(self, data: bytes, route: list, hit=None) -> bytes:
        """``route``: [metrics route, path], set on the way (path "shortcut" when the shortcut answered);
        ``hit``: _hot's."""
        with self.admission.call() as reserve:
            out = await self._hot(data, route, reserve, hit)
            if out is not None:
                route[1] = "shortcut"
                return out
            return await self._answer(data, route, reserve)

    async def ServerLive(self, req, ctx):
        return await self._unary(lambda r: _done(pb.ServerLiveResponse(live=True)), req, ctx)

    async def ServerReady(self, req, ctx):
        return await self._unary(lambda r: _done(pb.ServerReadyResponse(ready=self.v2.is_ready())), req, ctx)

    async def ServerMetadata(self, req, ctx):
        return await self._unary(
            lambda r: _done(pb.ServerMetadataResponse(**self.v2.server_metadata())), req, ctx
        )

    async def ModelMetadata(self, req, ctx):
        def meta(r):
            m = self.v2.model_metadata(r.name, r.version)
            return _done(
                pb.ModelMetadataResponse(
                    name=m["name"],
                    versions=m["versions"],
                    platform=m["platform"],
                    inputs=[pb.ModelMetadataResponse.TensorMetadata(**t) for t in m["inputs"]],
                    outputs=[pb.ModelMetadataResponse.TensorMetadata(**t) for t in m["outputs"]],
                )
            )

        return await self._unary(meta, req, ctx)

    async def ModelReady(self, req, ctx):
        return await self._unary(
            lambda r: _done(pb.ModelReadyResponse(ready=self.v2.model_ready(r.name, r.version))), req, ctx
        )

    async def SystemSharedMemoryStatus(self, req, ctx):
        def status(r):
            out = pb.SystemSharedMemoryStatusResponse()
            for e in self.v2.regions.status(r.name or None):
                out.regions[e["name"]].CopyFrom(pb.SystemSharedMemoryStatusResponse.RegionStatus(**e))
            return _done(out)

        return await self._unary(status, req, ctx)

    async def SystemSharedMemoryRegister(self, req, ctx):
        def register(r):
            self.v2.regions.register(r.name, r.key, r.offset, r.byte_size)
            return _done(pb.SystemSharedMemoryRegisterResponse())

        return await self._unary(register, req, ctx)

    async def SystemSharedMemoryUnregister(self, req, ctx):
        def unregister(r):
            self.v2.regions.unregister(r.name or None)
            return _done(pb.SystemSharedMemoryUnregisterResponse())

        return await self._unary(unregister, req, ctx)

    # -- the bidirectional stream ------------------------------------------------------------------
    async def ModelStreamInfer(self, requests, ctx):
        """Each request message gets one response message, in order; a refused request gets
        one with ``error_message`` and the stream goes on (as Triton does)."""
        async for data in requests:
            yield await self.stream_answer(data)

    async def stream_answer(self, data: bytes, hit=None) -> bytes:
        """One ModelStreamInfer request message's response message, counted (``hit``: _hot's)."""
        t0, code, route = perf_counter(), grpc.StatusCode.OK, ["grpc", "python"]
        try:
            body = await self._infer(data, route, hit)
            out = b"".join([STREAM_RESPONSE, varint(len(body)), body])
        except Exception as e:
            status, msg = describe(e)
            code = getattr(e, "grpc_status", None) or grpc_code(status)  # Busy: RESOURCE_EXHAUSTED
            out = pb.ModelStreamInferResponse(
                error_message=msg, infer_response=pb.ModelInferResponse(id=_request_id(data))
            ).SerializeToString()
        self._observe(stream_route(route[0]), code, t0, len(out), route[1])
        return out

    def handler(self) -> grpc.GenericRpcHandler:
        unary = {
            "ServerLive": (pb.ServerLiveRequest, True),
            "ServerReady": (pb.ServerReadyRequest, True),
            "ServerMetadata": (pb.ServerMetadataRequest, True),
            "ModelMetadata": (pb.ModelMetadataRequest, True),
            "ModelReady": (pb.ModelReadyRequest, True),
            "ModelInfer": (None, False),
            "SystemSharedMemoryStatus": (pb.SystemSharedMemoryStatusRequest, True),
            "SystemSharedMemoryRegister": (pb.SystemSharedMemoryRegisterRequest, True),
            "SystemSharedMemoryUnregister": (pb.SystemSharedMemoryUnregisterRequest, True),
        }
        assert set(unary) == set(UNARY_METHODS)
        methods = {
            name: grpc.unary_unary_rpc_method_handler(
                getattr(self, name),
                request_deserializer=cls and cls.FromString,
                response_serializer=_serialize if message else _bytes,
            )
            for name, (cls, message) in unary.items()
        }
        methods["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(
            self.ModelStreamInfer, request_deserializer=None, response_serializer=_bytes
        )
        return grpc.method_handlers_generic_handler(SERVICE, methods)


def _request_id(data: bytes) -> str:
    try:
        return pb.ModelInferRequest.FromString(data).id
    except DecodeError:
        return ""


async def _done(value):
    return value


def _serialize(msg) -> bytes:
    return msg.SerializeToString()


def _bytes(b: bytes) -> bytes:
    return b


def _http(code) -> int:
    from posenc.service.core.errors import GRPC_CODES

    for status, c in GRPC_CODES.items():
        if c == code:
            return status
    return 500
