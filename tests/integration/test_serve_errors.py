"""A real ``posenc serve`` refuses what it must: every field of docs/reference.md given a bad value gets a 422
naming it, malformed bodies 422, limits 413, and fuzzed bodies never a 500 nor a dead worker.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.service_cases import VALID

# -- every field of docs/reference.md given a bad value: 422 naming it ---------------------------------------
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
BAD = [
    ("rope", {"head_dim": "64"}, ["head_dim"]),
    ("rope", {"head_dim": 64.0}, ["head_dim"]),
    ("rope", {"head_dim": True}, ["head_dim"]),
    ("rope", {"head_dim": 1}, ["head_dim"]),
    ("rope", {"head_dim": 1}, ["head_dim"]),
    ("rope", {"rope_theta": 0}, ["rope_theta"]),
    ("rope", {"rope_theta": "1e4"}, ["rope_theta"]),
    ("rope", {"partial_rotary_factor": 1.5}, ["partial_rotary_factor"]),
    ("rope", {"partial_rotary_factor": 0.01}, ["partial_rotary_factor"]),
    ("rope", {"max_position_embeddings": 0}, ["max_position_embeddings"]),
    ("rope", {"rope_scaling": []}, ["rope_scaling"]),
    ("rope", {"rope_scaling": {"rope_type": "ntk"}}, ["rope_scaling", "rope_type"]),
    ("rope", {"rope_scaling": {"rope_type": "linear"}}, ["rope_scaling", "factor"]),
    ("rope", {"rope_scaling": {"rope_type": "linear", "factor": 0.5}}, ["rope_scaling", "factor"]),
    (
        "rope",
        {"rope_scaling": {"rope_type": "linear", "factor": 2.0, "beta_fast": 3}},
        ["rope_scaling", "beta_fast"],
    ),
    (
        "rope",
        {"rope_scaling": {"rope_type": "linear", "type": "yarn", "factor": 2.0}},
        ["rope_scaling", "type"],
    ),
    ("rope", {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, ["max_position_embeddings"]),
    (
        "rope",
        {"max_position_embeddings": 4096, "rope_scaling": {**LLAMA3, "high_freq_factor": 0.5}},
        ["rope_scaling", "high_freq_factor"],
    ),
    (
        "rope",
        {
            "max_position_embeddings": 4096,
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "truncate": 1},
        },
        ["rope_scaling", "truncate"],
    ),
    (
        "rope",
        {
            "max_position_embeddings": 4096,
            "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0]},
        },
        ["rope_scaling", "short_factor"],
    ),
    (
        "rope",
        {"rope_scaling": {"rope_type": "linear", "factor": 2.0}, "rope_parameters": {"rope_type": "default"}},
        ["rope_parameters"],
    ),
    (
        "rope",
        {"rope_theta": 10.0, "rope_parameters": {"rope_theta": 20.0}},
        ["rope_parameters", "rope_theta"],
    ),
    ("rope", {"original_max_position_embeddings": 0}, ["original_max_position_embeddings"]),
    ("rope", {"seq_len": 10}, ["seq_len"]),
    ("rope", {"layout": "neox"}, ["layout"]),
    ("rope", {"positions": []}, ["positions"]),
    ("rope", {"positions": [-1]}, ["positions", 0]),
    ("rope", {"positions": [1, 2**31]}, ["positions", 1]),
    ("rope", {"positions": {"start": 5, "stop": 5}}, ["positions", "stop"]),
    ("rope", {"positions": {"start": 0, "stop": 5, "step": 0}}, ["positions", "step"]),
    ("rope", {"dtype": "float64"}, ["dtype"]),
    ("rope", {"head_dmi": 64}, ["head_dmi"]),
    ("sinusoidal", {"d_model": 1}, ["d_model"]),
    ("sinusoidal", {"d_model": 3, "layout": "fairseq"}, ["d_model"]),
    ("sinusoidal", {"base": 1.0}, ["base"]),
    ("sinusoidal", {"layout": "sincos"}, ["layout"]),
    ("sinusoidal", {"offset": -1}, ["offset"]),
    ("sinusoidal", {"positions": "0:5"}, ["positions"]),
    ("alibi", {"num_heads": 0}, ["num_heads"]),
    ("alibi", {"heads": []}, ["heads"]),
    ("alibi", {"heads": [12]}, ["heads", 0]),
    ("alibi", {"max_bias": 0}, ["max_bias"]),
    ("alibi", {"mode": "bidirectional"}, ["mode"]),
    ("alibi", {"mask_future": "yes"}, ["mask_future"]),
    ("alibi", {"mode": "symmetric", "mask_future": True}, ["mask_future"]),
    ("alibi", {"query": [1.5]}, ["query", 0]),
    ("alibi", {"key": {"start": 0}}, ["key", "stop"]),
    ("alibi", {"dtype": "float16", "query": [200000], "key": [0]}, ["dtype"]),
    ("t5-buckets", {"bidirectional": "true"}, ["bidirectional"]),
    ("t5-buckets", {"num_buckets": 3}, ["num_buckets"]),
    ("t5-buckets", {"max_distance": 8}, ["max_distance"]),
    ("t5-buckets", {"dtype": "float32"}, ["dtype"]),
]


@pytest.mark.parametrize(
    "family,patch,loc", BAD, ids=[f"{f}-{'.'.join(map(str, at))}-{i}" for i, (f, _, at) in enumerate(BAD)]
)
def test_bad_field_gets_422_naming_it(http, family, patch, loc):
    body = {**VALID[family], **patch}
    r = http.post(f"/v1/{family}", json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail[0]["loc"] == ["body", *loc], detail
    assert detail[0]["msg"]


def test_malformed_bodies_get_422(http):
    for raw in (b"{", b"[]", b"null", b'"x"', b"\xff\xfe", b""):
        r = http.post("/v1/rope", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 422, raw
        assert r.json()["detail"][0]["loc"][0] == "body"


def test_limits_give_413(http, server):
    r = http.post("/v1/rope", json={"head_dim": 128, "positions": {"start": 0, "stop": 200000}})
    assert r.status_code == 413 and str(64 * 2**20) in r.json()["detail"]
    r = http.post(
        "/v1/alibi",
        json={"num_heads": 12, "query": {"start": 0, "stop": 4096}, "key": {"start": 0, "stop": 4096}},
    )
    assert r.status_code == 413
    r = http.post("/v1/rope", content=b'{"head_dim": 64, "positions": [' + b"1," * 3_000_000 + b"1]}")
    assert r.status_code == 413 and "body" in r.json()["detail"]
    assert http.get("/healthz").status_code == 200  # and the worker is still there


# -- fuzz: no input gets a 500 or takes a worker down --------------------------------------------
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=12,
)
FIELD_NAMES = sorted(
    {
        "head_dim",
        "rope_theta",
        "partial_rotary_factor",
        "max_position_embeddings",
        "rope_scaling",
        "rope_parameters",
        "original_max_position_embeddings",
        "seq_len",
        "layout",
        "positions",
        "dtype",
        "d_model",
        "base",
        "offset",
        "num_heads",
        "heads",
        "max_bias",
        "mode",
        "mask_future",
        "query",
        "key",
        "bidirectional",
        "num_buckets",
        "max_distance",
        "factor",
        "rope_type",
    }
)
small_sel = st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=4) | st.fixed_dictionaries(
    {"start": st.integers(0, 300), "stop": st.integers(0, 600)}
)
mutation = st.dictionaries(
    st.sampled_from(FIELD_NAMES),
    json_values
    | small_sel
    | st.sampled_from(
        [
            "yarn",
            "llama3",
            "longrope",
            "dynamic",
            "linear",
            "default",
            "float16",
            "bfloat16",
            "interleaved",
            "fairseq",
            "symmetric",
        ]
    ),
    max_size=4,
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    family=st.sampled_from(sorted(VALID)),
    patch=mutation,
    drop=st.sets(st.sampled_from(FIELD_NAMES), max_size=2),
    fmt=st.sampled_from(["application/json", "application/x-safetensors", "text/plain"]),
)
def test_fuzz_never_500(http, family, patch, drop, fmt):
    body = {k: v for k, v in {**VALID[family], **patch}.items() if k not in drop}
    r = http.post(f"/v1/{family}", content=json.dumps(body), headers={"accept": fmt})
    # No 5xx of any kind: a 503 (build timeout, engine gone) would mean the fuzz broke something.
    assert r.status_code in (200, 406, 413, 422), (r.status_code, body, r.text)
    if r.status_code == 200:  # an answer only in a format the client accepts
        assert fmt != "text/plain" and r.headers["content-type"] == fmt, (fmt, r.headers)
    elif r.status_code == 406:  # refused only for a format posenc cannot give
        assert fmt == "text/plain", (fmt, body)
    elif r.status_code == 413:
        assert isinstance(r.json()["detail"], str) and r.json()["detail"]
    else:
        assert r.json()["detail"][0]["loc"][0] == "body"


def test_fuzz_left_the_server_whole(http, server):
    assert server.alive()
    assert http.get("/readyz").status_code == 200
    assert len(server.worker_pids()) == 2
