"""Every v2 error status through the real clients: REST 400/404/405/413 with ``{"error": "<field
path>: <message>"}``, gRPC INVALID_ARGUMENT/NOT_FOUND/RESOURCE_EXHAUSTED/UNIMPLEMENTED with the
same message; health, metadata and readiness on both; /metrics counts both."""

from __future__ import annotations

import grpc
import numpy as np
import orjson
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.procs import wait_for

pytestmark = pytest.mark.slow
MODULES = {"rest": httpclient, "grpc": grpcclient}
CODES = {
    400: "StatusCode.INVALID_ARGUMENT",
    404: "StatusCode.NOT_FOUND",
    413: "StatusCode.RESOURCE_EXHAUSTED",
}


def _input(module, name, values, datatype="INT64", shape=None):
    a = np.array(
        values, dtype=np.float32 if datatype == "FP32" else np.int64 if datatype == "INT64" else np.int32
    )
    i = module.InferInput(name, list(shape or a.shape), datatype)
    i.set_data_from_numpy(a)
    return i


def _out(module, name):
    return module.InferRequestedOutput(name)


POS = [("positions", [1, 2])]
# (case, model, parameters, [(input, values, datatype?)], outputs, status, message start)
CASES = [
    ("bad spec field", "rope", {"spec": '{"head_dim": 1}'}, POS, None, 400, "parameters.spec.head_dim: "),
    (
        "nested spec field",
        "rope",
        {"spec": '{"head_dim": 8, "rope_scaling": {"rope_type": "linear", "factor": 0.5}}'},
        POS,
        None,
        400,
        "parameters.spec.rope_scaling.factor: ",
    ),
    (
        "unknown spec field",
        "sinusoidal",
        {"spec": '{"d_model": 8, "offest": 1}'},
        POS,
        None,
        400,
        "parameters.spec.offest: unknown field",
    ),
    ("spec missing", "rope", {}, POS, None, 400, "parameters.spec: field required"),
    ("spec not JSON", "rope", {"spec": "{head_dim: 8}"}, POS, None, 400, "parameters.spec: not valid JSON"),
    ("spec not a string", "rope", {"spec": 8}, POS, None, 400, "parameters.spec: must be a JSON string"),
    (
        "selection in spec",
        "rope",
        {"spec": '{"head_dim": 8, "positions": [1]}'},
        POS,
        None,
        400,
        "parameters.spec.positions: ",
    ),
    (
        "unknown parameter",
        "rope",
        {"spec": '{"head_dim": 8}', "colour": "red"},
        POS,
        None,
        400,
        "parameters.colour: ",
    ),
    ("dtype on a table model", "gptj-rope", {"dtype": "float64"}, POS, None, 400, "parameters.dtype: "),
    (
        "spec on a table model",
        "t5-decoder",
        {"spec": "{}"},
        [("query", [1]), ("key", [2])],
        None,
        400,
        "parameters.spec: unknown parameter",
    ),
    (
        "negative position",
        "rope",
        {"spec": '{"head_dim": 8}'},
        [("positions", [[1, 2], [3, -4]])],
        None,
        400,
        "inputs[0].data[1][1]: must be in [0, 2**31)",
    ),
    (
        "position past 2**31",
        "alibi",
        {"spec": '{"num_heads": 2}'},
        [("query", [1]), ("key", [2, 2**31])],
        None,
        400,
        "inputs[1].data[1]: ",
    ),
    (
        "unknown input",
        "rope",
        {"spec": '{"head_dim": 8}'},
        [("position", [1])],
        None,
        400,
        "inputs[0].name: unknown input",
    ),
    (
        "missing input",
        "alibi",
        {"spec": '{"num_heads": 2}'},
        [("query", [1])],
        None,
        400,
        "inputs: missing input 'key'",
    ),
    (
        "float input",
        "rope",
        {"spec": '{"head_dim": 8}'},
        [("positions", [1.0], "FP32")],
        None,
        400,
        "inputs[0].datatype: must be INT32 or INT64",
    ),
    (
        "batch sizes differ",
        "t5-buckets",
        {"spec": "{}"},
        [("query", [[1], [2]]), ("key", [[1], [2], [3]])],
        None,
        400,
        "inputs: inputs must be all [N] or all [B, N]",
    ),
    ("rank 3", "rope", {"spec": '{"head_dim": 8}'}, [("positions", [[[1]]])], None, 400, "inputs[0].shape: "),
    (
        "unknown output",
        "rope",
        {"spec": '{"head_dim": 8}'},
        POS,
        ["cos", "tan"],
        400,
        "outputs[1].name: unknown output",
    ),
    ("output twice", "rope", {"spec": '{"head_dim": 8}'}, POS, ["cos", "cos"], 400, "outputs[1].name: "),
    (
        "dtype overflow",
        "alibi",
        {"spec": '{"num_heads": 8, "dtype": "float16"}'},
        [("query", [400000]), ("key", [0])],
        None,
        400,
        "parameters.spec.dtype: values overflow float16",
    ),
    ("unknown model", "rotary", {"spec": "{}"}, POS, None, 404, "unknown model 'rotary'"),
    (
        "answer over the limit",
        "alibi",
        {"spec": '{"num_heads": 64}'},
        [("query", list(range(600))), ("key", list(range(600)))],
        None,
        413,
        "response would be",
    ),
]


@pytest.mark.parametrize("transport", MODULES)
@pytest.mark.parametrize(
    "case, model, params, inputs, outputs, status, message", CASES, ids=[c[0] for c in CASES]
)
def test_refusals_name_the_field(clients, transport, case, model, params, inputs, outputs, status, message):
    m = MODULES[transport]
    ins = [_input(m, *i) for i in inputs]
    outs = [_out(m, o) for o in outputs] if outputs else None
    with pytest.raises(InferenceServerException) as e:
        clients[transport].infer(model, ins, outputs=outs, parameters=params)
    want = str(status) if transport == "rest" else CODES[status]
    assert e.value.status() == want, e.value
    assert e.value.message().startswith(message), e.value.message()


def _post(http, path: str, head: dict | bytes, tail: bytes = b"", **headers):
    raw = head if isinstance(head, bytes) else orjson.dumps(head)
    if tail:
        headers.setdefault("inference-header-content-length", str(len(raw)))
    return http.post(path, content=raw + tail, headers=headers)


GOOD = {
    "parameters": {"spec": '{"head_dim": 8}'},
    "inputs": [
        {"name": "positions", "datatype": "INT64", "shape": [2], "parameters": {"binary_data_size": 16}}
    ],
}


@pytest.mark.parametrize(
    "body, tail, headers, status, message",
    [
        (b"{not json", b"", {}, 400, "the inference header is not valid JSON"),
        (b"[1, 2]", b"", {}, 400, "the inference header must be a JSON object"),
        ({**GOOD, "extra": 1}, np.array([1, 2]).tobytes(), {}, 400, "extra: unknown field"),
        (GOOD, np.array([1]).tobytes(), {}, 400, "inputs[0].parameters.binary_data_size: 16 bytes, but 8"),
        (
            GOOD,
            np.array([1, 2, 3]).tobytes(),
            {},
            400,
            "Inference-Header-Content-Length: 8 bytes of binary data after",
        ),
        (
            {**GOOD, "inputs": [{**GOOD["inputs"][0], "shape": [3]}]},
            np.array([1, 2]).tobytes(),
            {},
            400,
            "inputs[0]: 16 bytes of data for shape [3]",
        ),
        (
            {
                "inputs": [{"name": "positions", "datatype": "INT64", "shape": [1], "data": [True]}],
                "parameters": {"spec": '{"head_dim": 8}'},
            },
            b"",
            {},
            400,
            "inputs[0].data[0]: must be an integer",
        ),
        (GOOD, np.array([1, 2]).tobytes(), {"content-encoding": "br"}, 400, "Content-Encoding: unsupported"),
        (
            GOOD,
            np.array([1, 2]).tobytes(),
            {"inference-header-content-length": "999"},
            400,
            "Inference-Header-Content-Length: must be an integer in",
        ),
        (b"x" * (5 << 20), b"", {}, 413, "request body over the limit"),
    ],
)
def test_rest_malformed_requests(clients, body, tail, headers, status, message):
    r = _post(clients["http"], "/v2/models/rope/infer", body, tail, **headers)
    assert r.status_code == status, r.text
    assert r.json()["error"].startswith(message), r.json()


@pytest.mark.parametrize(
    "method, path, status",
    [
        ("GET", "/v2/models/rope/infer", 405),
        ("POST", "/v2/models/rope", 405),
        ("GET", "/v2/repository/index", 404),
        ("GET", "/v2/models/rope/config", 405),
        ("GET", "/v2/models/rope/versions/2", 404),
        ("GET", "/v2/models/nope/ready", 404),
        ("DELETE", "/v2/systemsharedmemory/status", 405),
    ],
)
def test_rest_paths_outside_the_contract(clients, method, path, status):
    r = clients["http"].request(method, path)
    assert r.status_code == status and "error" in r.json()


def test_grpc_raw_contents_must_match_inputs(v2server):
    with grpc.insecure_channel(v2server.grpc_url) as ch:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
        req = service_pb2.ModelInferRequest(model_name="rope")
        req.parameters["spec"].string_param = '{"head_dim": 8}'
        req.inputs.add(name="positions", datatype="INT64", shape=[1])
        req.raw_input_contents.extend([np.array([1]).tobytes()] * 2)
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(req)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.details().startswith("raw_input_contents: 2 entries for 1 inputs")
        big = service_pb2.ModelInferRequest(model_name="rope", raw_input_contents=[b"\0" * (5 << 20)])
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(big)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        for method in ("ModelConfig", "RepositoryIndex", "CudaSharedMemoryStatus", "ModelStatistics"):
            req_cls = getattr(service_pb2, f"{method}Request")
            with pytest.raises(grpc.RpcError) as e:
                getattr(stub, method)(req_cls())
            assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED, method


def test_health_metadata_and_readiness(clients, v2server):
    for t in MODULES:
        c = clients[t]
        assert c.is_server_live() and c.is_server_ready()
        assert c.is_model_ready("rope") and c.is_model_ready("llama-3.1-8b")
    assert not clients["rest"].is_model_ready("nope")  # a 404
    with pytest.raises(InferenceServerException) as e:
        clients["grpc"].is_model_ready("nope")
    assert e.value.status() == "StatusCode.NOT_FOUND"
    rest_meta = clients["rest"].get_server_metadata()
    assert rest_meta["name"] == "posenc" and "system_shared_memory" in rest_meta["extensions"]
    assert list(clients["grpc"].get_server_metadata().extensions) == rest_meta["extensions"]
    meta = clients["rest"].get_model_metadata("gptj-rope")
    outs = {o["name"]: (o["datatype"], o["shape"]) for o in meta["outputs"]}
    assert outs == {
        "cos": ("BF16", [-1, 32]),
        "sin": ("BF16", [-1, 32]),
        "inv_freq": ("FP32", [16]),
        "attention_scaling": ("FP64", [1]),
    }
    g = clients["grpc"].get_model_metadata("t5-buckets")
    assert [i.name for i in g.inputs] == ["query", "key"] and [
        (o.name, o.datatype, list(o.shape)) for o in g.outputs
    ] == [("buckets", "INT32", [-1, -1])]
    for t in MODULES:
        with pytest.raises(InferenceServerException) as e:
            clients[t].get_model_metadata("nope")
        assert e.value.status() in ("404", "StatusCode.NOT_FOUND")
    with grpc.insecure_channel(v2server.grpc_url) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        for service in ("", "inference.GRPCInferenceService"):
            assert (
                health.Check(health_pb2.HealthCheckRequest(service=service)).status
                == health_pb2.HealthCheckResponse.SERVING
            )
    assert clients["http"].get("/v2/health/ready").json() == {"ready": True}


def test_metrics_count_v2_and_grpc(clients):
    for t, m in MODULES.items():
        clients[t].infer("rope", [_input(m, "positions", [1])], parameters={"spec": '{"head_dim": 8}'})
        with pytest.raises(InferenceServerException):
            clients[t].infer("rope", [_input(m, "positions", [1])], parameters={"spec": '{"head_dim": 1}'})
        clients[t].infer("t5-decoder", [_input(m, "query", [1]), _input(m, "key", [2])])
    lines = (
        'route="/v2/models/rope/infer",status="200"',
        'route="/v2/models/rope/infer",status="400"',
        'route="/v2/models/<table>/infer",status="200"',
        'route="grpc ModelInfer rope",status="200"',
        'route="grpc ModelInfer rope",status="400"',
        'route="grpc ModelInfer <table>",status="200"',
    )

    def counted():  # each process writes its counts to its file every FLUSH_S
        text = clients["http"].get("/metrics").text
        return text if all(f"posenc_request_duration_seconds_count{{{x}}}" in text for x in lines) else None

    try:
        text = wait_for(counted, 5, 0.05, "every route counted")
    except TimeoutError:
        text = clients["http"].get("/metrics").text
    for line in (
        'route="/v2/models/rope/infer",status="200"',
        'route="/v2/models/rope/infer",status="400"',
        'route="/v2/models/<table>/infer",status="200"',
        'route="grpc ModelInfer rope",status="200"',
        'route="grpc ModelInfer rope",status="400"',
        'route="grpc ModelInfer <table>",status="200"',
    ):
        assert f"posenc_request_duration_seconds_count{{{line}}}" in text, line
