"""Requests and helpers of the KServe v2 tests (tests/integration/test_kserve_*.py): the named
tables of the v2 test server, v2 requests built from /v1 bodies, and /v1's answers to compare with.
Clients are the real ``tritonclient`` (http and grpc)."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import orjson

from posenc.engine.core import formats
from tests.procs import Procs, wait_for
from tests.service_cases import LLAMA3_8K

SELECTIONS = {
    "rope": ("positions",),
    "sinusoidal": ("positions",),
    "alibi": ("query", "key"),
    "t5-buckets": ("query", "key"),
}

# Named tables (models of their own): layout and the rotary fraction must survive the manifest.
V2_CONFIG = {
    "length": 2048,
    "tables": [
        {
            "name": "gptj-rope",
            "family": "rope",
            "spec": {"head_dim": 64, "partial_rotary_factor": 0.5, "layout": "interleaved"},
            "dtypes": ["bfloat16", "float32"],
        },
        {"name": "llama-3.1-8b", "family": "rope", "spec": LLAMA3_8K},
        {"name": "marian-512", "family": "sinusoidal", "spec": {"d_model": 512, "layout": "concat"}},
        {
            "name": "bloom-alibi",
            "family": "alibi",
            "spec": {"num_heads": 16},
            "dtypes": ["float32", "float16"],
        },
        {"name": "t5-decoder", "family": "t5-buckets", "spec": {"bidirectional": False}},
    ],
}
TABLES = {t["name"]: t for t in V2_CONFIG["tables"]}


# A gRPC readiness check opens this many new connections: serve's gRPC processes share the port
# (SO_REUSEPORT), each says ready only once its own tables are attached, and the kernel hands a new
# connection to one of them by a hash of its ports. One ready answer says one process is ready; 32 in
# a row, each on its own connection, leave a process still attaching unseen with odds 2^-32 (two
# processes), where the tests after a fixture open connections of their own.
FRESH_CONNECTIONS = 32


def grpc_ready_everywhere(target: str, credentials=None, metadata=()) -> bool:
    """ServerReady says ready on FRESH_CONNECTIONS new connections to ``target``, each its own (a
    local subchannel pool: grpcio otherwise shares one connection among channels to one target)."""
    import grpc

    from posenc.service.v2.proto import grpc_service_pb2 as pb

    options = [("grpc.use_local_subchannel_pool", 1)]
    for _ in range(FRESH_CONNECTIONS):
        if credentials is None:
            ch = grpc.insecure_channel(target, options=options)
        else:
            ch = grpc.secure_channel(target, credentials, options=options)
        with ch:
            ready = ch.unary_unary(
                "/inference.GRPCInferenceService/ServerReady",
                request_serializer=pb.ServerReadyRequest.SerializeToString,
                response_deserializer=pb.ServerReadyResponse.FromString,
            )
            try:
                if not ready(pb.ServerReadyRequest(), metadata=tuple(metadata), timeout=10).ready:
                    return False
            except grpc.RpcError:
                return False
    return True


def wait_grpc_ready(server, timeout: float = 60.0, credentials=None, metadata=()) -> None:
    """Wait until every gRPC process of ``server`` says ready (grpc_ready_everywhere)."""

    def check():
        if not server.alive():
            raise AssertionError(f"posenc serve exited\n{server.output()}")

    wait_for(
        lambda: grpc_ready_everywhere(server.grpc_url, credentials, metadata),
        timeout,
        0.1,
        f"gRPC ServerReady on {FRESH_CONNECTIONS} new connections in a row",
        check,
    )


@contextlib.contextmanager
def serving_grpc(tmp_path_factory, name: str, config, **kw):
    """A ``posenc serve`` with its gRPC server (``Procs.serve`` arguments), gRPC-ready; stopped
    cleanly after, its files removed (a module fixture's body)."""
    reg = Procs(tmp_path_factory.mktemp(name))
    s = reg.serve(config, grpc=True, **kw)
    try:
        wait_grpc_ready(s)
        yield s
    finally:
        assert s.stop() == 0, s.output()
        reg.cleanup()


@contextlib.contextmanager
def clients_of(server):
    """{"rest", "grpc": tritonclient clients, "http": an httpx client for /v1} of a v2 server."""
    import httpx
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    rest = httpclient.InferenceServerClient(server.url[len("http://") :])
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            yield {"rest": rest, "grpc": grpc, "http": http}
    finally:
        rest.close()
        grpc.close()


def selection_array(value) -> np.ndarray:
    if isinstance(value, dict):
        return np.arange(value["start"], value["stop"], value.get("step", 1), dtype=np.int64)
    return np.asarray(value, dtype=np.int64)


def split(family: str, body: dict) -> tuple[dict, dict]:
    """(spec fields incl. dtype, {selection name: int64 array}) of a /v1 body."""
    sel = SELECTIONS[family]
    return ({k: v for k, v in body.items() if k not in sel}, {k: selection_array(body[k]) for k in sel})


def v2_inputs(module, arrays: dict, datatype: str = "INT64") -> list:
    """tritonclient InferInputs (``module`` is tritonclient.http or tritonclient.grpc)."""
    out = []
    for name, a in arrays.items():
        a = a.astype(np.int32 if datatype == "INT32" else np.int64)
        i = module.InferInput(name, list(a.shape), datatype)
        i.set_data_from_numpy(a)
        out.append(i)
    return out


def infer(
    module,
    client,
    model: str,
    arrays: dict,
    spec: dict | None = None,
    datatype: str = "INT64",
    dtype: str | None = None,
):
    params = {}
    if spec is not None:
        params["spec"] = json.dumps(spec)
    if dtype is not None:
        params["dtype"] = dtype
    return client.infer(model, v2_inputs(module, arrays, datatype), parameters=params or None)


def v1_answer(http, family: str, body: dict) -> dict:
    """/v1's binary answer: {name: array} (bfloat16 as uint16 bits; attention_scaling 0-d)."""
    r = http.post(
        f"/v1/{family}", content=orjson.dumps(body), headers={"accept": "application/x-safetensors"}
    )
    assert r.status_code == 200, r.text
    return formats.read_safetensors(r.content)[0]


def bits(a: np.ndarray) -> np.ndarray:
    """An output's bits, comparable across clients: bfloat16 (ml_dtypes) as uint16."""
    a = np.asarray(a)
    return a.view(np.uint16) if a.dtype.name == "bfloat16" else a


def assert_same(v2_result, v1: dict, batch: int | None = None, row: int | None = None) -> None:
    """Every /v1 array equals the v2 output of the same name, bit for bit (``row`` of a batch)."""
    for name, ref in v1.items():
        got = bits(v2_result.as_numpy(name))
        if ref.ndim == 0:
            ref = ref.reshape(1)
        if row is not None and got.ndim == ref.ndim + 1:
            got = got[row]
        assert got.dtype == ref.dtype and got.shape == ref.shape, (
            name,
            got.dtype,
            got.shape,
            ref.dtype,
            ref.shape,
        )
        assert np.array_equal(got.view(np.uint8), np.ascontiguousarray(ref).view(np.uint8)), name
