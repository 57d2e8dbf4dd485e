"""Fuzzed v2 requests (wrong datatypes and shapes, malformed parameters and specs, truncated or
surplus binary data, unknown models and outputs) against a real `posenc serve`: never a 5xx, never
gRPC INTERNAL or UNKNOWN, and the server keeps answering."""

from __future__ import annotations

import grpc
import httpx
import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2, service_pb2_grpc

pytestmark = pytest.mark.slow
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
MODELS = [
    "rope",
    "sinusoidal",
    "sinusoidal-grid",
    "alibi",
    "t5-buckets",
    "gptj-rope",
    "bloom-alibi",
    "t5-decoder",
    "nope",
    "",
]
NAMES = ["positions", "position_ids", "query", "key", "pos", ""]
DATATYPES = ["INT32", "INT64", "UINT64", "FP32", "BF16", "BYTES", "int64", ""]
SPEC_FIELDS = {
    "head_dim": st.sampled_from([2, 8, 7, 0, -2, 64.0, "8", None, 1 << 40]),
    "rope_theta": st.sampled_from([10000.0, 0, -1, "x", float("1e308")]),
    "rope_scaling": st.sampled_from(
        [None, {"rope_type": "linear", "factor": 2.0}, {"rope_type": "yarn"}, [], "x"]
    ),
    "d_model": st.sampled_from([8, 33, 1, 0, "8"]),
    "layout": st.sampled_from(["interleaved", "concat", "fairseq", "half_split", 3]),
    "num_heads": st.sampled_from([1, 12, 0, -3, 1000]),
    "heads": st.sampled_from([[0], [], [99], "0"]),
    "mask_future": st.sampled_from([True, False, 1]),
    "dtype": st.sampled_from(["float32", "float16", "bfloat16", "float64", None, 5]),
    "positions": st.just([1]),
    "bogus": st.integers(-(2**63), 2**63 - 1),
}
spec_objects = st.dictionaries(st.sampled_from(list(SPEC_FIELDS)), st.none(), max_size=4).flatmap(
    lambda d: st.fixed_dictionaries({k: SPEC_FIELDS[k] for k in d})
)
spec_params = st.one_of(
    spec_objects.map(lambda d: orjson.dumps(d).decode()),
    st.text(max_size=20),
    st.integers(-(2**63), 2**63 - 1),
    st.booleans(),
)
params = st.dictionaries(
    st.sampled_from(["spec", "dtype", "binary_data_output", "colour"]), spec_params, max_size=3
)
shapes = st.lists(st.integers(-2, 6), max_size=4)
values = st.lists(st.integers(-5, 2**33), max_size=12)


# Valid requests (a model, its spec, its inputs), of which the fuzz breaks a few parts at a time
VALID = {
    "rope": ('{"head_dim": 8}', ["positions"]),
    "sinusoidal": ('{"d_model": 9, "dtype": "bfloat16"}', ["positions"]),
    "alibi": ('{"num_heads": 3, "mask_future": true}', ["query", "key"]),
    "t5-buckets": ("{}", ["query", "key"]),
    "gptj-rope": (None, ["positions"]),
    "t5-decoder": (None, ["query", "key"]),
    "sinusoidal-grid": ('{"embed_dim": 8, "grid_size": [70, 80], "extra_tokens": 1}', ["positions"]),
    "mrope": ('{"head_dim": 12, "mrope_section": [1, 2, 3]}', ["position_ids"]),
}


@st.composite
def requests(draw):
    """(model, parameters, inputs): valid ones, each part replaced by a fuzzed one now and then."""
    model = draw(st.sampled_from(list(VALID)))
    spec, names = VALID[model]
    axes = 3 if model == "mrope" else None  # rope's position_ids: [3, N] or [B, 3, N]
    model = "rope" if model == "mrope" else model
    p = {"spec": spec} if spec else {}
    rows = draw(st.sampled_from([None, 1, 2]))
    n = draw(st.integers(1, 4))
    inputs = [
        {
            "name": name,
            "datatype": draw(st.sampled_from(["INT32", "INT64"])),
            "shape": [*([rows] if rows else []), *([axes] if axes else []), n],
            "values": draw(
                st.lists(
                    st.integers(0, 5000),
                    min_size=n * (rows or 1) * (axes or 1),
                    max_size=n * (rows or 1) * (axes or 1),
                )
            ),
            "binary": draw(st.booleans()),
            "cut": 0,
        }
        for name in names
    ]
    if draw(st.integers(0, 3)) == 0:
        model = draw(st.sampled_from(MODELS))
    if draw(st.integers(0, 3)) == 0:
        p = draw(params)
    for t in inputs:
        for key, strategy in (
            ("name", st.sampled_from(NAMES)),
            ("datatype", st.sampled_from(DATATYPES)),
            ("shape", shapes),
            ("values", values),
            ("cut", st.integers(-9, 9)),
        ):
            if draw(st.integers(0, 9)) == 0:
                t[key] = draw(strategy)
    if draw(st.integers(0, 5)) == 0:
        inputs = inputs[:-1] if draw(st.booleans()) else inputs + inputs[:1]
    return model, p, inputs


outputs = (
    st.none()
    | st.none()
    | st.lists(
        st.fixed_dictionaries(
            {"name": st.sampled_from(["cos", "bias", "tan", "buckets"])},
            optional={"binary_data": st.sampled_from([True, False, 1])},
        ),
        max_size=3,
    )
)


def _raw(t) -> bytes:
    dt = np.int32 if t["datatype"] == "INT32" else np.int64
    raw = np.array([v % 2**63 for v in t["values"]], dtype=np.uint64).astype(dt).tobytes()
    return raw[: max(0, len(raw) + t["cut"])] if t["cut"] < 0 else raw + b"\x01" * t["cut"]


@FUZZ
@given(request=requests(), outs=outputs, extra=st.sampled_from([b""] * 6 + [b"\x00", b"\x01\x02\x03"]))
def test_rest_fuzz_never_5xx(v2server, request, outs, extra):
    model, p, inputs = request
    head, tail = {"parameters": p, "inputs": []}, b""
    for t in inputs:
        entry = {"name": t["name"], "datatype": t["datatype"], "shape": t["shape"]}
        if t["binary"]:
            raw = _raw(t)
            entry["parameters"] = {"binary_data_size": len(raw) + (1 if t["cut"] == 9 else 0)}
            tail += raw
        else:
            entry["data"] = t["values"]
        head["inputs"].append(entry)
    if outs is not None:
        head["outputs"] = [
            {"name": o["name"], "parameters": {k: v for k, v in o.items() if k != "name"}} for o in outs
        ]
    js = orjson.dumps(head)
    with httpx.Client(base_url=v2server.url, timeout=30) as http:
        r = http.post(
            f"/v2/models/{model}/infer",
            content=js + tail + extra,
            headers={"inference-header-content-length": str(len(js))} if tail or extra else {},
        )
    event(f"status {r.status_code} " + (r.json().get("error", "")[:45] if r.status_code != 200 else ""))
    assert r.status_code in (200, 400, 404, 405, 413), r.text
    if r.status_code != 200:
        assert "error" in r.json()


@FUZZ
@given(request=requests(), outs=outputs, raws=st.integers(-3, 1))
def test_grpc_fuzz_never_internal(v2server, request, outs, raws):
    model, p, inputs = request
    req = service_pb2.ModelInferRequest(model_name=model)
    for k, v in p.items():
        if isinstance(v, bool):
            req.parameters[k].bool_param = v
        elif isinstance(v, int):
            req.parameters[k].int64_param = max(-(2**63), min(v, 2**63 - 1))
        else:
            req.parameters[k].string_param = v
    for t in inputs:
        i = req.inputs.add(
            name=t["name"], datatype=t["datatype"], shape=[max(d, -(2**63)) for d in t["shape"]]
        )
        if t["binary"]:
            req.raw_input_contents.append(_raw(t))
        elif t["datatype"] == "INT64":
            i.contents.int64_contents.extend(v % 2**63 for v in t["values"])
        else:
            i.contents.int_contents.extend(v % 2**31 for v in t["values"])
    if raws > 0:
        req.raw_input_contents.append(b"\0" * 8)
    for o in outs or ():
        req.outputs.add(name=o["name"])
    with grpc.insecure_channel(v2server.grpc_url) as ch:
        try:
            service_pb2_grpc.GRPCInferenceServiceStub(ch).ModelInfer(req, timeout=30)
            event("OK")
        except grpc.RpcError as e:
            event(str(e.code()))
            assert e.code() in (
                grpc.StatusCode.INVALID_ARGUMENT,
                grpc.StatusCode.NOT_FOUND,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
            ), (e.code(), e.details())
            assert e.details()


def test_still_serving_after_the_fuzz(v2server):
    with httpx.Client(base_url=v2server.url, timeout=30) as http:
        assert http.get("/v2/health/ready").status_code == 200
    with grpc.insecure_channel(v2server.grpc_url) as ch:
        assert (
            service_pb2_grpc.GRPCInferenceServiceStub(ch).ServerReady(service_pb2.ServerReadyRequest()).ready
        )
