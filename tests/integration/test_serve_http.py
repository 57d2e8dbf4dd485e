"""A real ``posenc serve`` (2 uvicorn workers and an engine) spoken to over HTTP: every family in
every format, negotiation, shared segments, one build per new spec, health, metrics and docs, and
repeated or concurrent traffic (whichever path answers) held to the library's bytes.
"""

from __future__ import annotations

import concurrent.futures
import io

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from posenc.engine import kernels
from posenc.engine.answer.pipeline import compute
from posenc.engine.core.formats import read_safetensors
from posenc.engine.reader.client import Client
from posenc.service.metrics.counters import FLUSH_S
from tests.children.bits import digest_of
from tests.independent import assert_answer
from tests.procs import wait_for
from tests.service_cases import BIN, REQUEST_IDS, REQUESTS, as_float, orjson_dumps, reference_safetensors
from tests.shm import held_segments, mapped_segments


@pytest.mark.parametrize("family,body", REQUESTS, ids=REQUEST_IDS)
def test_every_family_in_every_format(http, family, body):
    """Each answer is the float64 reference of docs/reference.md's formulas rounded once
    (tests/independent.py, not posenc's code), and every format carries the library's bits."""
    ref = compute(family, body)
    dtype = body.get("dtype", "float32") if family != "t5-buckets" else None

    r = http.post(f"/v1/{family}", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    got = r.json()
    assert_answer(family, body, got, what=f"JSON {family}")
    assert set(got) == set(ref)
    for k, v in ref.items():
        if isinstance(v, float):
            assert got[k] == v
            continue
        exp = as_float(v, dtype if k not in ("inv_freq", "slopes") else None)
        arr = np.asarray(got[k], dtype=exp.dtype)  # the JSON number parses back to the exact value
        assert arr.shape == exp.shape
        np.testing.assert_array_equal(arr, exp, err_msg=k)

    r = http.post(f"/v1/{family}", json=body, headers=BIN)
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-safetensors"
    arrays, kinds = read_safetensors(r.content)
    assert_answer(family, body, arrays, what=f"safetensors {family}")
    for k, v in ref.items():
        v = np.asarray(v)
        assert arrays[k].tobytes() == v.tobytes(), k
        assert list(arrays[k].shape) == list(v.shape)
        if dtype == "bfloat16" and k not in ("inv_freq", "slopes", "attention_scaling"):
            assert kinds[k] == "bfloat16"

    r = http.post(f"/v1/{family}", json=body, headers={"accept": "application/x-npz"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-npz"
    z = np.load(io.BytesIO(r.content))
    for k, v in ref.items():
        assert z[k].tobytes() == np.asarray(v).tobytes(), k


def test_binary_loads_with_stock_safetensors_and_torch(http):
    torch = pytest.importorskip("torch")
    import safetensors.torch as st_torch  # the test extra installs it

    body = {"head_dim": 64, "positions": [0, 3, 99], "dtype": "bfloat16"}
    r = http.post("/v1/rope", json=body, headers=BIN)
    t = st_torch.load(r.content)
    ref = compute("rope", body)
    assert t["cos"].dtype == torch.bfloat16
    assert torch.equal(t["cos"].view(torch.int16), torch.from_numpy(ref["cos"].view(np.int16)))
    assert t["attention_scaling"].item() == 1.0


def test_accept_negotiation(http):
    body = {"d_model": 8, "positions": [1]}
    for accept, ctype in [
        ("*/*", "application/json"),
        ("application/*", "application/json"),
        ("", "application/json"),
        ("application/json;q=0.2, application/x-safetensors;q=0.9", "application/x-safetensors"),
        ("text/html, application/x-npz;q=0.1", "application/x-npz"),
        ("application/octet-stream", "application/x-safetensors"),
    ]:
        r = http.post("/v1/sinusoidal", json=body, headers={"accept": accept})
        assert r.status_code == 200 and r.headers["content-type"] == ctype, accept
    for accept in ("text/html", "application/xml", "application/json;q=0"):
        r = http.post("/v1/sinusoidal", json=body, headers={"accept": accept})
        assert r.status_code == 406, accept


def test_workers_share_one_set_of_segments(server, http):
    workers = server.worker_pids()
    assert len(workers) == 2, workers
    maps = {pid: set(mapped_segments(pid, server.namespace)) for pid in workers}
    a, b = maps.values()
    pinned = {e["file"] for e in Client(namespace=server.namespace).tables() if e["pinned"]}
    held = set(held_segments(server.engine_pid(), server.namespace))
    assert pinned and pinned <= a & b, maps  # both map every configured table: the engine's segments
    assert a | b <= held  # and nothing else: no private copies
    seen = set()
    for _ in range(60):  # a new connection each time: the kernel spreads them over the workers
        r = httpx.post(server.url + "/v1/rope", json={"head_dim": 64, "positions": [1]})
        seen.add(int(r.headers["x-posenc-worker"]))
        if len(seen) == 2:
            break
    assert seen == set(workers)


def test_new_spec_is_built_once_for_all_workers(server):
    """Concurrent requests for a spec no table holds, answered by both workers (each must have
    asked the engine for it), cause exactly one build."""
    body = {"head_dim": 48, "rope_theta": 12345.0, "positions": [1, 2]}
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        rs = list(ex.map(lambda _: httpx.post(server.url + "/v1/rope", json=body, timeout=60), range(16)))
    assert [r.status_code for r in rs] == [200] * 16
    answered = {int(r.headers["x-posenc-worker"]) for r in rs}
    for _ in range(60):  # a new connection each time, until the kernel has given one to each worker
        if len(answered) == 2:
            break
        answered.add(
            int(httpx.post(server.url + "/v1/rope", json=body, timeout=60).headers["x-posenc-worker"])
        )
    assert answered == set(server.worker_pids())
    client = Client(namespace=server.namespace)
    digest = digest_of(client.table("rope", {k: v for k, v in body.items() if k != "positions"}))
    assert client.call({"op": "stats"})["builds"][digest] == 1


def test_health_ready_tables_metrics_docs(http, server):
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").status_code == 200
    t = http.get("/v1/tables").json()
    # The workers and the engine run the suite's backend: POSENC_BACKEND reaches every child.
    assert t["backend"]["backend"] == t["engine_backend"]["backend"] == kernels.BACKEND
    names = {e["file"] for e in t["tables"]}
    assert names <= set(held_segments(server.engine_pid(), server.namespace)) and len(names) >= 7
    http.post("/v1/rope", json={"head_dim": 64, "positions": [1]})
    http.post("/v1/rope", json={"head_dim": "x", "positions": [1]})

    def scrape():  # either worker answers; the other's counts reach its file within FLUSH_S
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(http.get("/metrics").text)
            for s in f.samples
        }

    got = wait_for(
        lambda: (
            (g := scrape()).get(
                ("posenc_request_duration_seconds_count", (("route", "/v1/rope"), ("status", "422")))
            )
            and g
        ),
        5,
        2 * FLUSH_S,
        "the requests counted",
    )
    assert (
        "posenc_request_duration_seconds_bucket",
        (("le", "1e-05"), ("route", "/v1/rope"), ("status", "200")),
    ) in got
    assert got[("posenc_request_duration_seconds_count", (("route", "/v1/rope"), ("status", "422")))] >= 1
    assert got[("posenc_workers", ())] == 2
    spec = http.get("/openapi.json").json()
    for fam in ("rope", "sinusoidal", "alibi", "t5-buckets"):
        body = spec["paths"][f"/v1/{fam}"]["post"]["requestBody"]["content"]["application/json"]
        assert body["examples"]
        for ex in body["examples"].values():  # every documented example really works
            r = http.post(f"/v1/{fam}", json=ex["value"], headers=BIN)
            assert r.status_code == 200, (fam, r.text)
    assert http.get("/docs").status_code == 200


@pytest.mark.parametrize(
    "spec",
    [
        {"head_dim": 64},
        {"head_dim": 64, "layout": "interleaved", "dtype": "bfloat16"},
        {
            "head_dim": 128,
            "rope_theta": 500000.0,
            "max_position_embeddings": 131072,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
            "dtype": "float16",
        },
    ],
    ids=["f32", "interleaved-bf16", "llama3-f16"],
)
def test_repeated_spec_answers_stay_exact(http, spec):
    """After the first answer for a spec, later bodies with the same spec bytes take the template
    shortcut (service/shortcut/templates.py); whatever path answers, the bytes are the reference's."""
    rng = np.random.default_rng(11)
    lists = [[5]] + [rng.integers(0, 2048, rng.integers(1, 70)).tolist() for _ in range(25)]
    lists += [[0, 0, 0], [2047], [2048], [5, 300000], list(range(64)), list(range(65))]
    for positions in lists:
        body = (
            {"positions": positions, **spec} if len(positions) % 3 == 0 else {**spec, "positions": positions}
        )
        r = http.post("/v1/rope", content=orjson_dumps(body), headers=BIN)
        assert r.status_code == 200, r.text
        want = reference_safetensors("rope", body)
        assert r.content == want, positions
    for bad in ([1.5], [True], [-1], [2**31], []):  # invalid lists in a known template: still 422
        r = http.post("/v1/rope", content=orjson_dumps({**spec, "positions": bad}), headers=BIN)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "positions"], (
            bad,
            r.text,
        )


@pytest.mark.parametrize(
    "family, first, second, want",
    [
        (
            "rope",
            b'{"head_dim":64,"positions":[5],"positions":[5]}',
            b'{"head_dim":64,"positions":[7],"positions":[5]}',
            {"head_dim": 64, "positions": [5]},
        ),
        (
            "rope",
            b'{"head_dim":64,"positions":[5],"\\u0070ositions":[5]}',
            b'{"head_dim":64,"positions":[7],"\\u0070ositions":[5]}',
            {"head_dim": 64, "positions": [5]},
        ),
        (
            "alibi",
            b'{"num_heads":12,"query":[5],"key":[1],"query":[5]}',
            b'{"num_heads":12,"query":[9],"key":[1],"query":[5]}',
            {"num_heads": 12, "query": [5], "key": [1]},
        ),
    ],
)
def test_duplicate_keys_never_reach_a_shortcut(http, family, first, second, want):
    """JSON's last duplicate key wins: a body whose first "positions" is not the one that counts
    must not teach either shortcut a template that answers from the first."""
    for body in (first, second):
        r = http.post(f"/v1/{family}", content=body, headers=BIN)
        assert r.status_code == 200, r.text
        assert r.content == reference_safetensors(family, want)


@pytest.mark.slow
def test_concurrent_decode_traffic_is_exact(server):
    """Decode-like traffic from many threads at once over HTTP, on both workers: RoPE rows and
    ALiBi blocks for a growing position t, each answer the float64 reference's bytes (most are
    answered by the template shortcut after each worker's first)."""
    rope = {
        "head_dim": 128,
        "rope_theta": 500000.0,
        "max_position_embeddings": 131072,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    }
    alibi = {"num_heads": 12}

    def one(t: int):
        if t % 2:
            family, body = "rope", {**rope, "positions": [t, t // 2]}
        else:
            family, body = "alibi", {**alibi, "query": [t], "key": {"start": 0, "stop": t + 1}}
        with httpx.Client(base_url=server.url, timeout=30) as c:
            r = c.post(f"/v1/{family}", content=orjson_dumps(body), headers=BIN)
        assert r.status_code == 200, r.text
        want = reference_safetensors(family, body)
        return r.content == want, r.headers["x-posenc-worker"]

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(one, range(1, 2400, 7)))
    assert all(ok for ok, _ in results)
    assert len({w for _, w in results}) == 2
