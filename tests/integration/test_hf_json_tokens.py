"""config.json as transformers writes it (json.dumps: ``NaN``, ``Infinity``, ``-Infinity``) over every
way in, on a real ``posenc serve``: request bodies (/v1), the KServe v2 ``spec`` parameter, a table
config whose entries hold such configs (inline and as config.json paths), and ``posenc compute
--hf-config``. Inside ``hf_config`` the tokens are accepted; anywhere else they are a 422 naming
the field, as before; and the t5-buckets and sinusoidal hf_config bodies answer over HTTP."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import httpx
import numpy as np
import pytest

from posenc.engine.answer.pipeline import compute
from tests.engine.hf_published import ROPE
from tests.procs import serve_for_module

LLAMA = ROPE["llama-3.1-8b"]
# Bamba's, Falcon-H1's and GraniteMoeHybrid's default, as json.dumps writes it; a key that carries
# no positions (posenc ignores it, as transformers' rotary code does)
INF_LLAMA = {
    **LLAMA,
    "time_step_limit": [0.0, math.inf],
    "time_step_floor": -math.inf,
    "mamba_dt_min": math.nan,
}
T5 = {
    "model_type": "t5",
    "d_model": 512,
    "relative_attention_num_buckets": 32,
    "time_step_limit": [0.0, math.inf],
}
INF_MISTRAL = {**ROPE["mistral-7b-v0.1"], "time_step_limit": [0.0, math.inf]}
MARIAN = {"model_type": "marian", "d_model": 512, "pad_token_id": 58100, "time_step_limit": [0.0, math.inf]}


def raw(body) -> bytes:
    """The body as Python's json.dumps writes it (NaN, Infinity, -Infinity)."""
    return json.dumps(body).encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory, request):
    tmp = tmp_path_factory.mktemp("tokens")
    (tmp / "config.json").write_text(json.dumps(INF_LLAMA, indent=2))
    config = {
        "length": 4096,
        "tables": [
            {"name": "llama-file", "family": "rope", "hf_config": "config.json"},
            {"name": "mistral-inline", "family": "rope", "hf_config": INF_MISTRAL},
            {"name": "t5-encoder", "family": "t5-buckets", "hf_config": T5, "layer_type": "encoder"},
            {"name": "marian", "family": "sinusoidal", "hf_config": MARIAN},
        ],
    }
    return serve_for_module(tmp, request, config)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


def test_the_tokens_inside_hf_config_are_accepted(http):
    want = compute("rope", {"hf_config": LLAMA, "positions": [0, 1, 4096, 9000]})
    for accept in ("application/json", "application/x-safetensors"):
        for _ in range(3):  # again: whichever path answers a repeated body
            r = http.post(
                "/v1/rope",
                content=raw({"hf_config": INF_LLAMA, "positions": [0, 1, 4096, 9000]}),
                headers={"accept": accept},
            )
            assert r.status_code == 200, r.text
            if accept == "application/json":
                got = r.json()
                assert got["spec"] == want["spec"]
                assert np.asarray(got["cos"], np.float32).tobytes() == want["cos"].tobytes()


@pytest.mark.parametrize(
    "body,loc",
    [
        (b'{"hf_config": %s, "positions": [0, NaN]}' % raw(INF_LLAMA), ["body", "positions", 1]),
        (b'{"d_model": Infinity, "positions": [0]}', ["body", "d_model"]),
        (b'{"d_model": 64, "base": -Infinity, "positions": [0]}', ["body", "base"]),
        (b'{"hf_config": {"model_type": "llama"}, "positions": [0], "dtype": NaN}', ["body", "dtype"]),
        (b'{"d_model": 64, "positions": [0]', ["body"]),  # still not JSON
        (b'{"d_model": 64, "positions": [0], "x": nan}', ["body"]),  # nor this
    ],
)
def test_the_tokens_elsewhere_are_a_422_naming_the_field(http, body, loc):
    r = http.post("/v1/sinusoidal" if b"d_model" in body else "/v1/rope", content=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == loc, r.text


def test_a_read_key_holding_nan_is_refused_even_after_its_null_was_answered(http):
    """orjson writes NaN as null: the spec cache must not take one for the other."""
    null = {**INF_LLAMA, "rope_theta": None}
    nan = {**INF_LLAMA, "rope_theta": math.nan}
    for _ in range(2):
        r = http.post("/v1/rope", content=raw({"hf_config": null, "positions": [3]}))
        assert r.status_code == 200, r.text
        assert r.json()["spec"]["rope_theta"] == 10000.0  # LlamaConfig's default
        r = http.post("/v1/rope", content=raw({"hf_config": nan, "positions": [3]}))
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "hf_config", "rope_theta"]


def test_t5_and_sinusoidal_configs_over_http(http):
    body = {"hf_config": T5, "layer_type": "decoder", "query": [7], "key": {"start": 0, "stop": 12}}
    r = http.post("/v1/t5-buckets", content=raw(body))
    assert r.status_code == 200, r.text
    assert (
        r.json()["buckets"]
        == compute("t5-buckets", {**body, "hf_config": {**T5, "time_step_limit": None}})["buckets"].tolist()
    )
    assert r.json()["spec"] == {"bidirectional": False, "num_buckets": 32, "max_distance": 128}
    r = http.post("/v1/t5-buckets", content=raw({**body, "layer_type": None}))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "layer_type"], r.text
    r = http.post(
        "/v1/sinusoidal",
        content=raw({"hf_config": MARIAN, "positions": [0, 511, 2000]}),
        headers={"accept": "application/x-npz"},
    )
    assert r.status_code == 200, r.text
    r = http.post("/v1/sinusoidal", json={"hf_config": {"model_type": "xlm"}, "positions": [0]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == [
        "body",
        "hf_config",
        "sinusoidal_embeddings",
    ]


def test_named_tables_from_configs_with_the_tokens(http):
    names = {e["name"] for e in http.get("/v1/tables").json()["named"]}
    assert {"llama-file", "mistral-inline", "t5-encoder", "marian"} <= names
    for name, cfg in (("llama-file", LLAMA), ("mistral-inline", ROPE["mistral-7b-v0.1"])):
        want = compute("rope", {"hf_config": cfg, "positions": [5, 4000]})
        r = http.post("/v1/rope", json={"table": name, "positions": [5, 4000]})
        assert r.status_code == 200, r.text
        assert r.json()["spec"] == want["spec"]
    r = http.post("/v1/t5-buckets", json={"table": "t5-encoder", "query": [0], "key": [0, 1, 200]})
    assert r.json()["buckets"] == [[0, 17, 31]] and r.json()["spec"]["bidirectional"] is True
    r = http.post("/v1/sinusoidal", json={"table": "marian", "positions": [3]})
    assert r.json()["spec"] == {"d_model": 512, "base": 10000.0, "layout": "concat", "offset": 0}


def test_kserve_v2_spec_parameter(http):
    def infer(spec: str):
        return http.post(
            "/v2/models/rope/infer",
            json={
                "inputs": [{"name": "positions", "shape": [2], "datatype": "INT64", "data": [0, 9000]}],
                "parameters": {"spec": spec},
            },
        )

    r = infer(json.dumps({"hf_config": INF_LLAMA}))
    assert r.status_code == 200, r.text
    want = compute("rope", {"hf_config": LLAMA, "positions": [0, 9000]})
    cos = next(o for o in r.json()["outputs"] if o["name"] == "cos")
    assert np.asarray(cos["data"], np.float32).tobytes() == want["cos"].tobytes()
    r = infer('{"head_dim": 64, "rope_theta": NaN}')
    assert r.status_code == 400 and "parameters.spec.rope_theta" in r.text, r.text
    r = infer('{"head_dim": 64, "rope_theta": }')
    assert r.status_code == 400 and "parameters.spec" in r.text, r.text


def _posenc(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "posenc", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_cli_compute_hf_config_file_and_spec(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(INF_LLAMA, indent=2))
    out = tmp_path / "out.npz"
    r = _posenc(
        "compute",
        "rope",
        "--hf-config",
        str(tmp_path / "config.json"),
        "--spec",
        '{"positions": [0, 9000]}',
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    assert (
        np.load(out)["cos"].tobytes()
        == compute("rope", {"hf_config": LLAMA, "positions": [0, 9000]})["cos"].tobytes()
    )
    r = _posenc(
        "compute",
        "rope",
        "--spec",
        raw({"hf_config": INF_LLAMA, "positions": [1]}).decode(),
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    r = _posenc("compute", "sinusoidal", "--spec", '{"d_model": 8, "positions": [0, NaN]}', "--out", str(out))
    assert r.returncode == 2 and "spec.positions.1: must be a finite number" in r.stderr, r.stderr
    bad = tmp_path / "tables.json"  # a NaN in a table config outside hf_config
    bad.write_text('{"tables": [{"family": "sinusoidal", "spec": {"d_model": 8, "base": NaN}}]}')
    r = _posenc(
        "compute",
        "rope",
        "--tables",
        str(bad),
        "--spec",
        '{"table": "x", "positions": [1]}',
        "--out",
        str(out),
    )
    assert r.returncode == 2 and "tables.0.spec.base: must be a finite number" in r.stderr, r.stderr
