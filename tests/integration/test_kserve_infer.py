"""KServe v2 inference through the real tritonclient, over REST and gRPC, against `posenc serve`:
every family and dtype, the named tables as models, [B, N] batches and streams, each answer bit
for bit what /v1 answers for the same spec."""

from __future__ import annotations

import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.independent import assert_answer
from tests.integration.kserve_cases import TABLES, assert_same, bits, infer, split, v1_answer
from tests.service_cases import REQUEST_IDS, REQUESTS

pytestmark = pytest.mark.slow
TRANSPORTS = {"rest": httpclient, "grpc": grpcclient}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("family, body", REQUESTS, ids=REQUEST_IDS)
def test_family_models_answer_what_v1_answers(clients, transport, family, body):
    """v2's answer is /v1's bit for bit, and /v1's is the float64 reference of the documented
    formulas (tests/independent.py), so neither can agree with the other on a wrong value."""
    spec, arrays = split(family, body)
    r = infer(TRANSPORTS[transport], clients[transport], family, arrays, spec)
    v1 = v1_answer(clients["http"], family, body)
    assert_answer(family, body, v1, what=f"v1 {family}")
    assert_same(r, v1)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("dtype, datatype", [("float32", "FP32"), ("float16", "FP16"), ("bfloat16", "BF16")])
@pytest.mark.parametrize(
    "family, spec",
    [
        ("rope", {"head_dim": 64, "layout": "interleaved"}),
        ("sinusoidal", {"d_model": 33, "layout": "fairseq"}),
        ("alibi", {"num_heads": 12, "mask_future": True}),
    ],
)
def test_every_dtype_travels_binary(clients, transport, dtype, datatype, family, spec):
    sel = {"positions": [0, 7, 3000]} if family != "alibi" else {"query": [5, 6], "key": [0, 6, 9]}
    body = {**spec, **sel, "dtype": dtype}
    s, arrays = split(family, body)
    r = infer(TRANSPORTS[transport], clients[transport], family, arrays, s)
    out = r.get_output(next(iter(sorted({"cos", "encoding", "bias"} & set(_names(r))))))
    assert (out["datatype"] if isinstance(out, dict) else out.datatype) == datatype
    assert_same(r, v1_answer(clients["http"], family, body))


def _names(result) -> list[str]:
    resp = result.get_response()
    return [o["name"] for o in resp["outputs"]] if isinstance(resp, dict) else [o.name for o in resp.outputs]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("name", TABLES)
def test_table_models_take_positions_only(clients, transport, name):
    t = TABLES[name]
    family = t["family"]
    sel = (
        {"positions": [1, 2047, 2048, 70000]}
        if family in ("rope", "sinusoidal")
        else {"query": [9, 10], "key": [0, 9, 10, 4000]}
    )
    dtypes = t.get("dtypes", [None])
    r = infer(TRANSPORTS[transport], clients[transport], name, {k: np.array(v) for k, v in sel.items()})
    body = {
        **t["spec"],
        **sel,
        **({"dtype": dtypes[0]} if dtypes[0] else {}),
    }  # the first dtype is the default
    assert_same(r, v1_answer(clients["http"], family, body))
    if len(dtypes) > 1:
        r = infer(
            TRANSPORTS[transport],
            clients[transport],
            name,
            {k: np.array(v) for k, v in sel.items()},
            dtype=dtypes[1],
        )
        assert_same(r, v1_answer(clients["http"], family, {**body, "dtype": dtypes[1]}))


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    "family, spec, rows",
    [
        ("rope", {"head_dim": 64, "dtype": "bfloat16"}, {"positions": [[0, 1, 2, 3], [2047, 2048, 9000, 5]]}),
        ("sinusoidal", {"d_model": 33, "layout": "concat"}, {"positions": [[4, 4], [0, 1], [7, 2000]]}),
        (
            "alibi",
            {"num_heads": 12, "dtype": "float16"},
            {"query": [[3], [8]], "key": [[0, 1, 2, 3], [5, 6, 7, 8]]},
        ),
        ("t5-buckets", {}, {"query": [[0, 1], [100, 101]], "key": [[0, 50, 300], [0, 99, 100]]}),
    ],
)
def test_a_batch_answers_every_row_as_v1(clients, transport, family, spec, rows, datatype="INT32"):
    arrays = {k: np.array(v) for k, v in rows.items()}
    r = infer(TRANSPORTS[transport], clients[transport], family, arrays, spec, datatype=datatype)
    b = next(iter(arrays.values())).shape[0]
    for i in range(b):
        v1 = v1_answer(clients["http"], family, {**spec, **{k: v[i] for k, v in rows.items()}})
        assert_same(r, v1, row=i)
        for name in v1:  # the selection-shaped outputs lead with B; the rest are shared
            assert (bits(r.as_numpy(name)).shape[0] == b) == (
                name in {"cos", "sin", "encoding", "bias", "buckets"}
            )


def test_a_batch_follows_transformers_frequencies(clients):
    """dynamic NTK without seq_len: one set of frequencies for the whole [B, N], from its largest
    position (transformers' dynamic_rope_update over position_ids [B, N])."""
    spec = {
        "head_dim": 64,
        "max_position_embeddings": 1024,
        "rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
    }
    rows = {"positions": [[1, 2], [3000, 4]]}
    r = infer(grpcclient, clients["grpc"], "rope", {"positions": np.array(rows["positions"])}, spec)
    whole = v1_answer(clients["http"], "rope", {**spec, "positions": [1, 2, 3000, 4]})
    np.testing.assert_array_equal(r.as_numpy("cos").reshape(4, 64), whole["cos"])
    np.testing.assert_array_equal(r.as_numpy("inv_freq"), whole["inv_freq"])


def test_rest_json_outputs_unless_binary_asked(clients):
    """Without binary_data, REST outputs are JSON numbers (BF16 only binary: a 400 naming it)."""
    c = clients["rest"]
    i = httpclient.InferInput("positions", [2], "INT64")
    i.set_data_from_numpy(np.array([3, 9]), binary_data=False)
    outs = [httpclient.InferRequestedOutput(n, binary_data=False) for n in ("cos", "inv_freq")]
    r = c.infer("rope", [i], outputs=outs, parameters={"spec": '{"head_dim": 8}'})
    resp = r.get_response()
    assert [o["name"] for o in resp["outputs"]] == ["cos", "inv_freq"] and "data" in resp["outputs"][0]
    ref = v1_answer(clients["http"], "rope", {"head_dim": 8, "positions": [3, 9]})
    np.testing.assert_array_equal(r.as_numpy("cos"), ref["cos"])
    with pytest.raises(Exception) as e:
        c.infer("rope", [i], outputs=outs[:1], parameters={"spec": '{"head_dim": 8, "dtype": "bfloat16"}'})
    assert e.value.status() == "400" and "outputs[0].parameters.binary_data: BF16" in e.value.message()


def test_stream_answers_every_message_in_order(clients, v2server):
    """ModelStreamInfer: many requests in flight on one stream, each answered; a refused one gets
    its error message and the stream goes on."""
    c = grpcclient.InferenceServerClient(v2server.grpc_url)
    got: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        for k in range(40):
            spec = '{"head_dim": 1}' if k == 17 else '{"head_dim": 64}'
            c.async_stream_infer("rope", infer_inputs(k), request_id=str(k), parameters={"spec": spec})
        answers = [got.get(timeout=30) for _ in range(40)]
    finally:
        c.stop_stream()
        c.close()
    ids = [res.get_response().id if res is not None else None for res, _ in answers]
    assert ids == [str(k) if k != 17 else None for k in range(40)]
    err = answers[17][1]
    assert "parameters.spec.head_dim" in err.message()
    ref = v1_answer(clients["http"], "rope", {"head_dim": 64, "positions": [39, 5 + 39]})
    np.testing.assert_array_equal(answers[39][0].as_numpy("sin"), ref["sin"])


def infer_inputs(k: int) -> list:
    i = grpcclient.InferInput("positions", [2], "INT64")
    i.set_data_from_numpy(np.array([k, 5 + k]))
    return [i]
