"""Every limit of docs/reference.md exactly at it and one past it, over HTTP on a real ``posenc serve``, through
the C path (a safetensors body whose spec template the workers have learnt, offered to the
shortcut first) and the plain path (a JSON answer, which only the full path gives): 4 MiB request
bodies, 64 MiB responses (the body sent: a safetensors file's header counts), 2^20 positions in a
selection, positions below 2^31."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from safetensors.numpy import load as load_safetensors

from posenc.engine.answer.pipeline import compute
from tests.engine.float64_refs import bias64, slopes64
from tests.numeric import assert_rounded_once
from tests.service_cases import BIN, orjson_dumps, padded_rope_body, reference_safetensors

MAX_BODY = 4 * 2**20
MAX_RESPONSE = 64 * 2**20
MAX_POSITIONS = 2**20
JSON = {"accept": "application/json"}
PATHS = {"c-path": BIN, "plain-path": JSON}


@pytest.fixture(scope="module")
def learnt_http(http):
    """The HTTP client, once every worker has answered the rope spec used here (new connections
    until both have), so that its safetensors bodies are offered to the C shortcut first."""
    seen = set()
    for _ in range(60):
        r = httpx.post(
            str(http.base_url) + "/v1/rope",
            content=orjson_dumps({"head_dim": 64, "positions": [5]}),
            headers=BIN,
        )
        seen.add(r.headers["x-posenc-worker"])
        if len(seen) == 2:
            break
    return http


def check_answer(r, body: dict, headers: dict) -> None:
    assert r.status_code == 200, r.text[:300]
    if headers is BIN:
        assert r.content == reference_safetensors("rope", body)
    else:
        assert np.array_equal(np.asarray(r.json()["cos"], np.float32), compute("rope", body)["cos"])


@pytest.mark.parametrize("path", PATHS)
def test_request_body_of_4_mib_and_one_byte_more(learnt_http, path):
    at = padded_rope_body(MAX_BODY)
    assert len(at) == MAX_BODY
    check_answer(
        learnt_http.post("/v1/rope", content=at, headers=PATHS[path]),
        {"head_dim": 64, "positions": [1, 2]},
        PATHS[path],
    )
    r = learnt_http.post("/v1/rope", content=padded_rope_body(MAX_BODY + 1), headers=PATHS[path])
    assert r.status_code == 413 and "body" in r.json()["detail"], r.text[:300]


@pytest.mark.parametrize("path", PATHS)
def test_positions_2_31_minus_1_and_2_31(learnt_http, path):
    body = {"head_dim": 64, "positions": [5, 2**31 - 1]}
    check_answer(
        learnt_http.post("/v1/rope", content=orjson_dumps(body), headers=PATHS[path]), body, PATHS[path]
    )
    for sel, loc in (
        ([5, 2**31], ["body", "positions", 1]),
        ({"start": 2**31 - 1, "stop": 2**31 + 1}, ["body", "positions", "stop"]),
    ):
        r = learnt_http.post(
            "/v1/rope", content=orjson_dumps({"head_dim": 64, "positions": sel}), headers=PATHS[path]
        )
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == loc, r.text[:300]
    # a range ending exactly at 2^31 selects 2^31 − 1 last: allowed
    body = {"head_dim": 64, "positions": {"start": 2**31 - 2, "stop": 2**31}}
    check_answer(
        learnt_http.post("/v1/rope", content=orjson_dumps(body), headers=PATHS[path]), body, PATHS[path]
    )


def test_2_20_positions_and_one_more(learnt_http):
    """A selection of exactly 2^20 positions is served, 2^20 + 1 is a 413 (head_dim 2: 16 MiB)."""
    for path, headers in PATHS.items():
        if path == "plain-path":
            continue  # 2^20 rows as JSON text is 60 MB of numbers: the safetensors answer suffices
        body = {"head_dim": 2, "positions": {"start": 0, "stop": MAX_POSITIONS}}
        r = learnt_http.post("/v1/rope", content=orjson_dumps(body), headers=headers)
        assert r.status_code == 200, r.text[:300]
        assert r.content == reference_safetensors("rope", body)
    for headers in PATHS.values():
        for sel in ({"start": 0, "stop": MAX_POSITIONS + 1}, [0] * (MAX_POSITIONS + 1)):
            raw = orjson_dumps({"head_dim": 2, "positions": sel})
            if len(raw) > MAX_BODY:
                continue  # the list form is over the body limit before it is over this one
            r = learnt_http.post("/v1/rope", content=raw, headers=headers)
            assert r.status_code == 413 and str(MAX_POSITIONS) in r.json()["detail"], r.text[:300]
    # ALiBi counts query and key separately: 2^20 keys for one query are served
    body = {
        "num_heads": 12,
        "heads": [0],
        "query": [MAX_POSITIONS],
        "key": {"start": 1, "stop": MAX_POSITIONS + 1},
    }
    r = learnt_http.post("/v1/alibi", content=orjson_dumps(body), headers=BIN)
    assert r.status_code == 200 and r.content == reference_safetensors("alibi", body)
    body["key"] = {"start": 0, "stop": MAX_POSITIONS + 1}
    assert learnt_http.post("/v1/alibi", content=orjson_dumps(body), headers=BIN).status_code == 413


# One float16 ALiBi head: bias 2·nq·nk bytes + slopes 4 bytes, in a safetensors file whose header
# (service/core/sizing.py computes it exactly) makes the rest: the limit is the body's. 4103 × 8178
# cells make a file of exactly 64 MiB; one more query row is past it (and so is the JSON text).
AT_LIMIT = (4103, 8178)


def _alibi_block(nq, nk):
    return {
        "num_heads": 1,
        "dtype": "float16",
        "query": {"start": nk, "stop": nk + nq},
        "key": {"start": 0, "stop": nk},
    }


def test_response_of_64_mib_and_the_next_size_up(learnt_http):
    from posenc.engine.answer import pipeline
    from posenc.service.core.sizing import safetensors_size

    nq, nk = AT_LIMIT
    body = _alibi_block(nq, nk)
    assert safetensors_size(pipeline.parse("alibi", body)) == MAX_RESPONSE
    r = learnt_http.post("/v1/alibi", content=orjson_dumps(body), headers=BIN)
    assert r.status_code == 200, r.text[:300]
    assert len(r.content) == MAX_RESPONSE
    arrays = load_safetensors(r.content)
    assert arrays["bias"].shape == (1, nq, nk)
    rows = [0, 1, nq // 2, nq - 1]  # held exactly to the float64 formula, a few rows
    want = bias64(slopes64(1), [nk + i for i in rows], list(range(nk)))
    assert_rounded_once(arrays["bias"][:, rows], want, "float16", what="64 MiB block")
    body = _alibi_block(nq + 1, nk)
    past = safetensors_size(pipeline.parse("alibi", body))
    assert past == MAX_RESPONSE + 2 * nk
    for headers in PATHS.values():
        r = learnt_http.post("/v1/alibi", content=orjson_dumps(body), headers=headers)
        assert r.status_code == 413, r.text[:300]
        detail = r.json()["detail"]
        assert str(MAX_RESPONSE) in detail and ("query (4104 positions)" in detail), detail
        if headers is BIN:
            assert str(past) in detail, detail
