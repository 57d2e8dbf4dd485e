"""Integration tests of ``posenc serve`` (issue #4): a real server with 2 uvicorn workers and an
engine, spoken to over HTTP; answers compared with engine.compute (the float64 reference)."""

from __future__ import annotations

import concurrent.futures
import io
import json
import os
import re
import signal
import time

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from posenc.engine.client import Client
from posenc.engine.compute import compute
from posenc.engine.dtypes import bf16_bits_to_f32
from posenc.engine.formats import read_safetensors

from serve_proc import Server, leftovers

CONFIG = {"length": 2048, "tables": [
    {"family": "rope", "spec": {"head_dim": 64}, "dtypes": ["float32", "bfloat16"]},
    {"family": "rope", "spec": {"head_dim": 128, "rope_theta": 500000.0, "max_position_embeddings": 131072,
                                "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                 "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 8192}}},
    {"family": "sinusoidal", "spec": {"d_model": 33}},
    {"family": "alibi", "spec": {"num_heads": 12}, "dtypes": ["float32", "float16"]},
    {"family": "t5-buckets", "spec": {}},
]}

BIN = {"accept": "application/x-safetensors"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(CONFIG, workers=2, tmp_path=tmp_path_factory.mktemp("serve"))
    try:
        s.wait_ready()
        yield s
    finally:
        rc = s.stop()
        assert rc == 0, s.output()
        assert leftovers(s.namespace) == [], "shared memory left behind after SIGTERM"


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


REQUESTS = [
    ("rope", {"head_dim": 64, "positions": [0, 1, 7, 2047, 2048, 131072, 400000]}),
    ("rope", {"head_dim": 64, "positions": {"start": 100, "stop": 140}, "dtype": "bfloat16", "layout": "interleaved"}),
    ("rope", {"head_dim": 128, "rope_theta": 500000.0, "max_position_embeddings": 131072,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
              "positions": [5, 9000], "dtype": "float16"}),
    ("rope", {"head_dim": 96, "partial_rotary_factor": 0.5, "max_position_embeddings": 4096,
              "rope_scaling": {"type": "yarn", "factor": 4.0}, "positions": [3, 4000]}),
    ("rope", {"head_dim": 64, "max_position_embeddings": 1024, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
              "positions": [10, 3000]}),
    ("sinusoidal", {"d_model": 33, "positions": [0, 5, 2047, 5000], "layout": "interleaved"}),
    ("sinusoidal", {"d_model": 33, "positions": [0, 5], "layout": "concat", "offset": 3, "dtype": "bfloat16"}),
    ("sinusoidal", {"d_model": 32, "positions": [0, 5], "layout": "fairseq", "offset": 2}),
    ("alibi", {"num_heads": 12, "query": [4095], "key": {"start": 0, "stop": 4096}}),
    ("alibi", {"num_heads": 12, "heads": [11, 0, 0], "query": {"start": 0, "stop": 6}, "key": {"start": 0, "stop": 6},
               "mask_future": True, "dtype": "float16"}),
    ("alibi", {"num_heads": 12, "query": [200000], "key": [0, 199999], "mode": "causal"}),
    ("alibi", {"num_heads": 5, "query": [3, 1], "key": [0, 9], "mode": "symmetric", "dtype": "bfloat16"}),
    ("t5-buckets", {"query": {"start": 0, "stop": 5}, "key": {"start": 0, "stop": 300}}),
    ("t5-buckets", {"bidirectional": False, "num_buckets": 16, "max_distance": 64, "query": [1000000],
                    "key": [0, 999999, 1000000, 1000001]}),
]


def _as_float(a: np.ndarray, dtype) -> np.ndarray:
    return bf16_bits_to_f32(a) if dtype == "bfloat16" and a.dtype == np.uint16 else a


@pytest.mark.parametrize("family,body", REQUESTS, ids=[f"{f}-{i}" for i, (f, _) in enumerate(REQUESTS)])
def test_every_family_in_every_format(http, family, body):
    ref = compute(family, body)
    dtype = body.get("dtype", "float32") if family != "t5-buckets" else None

    r = http.post(f"/v1/{family}", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    got = r.json()
    assert set(got) == set(ref)
    for k, v in ref.items():
        if isinstance(v, float):
            assert got[k] == v
            continue
        exp = _as_float(v, dtype if k not in ("inv_freq", "slopes") else None)
        arr = np.asarray(got[k], dtype=exp.dtype)  # the JSON number parses back to the exact value
        assert arr.shape == exp.shape
        np.testing.assert_array_equal(arr, exp, err_msg=k)

    r = http.post(f"/v1/{family}", json=body, headers=BIN)
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-safetensors"
    arrays, kinds = read_safetensors(r.content)
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
    st_torch = pytest.importorskip("safetensors.torch")
    body = {"head_dim": 64, "positions": [0, 3, 99], "dtype": "bfloat16"}
    r = http.post("/v1/rope", json=body, headers=BIN)
    t = st_torch.load(r.content)
    ref = compute("rope", body)
    assert t["cos"].dtype == torch.bfloat16
    assert torch.equal(t["cos"].view(torch.int16), torch.from_numpy(ref["cos"].view(np.int16)))
    assert t["attention_scaling"].item() == 1.0


def test_accept_negotiation(http):
    body = {"d_model": 8, "positions": [1]}
    for accept, ctype in [("*/*", "application/json"), ("application/*", "application/json"),
                          ("", "application/json"),
                          ("application/json;q=0.2, application/x-safetensors;q=0.9", "application/x-safetensors"),
                          ("text/html, application/x-npz;q=0.1", "application/x-npz"),
                          ("application/octet-stream", "application/x-safetensors")]:
        r = http.post("/v1/sinusoidal", json=body, headers={"accept": accept})
        assert r.status_code == 200 and r.headers["content-type"] == ctype, accept
    for accept in ("text/html", "application/xml", "application/json;q=0"):
        r = http.post("/v1/sinusoidal", json=body, headers={"accept": accept})
        assert r.status_code == 406, accept


def test_workers_share_one_set_of_segments(server, http):
    workers = server.worker_pids()
    assert len(workers) == 2, workers
    maps = {}
    for pid in workers:
        with open(f"/proc/{pid}/maps") as f:
            maps[pid] = {line.split()[-1] for line in f if f"/dev/shm/{server.namespace}.seg." in line}
    a, b = ({os.path.basename(p) for p in v} for v in maps.values())
    pinned = {e["file"] for e in Client(namespace=server.namespace).tables() if e["pinned"]}
    files = {n for n in os.listdir("/dev/shm") if n.startswith(server.namespace + ".seg.")}
    assert pinned and pinned <= a & b, maps   # both map every configured table from the same files
    assert a | b <= files                     # and nothing else: no private copies
    seen = set()
    for _ in range(60):  # a new connection each time: the kernel spreads them over the workers
        r = httpx.post(server.url + "/v1/rope", json={"head_dim": 64, "positions": [1]})
        seen.add(int(r.headers["x-posenc-worker"]))
        if len(seen) == 2:
            break
    assert seen == set(workers)


def test_new_spec_is_built_once_for_all_workers(server):
    body = {"head_dim": 48, "rope_theta": 12345.0, "positions": [1, 2]}
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        rs = list(ex.map(lambda _: httpx.post(server.url + "/v1/rope", json=body, timeout=60), range(16)))
    assert all(r.status_code == 200 for r in rs)
    assert len({r.headers["x-posenc-worker"] for r in rs}) >= 1
    stats = Client(namespace=server.namespace).call({"op": "stats"})
    from posenc.engine.compute import parse_request
    from posenc.engine.tabledefs import table_for
    _, spec, sel, dt = parse_request("rope", body)
    assert stats["builds"][table_for("rope", spec, dt, sel).digest] == 1


# -- every field of API.md given a bad value: 422 naming it ---------------------------------------
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
BAD = [
    ("rope", {"head_dim": "64"}, ["head_dim"]),
    ("rope", {"head_dim": 64.0}, ["head_dim"]),
    ("rope", {"head_dim": True}, ["head_dim"]),
    ("rope", {"head_dim": 1}, ["head_dim"]),
    ("rope", {"head_dim": 63}, ["head_dim"]),
    ("rope", {"rope_theta": 0}, ["rope_theta"]),
    ("rope", {"rope_theta": "1e4"}, ["rope_theta"]),
    ("rope", {"partial_rotary_factor": 1.5}, ["partial_rotary_factor"]),
    ("rope", {"partial_rotary_factor": 0.01}, ["partial_rotary_factor"]),
    ("rope", {"max_position_embeddings": 0}, ["max_position_embeddings"]),
    ("rope", {"rope_scaling": []}, ["rope_scaling"]),
    ("rope", {"rope_scaling": {"rope_type": "ntk"}}, ["rope_scaling", "rope_type"]),
    ("rope", {"rope_scaling": {"rope_type": "linear"}}, ["rope_scaling", "factor"]),
    ("rope", {"rope_scaling": {"rope_type": "linear", "factor": 0.5}}, ["rope_scaling", "factor"]),
    ("rope", {"rope_scaling": {"rope_type": "linear", "factor": 2.0, "beta_fast": 3}}, ["rope_scaling", "beta_fast"]),
    ("rope", {"rope_scaling": {"rope_type": "linear", "type": "yarn", "factor": 2.0}}, ["rope_scaling", "type"]),
    ("rope", {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, ["max_position_embeddings"]),
    ("rope", {"max_position_embeddings": 4096, "rope_scaling": {**LLAMA3, "high_freq_factor": 1.0}},
     ["rope_scaling", "high_freq_factor"]),
    ("rope", {"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "truncate": 1}},
     ["rope_scaling", "truncate"]),
    ("rope", {"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0],
                                                                 "long_factor": [1.0]}}, ["rope_scaling", "short_factor"]),
    ("rope", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}, "rope_parameters": {"rope_type": "default"}},
     ["rope_parameters"]),
    ("rope", {"rope_theta": 10.0, "rope_parameters": {"rope_theta": 20.0}}, ["rope_parameters", "rope_theta"]),
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
VALID = {"rope": {"head_dim": 64, "positions": [1]}, "sinusoidal": {"d_model": 8, "positions": [1]},
         "alibi": {"num_heads": 12, "query": [1], "key": [0]}, "t5-buckets": {"query": [0], "key": [1]}}


@pytest.mark.parametrize("family,patch,loc", BAD, ids=[f"{f}-{'.'.join(map(str, l))}-{i}" for i, (f, _, l) in enumerate(BAD)])
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
    r = http.post("/v1/alibi", json={"num_heads": 12, "query": {"start": 0, "stop": 4096}, "key": {"start": 0, "stop": 4096}})
    assert r.status_code == 413
    r = http.post("/v1/rope", content=b'{"head_dim": 64, "positions": [' + b"1," * 3_000_000 + b"1]}")
    assert r.status_code == 413 and "body" in r.json()["detail"]
    assert http.get("/healthz").status_code == 200  # and the worker is still there


def test_health_ready_tables_metrics_docs(http, server):
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").status_code == 200
    t = http.get("/v1/tables").json()
    assert t["backend"]["backend"] in ("numpy", "simd")
    names = {e["file"] for e in t["tables"]}
    assert names <= set(os.listdir("/dev/shm")) and len(names) >= 7
    http.post("/v1/rope", json={"head_dim": 64, "positions": [1]})
    http.post("/v1/rope", json={"head_dim": "x", "positions": [1]})
    text = http.get("/metrics").text
    assert re.search(r'posenc_request_duration_seconds_bucket\{route="/v1/rope",status="200",le="1e-05"\} \d+', text)
    assert re.search(r'posenc_request_duration_seconds_count\{route="/v1/rope",status="422"\} [1-9]', text)
    assert "posenc_workers 2" in text
    spec = http.get("/openapi.json").json()
    for fam in ("rope", "sinusoidal", "alibi", "t5-buckets"):
        body = spec["paths"][f"/v1/{fam}"]["post"]["requestBody"]["content"]["application/json"]
        assert body["examples"]
        for ex in body["examples"].values():   # every documented example really works
            r = http.post(f"/v1/{fam}", json=ex["value"], headers=BIN)
            assert r.status_code == 200, (fam, r.text)
    assert http.get("/docs").status_code == 200


def test_fastapi_routes_answer_like_the_hot_path(server, http):
    """The documented FastAPI routes (the app behind the raw-ASGI front) give the same bytes."""
    from posenc.service.app import create_app
    from posenc.engine.settings import Settings
    app = create_app(Settings(namespace=server.namespace)).app
    transport = httpx.ASGITransport(app=app)

    async def go():
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            out = []
            for family, body in REQUESTS[:6] + [("rope", {"head_dim": "x", "positions": [1]})]:
                for h in ({}, BIN):
                    r = await c.post(f"/v1/{family}", json=body, headers=h)
                    out.append((family, body, h, r.status_code, r.content))
            big = b'{"head_dim": 64, "positions": [' + b"1," * 3_000_000 + b"1]}"   # over the body limit
            r = await c.post("/v1/rope", content=big)
            out.append(("rope", big, {}, r.status_code, r.content))
            return out

    import asyncio
    for family, body, h, status, content in asyncio.run(go()):
        r = http.post(f"/v1/{family}", **({"content": body} if isinstance(body, bytes) else {"json": body}), headers=h)
        assert (status, content) == (r.status_code, r.content), (family, str(body)[:80])


# -- fuzz: no input gets a 500 or takes a worker down --------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4), max_leaves=12)
FIELD_NAMES = sorted({"head_dim", "rope_theta", "partial_rotary_factor", "max_position_embeddings", "rope_scaling",
                      "rope_parameters", "original_max_position_embeddings", "seq_len", "layout", "positions",
                      "dtype", "d_model", "base", "offset", "num_heads", "heads", "max_bias", "mode", "mask_future",
                      "query", "key", "bidirectional", "num_buckets", "max_distance", "factor", "rope_type"})
small_sel = st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=4) | st.fixed_dictionaries(
    {"start": st.integers(0, 300), "stop": st.integers(0, 600)})
mutation = st.dictionaries(st.sampled_from(FIELD_NAMES), json_values | small_sel | st.sampled_from(
    ["yarn", "llama3", "longrope", "dynamic", "linear", "default", "float16", "bfloat16", "interleaved", "fairseq",
     "symmetric"]), max_size=4)


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(family=st.sampled_from(sorted(VALID)), patch=mutation, drop=st.sets(st.sampled_from(FIELD_NAMES), max_size=2),
       fmt=st.sampled_from(["application/json", "application/x-safetensors", "text/plain"]))
def test_fuzz_never_500(http, family, patch, drop, fmt):
    body = {k: v for k, v in {**VALID[family], **patch}.items() if k not in drop}
    r = http.post(f"/v1/{family}", content=json.dumps(body), headers={"accept": fmt})
    assert r.status_code in (200, 406, 413, 422, 503), (r.status_code, body, r.text)
    if r.status_code == 422:
        assert r.json()["detail"][0]["loc"][0] == "body"


def test_fuzz_left_the_server_whole(http, server):
    assert server.proc.poll() is None
    assert http.get("/readyz").status_code == 200
    assert len(server.worker_pids()) == 2


# -- faults ------------------------------------------------------------------------------------------
def test_killed_worker_and_engine_are_survived(tmp_path):
    s = Server(CONFIG, workers=2, tmp_path=tmp_path)
    try:
        s.wait_ready()
        body = {"head_dim": 64, "positions": [5, 6]}
        ref = httpx.post(s.url + "/v1/rope", json=body, headers=BIN).content
        victim = s.worker_pids()[0]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 20
        ok = 0
        while time.monotonic() < deadline and ok < 20:
            try:
                r = httpx.post(s.url + "/v1/rope", json=body, headers=BIN, timeout=5)
                assert r.content == ref
                ok += 1
            except httpx.TransportError:
                time.sleep(0.1)
        assert ok == 20
        engine = s.engine_pid()
        gen = Client(namespace=s.namespace).wait_ready()["generation"]
        os.kill(engine, signal.SIGKILL)
        for _ in range(10):   # mapped tables keep answering while the engine is gone
            assert httpx.post(s.url + "/v1/rope", json=body, headers=BIN).content == ref
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = Client(namespace=s.namespace).manifest(force=True)
            if m and m["generation"] != gen and s.engine_pid() not in (None, engine):
                break
            time.sleep(0.2)
        else:
            pytest.fail("engine was not restarted: " + s.output())
        new = {"head_dim": 40, "positions": [3]}   # an on-demand build through the new engine
        assert httpx.post(s.url + "/v1/rope", json=new, timeout=60).status_code == 200
        assert httpx.post(s.url + "/v1/rope", json=body, headers=BIN).content == ref
        files = [n for n in os.listdir("/dev/shm") if n.startswith(s.namespace + ".seg.")]
        assert all(f".seg.{gen}." not in n for n in files), "the dead engine's segments were not reclaimed"
    finally:
        assert s.stop() == 0, s.output()
        assert leftovers(s.namespace) == []


def test_invalid_table_config_stops_serve_with_the_field_named(tmp_path):
    bad = {"tables": [{"family": "rope", "spec": {"head_dim": 64, "rope_scaling": {"rope_type": "yarn"}}}]}
    s = Server(bad, workers=1, tmp_path=tmp_path)
    rc = s.proc.wait(60)
    s.stop()
    assert rc == 2
    assert "tables.0.spec.rope_scaling.factor" in s.output()
    assert "Traceback" not in s.output()
    assert leftovers(s.namespace) == []


# -- the Python HTTP client and the README's curl examples ---------------------------------------
def test_python_clients_return_the_reference_arrays(server):
    import asyncio

    from posenc.service.client import AsyncPosencClient, PosencClient, PosencHTTPError
    body = {"head_dim": 64, "positions": [0, 9, 5000], "dtype": "bfloat16", "layout": "interleaved"}
    ref = compute("rope", body)
    with PosencClient(server.url) as c:
        out = c.rope(**body)
        raw = c.rope(raw=True, **body)
        with pytest.raises(PosencHTTPError) as e:
            c.alibi(num_heads=0, query=[1], key=[1])
        assert e.value.status == 422 and e.value.detail[0]["loc"] == ["body", "num_heads"]
        blocks = c.t5_buckets(query=[0, 1], key=[0, 1, 2])
    np.testing.assert_array_equal(out["cos"], bf16_bits_to_f32(ref["cos"]))
    assert raw["sin"].dtype == np.uint16 and raw["sin"].tobytes() == ref["sin"].tobytes()
    assert out["attention_scaling"] == 1.0
    assert blocks["buckets"].dtype == np.int32

    async def go():
        async with AsyncPosencClient(server.url) as c:
            return await asyncio.gather(c.sinusoidal(d_model=33, positions=[1, 2]),
                                        c.alibi(num_heads=12, query=[3], key=[0, 1, 2, 3]))
    sin_out, alibi_out = asyncio.run(go())
    assert sin_out["encoding"].tobytes() == compute("sinusoidal", {"d_model": 33, "positions": [1, 2]})["encoding"].tobytes()
    assert alibi_out["bias"].shape == (12, 1, 4)


def test_readme_curl_examples_work(server, tmp_path):
    readme = open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "README.md")).read()
    commands = [c.replace("\\\n", " ") for c in re.findall(r"^curl .*?(?<!\\)$", readme, re.M | re.S)]
    assert len(commands) >= 3
    import shlex
    import subprocess
    for cmd in commands:
        argv = [a.replace("localhost:8000", f"127.0.0.1:{server.port}") for a in shlex.split(cmd)]
        argv += ["--fail", "--output", str(tmp_path / "out.bin")] if "-o" not in argv else ["--fail"]
        argv = [str(tmp_path / a) if i and argv[i - 1] == "-o" else a for i, a in enumerate(argv)]
        r = subprocess.run(argv, capture_output=True, timeout=30)
        assert r.returncode == 0, (cmd, r.stderr)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_single_worker_shutdown_is_clean_when_serve_exits(tmp_path, sig):
    """With one worker uvicorn re-raises the caught signal on exit; posenc serve must still stop
    its engine and be clean by the time it has exited (not some time later)."""
    s = Server({"length": 512, "tables": [{"family": "rope", "spec": {"head_dim": 16}}]}, workers=1, tmp_path=tmp_path)
    s.wait_ready()
    engine = s.engine_pid()
    rc = s.stop(sig)
    assert rc in (0, 130), s.output()
    assert leftovers(s.namespace) == []
    assert not os.path.exists(f"/proc/{engine}") or "engine_main" not in open(f"/proc/{engine}/cmdline").read()


def test_attach_only_is_not_ready_until_an_engine_publishes(tmp_path):
    """`posenc serve --attach-only` (the Kubernetes pod's HTTP container): alive at once, 503 on
    /readyz while no engine serves its namespace, ready once one publishes its tables."""
    import subprocess
    import sys
    cfg = {"length": 256, "tables": [{"family": "sinusoidal", "spec": {"d_model": 16}}]}
    s = Server(cfg, workers=1, tmp_path=tmp_path, args=("--attach-only",))
    engine = None
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(s.url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, s.output()
            time.sleep(0.1)
        assert httpx.get(s.url + "/readyz").status_code == 503
        assert s.engine_pid() is None
        engine = subprocess.Popen([sys.executable, "-m", "posenc.engine.engine_main", "--namespace", s.namespace,
                                   "--tables", s.config_path], cwd=os.path.dirname(os.path.dirname(__file__)),
                                  stderr=subprocess.DEVNULL)
        s.wait_ready()
        body = {"d_model": 16, "positions": [3, 300]}
        r = httpx.post(s.url + "/v1/sinusoidal", json=body, headers=BIN)
        assert r.status_code == 200
        assert read_safetensors(r.content)[0]["encoding"].tobytes() == compute("sinusoidal", body)["encoding"].tobytes()
    finally:
        assert s.stop() == 0, s.output()
        if engine is not None:
            engine.send_signal(signal.SIGTERM)
            engine.wait(30)
        assert leftovers(s.namespace) == []


@pytest.mark.parametrize("spec", [
    {"head_dim": 64},
    {"head_dim": 64, "layout": "interleaved", "dtype": "bfloat16"},
    {"head_dim": 128, "rope_theta": 500000.0, "max_position_embeddings": 131072,
     "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192}, "dtype": "float16"},
], ids=["f32", "interleaved-bf16", "llama3-f16"])
def test_repeated_spec_answers_stay_exact(http, spec):
    """After the first answer for a spec, later bodies with the same spec bytes take the template
    shortcut (service/replay.py); whatever path answers, the bytes are the reference's."""
    from posenc.engine import formats
    rng = np.random.default_rng(11)
    bf16 = {"cos", "sin"} if spec.get("dtype") == "bfloat16" else frozenset()
    lists = [[5]] + [rng.integers(0, 2048, rng.integers(1, 70)).tolist() for _ in range(25)]
    lists += [[0, 0, 0], [2047], [2048], [5, 300000], list(range(64)), list(range(65))]
    for positions in lists:
        body = {"positions": positions, **spec} if len(positions) % 3 == 0 else {**spec, "positions": positions}
        r = http.post("/v1/rope", content=orjson_dumps(body), headers=BIN)
        assert r.status_code == 200, r.text
        want = formats.to_safetensors(compute("rope", body), bf16, {"family": "rope"})
        assert r.content == want, positions
    for bad in ([1.5], [True], [-1], [2**31], []):   # invalid lists in a known template: still 422
        r = http.post("/v1/rope", content=orjson_dumps({**spec, "positions": bad}), headers=BIN)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "positions"], (bad, r.text)


def orjson_dumps(obj) -> bytes:
    import orjson
    return orjson.dumps(obj)


# -- the C shortcut (service/_hot.c) against the full path and the float64 reference ---------------

needs_native = pytest.mark.skipif("__import__('posenc.service.replay').service.replay.shortcut_in_use('auto') != 'c'",
                                  reason="the C shortcut runs with service._hot built and the simd backend")
HOT_SPECS = [{"head_dim": 64}, {"head_dim": 64, "layout": "interleaved", "dtype": "bfloat16"}]
ACCEPT_HDRS = [(b"host", b"x"), (b"content-type", b"application/json"), (b"accept", b"application/x-safetensors")]


@needs_native
def test_template_shortcut_is_taken_and_exact(server):
    from posenc.engine import formats
    from posenc.service.handlers import Service
    from posenc.engine.settings import Settings
    svc = Service(Settings(namespace=server.namespace))
    accept = BIN["accept"]
    spec = {"head_dim": 64, "layout": "interleaved"}
    svc.hot("rope", b"{}", ACCEPT_HDRS)                                                        # first sight of the manifest
    assert svc.hot("rope", orjson_dumps({**spec, "positions": [5]}), ACCEPT_HDRS) is None   # nothing learnt yet
    svc.execute(svc.prepare("rope", orjson_dumps({**spec, "positions": [5]}), accept))
    for positions in ([7, 9], [0], list(range(64)), [2047, 3, 3]):
        body = {**spec, "positions": positions}
        got = svc.hot("rope", orjson_dumps(body), ACCEPT_HDRS)
        assert got == formats.to_safetensors(compute("rope", body), frozenset(), {"family": "rope"})
    for positions in ([2048], list(range(65)), [1.0], [True], [-2]):   # past the table, too many, bad
        assert svc.hot("rope", orjson_dumps({**spec, "positions": positions}), ACCEPT_HDRS) is None
    assert svc.hot("rope", orjson_dumps({**spec, "positions": [1]}), [(b"accept", b"application/json")]) is None
    assert svc.hot("rope", orjson_dumps({**spec, "dtype": "float16", "positions": [1]}), ACCEPT_HDRS) is None


@pytest.fixture(scope="module")
def learnt(server):
    """A Service in this process, attached to the test server's engine, that has answered each of
    HOT_SPECS once through the full path (so both shortcuts know their templates)."""
    from posenc.service.handlers import Service
    from posenc.engine.settings import Settings
    svc = Service(Settings(namespace=server.namespace))
    svc.hot("rope", b"{}", ACCEPT_HDRS)          # first sight of the manifest
    for spec in HOT_SPECS:
        svc.execute(svc.prepare("rope", orjson_dumps({**spec, "positions": [5]}), BIN["accept"]))
    return svc


_ODD = st.one_of(st.none(), st.integers(0, 2**70).map(str),
                 st.sampled_from(["-0", "-1", "1.0", "1e2", "01", "00", "true", "null", '"3"', "[1]", "",
                                  " 7", "7 ", "\t8\n", "\r9", "\x0b1", "1\u00a0"]))


@needs_native
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=st.sampled_from(HOT_SPECS), rows=st.lists(st.integers(0, 2050), min_size=0, max_size=70),
       odd=st.one_of(st.just(None), _ODD), at=st.integers(0, 70),
       seps=st.sampled_from([","] * 4 + [", ", " ,", ",\n", ",,"]),
       open_=st.sampled_from(["["] * 4 + ["[ ", "[\n"]), close=st.sampled_from(["]"] * 4 + [" ]", ",]"]),
       colon=st.sampled_from([":"] * 4 + [" : ", "::", ": ", ":\t"]), first=st.booleans())
def test_native_shortcut_answers_like_the_full_path(learnt, spec, rows, odd, at, seps, open_, close, colon, first):
    """Whatever the list's text, the C shortcut answers exactly as the full path and the float64
    reference do, or leaves the body to the full path."""
    from posenc.engine import formats
    tokens = [str(r) for r in rows]
    if odd is not None:
        tokens.insert(min(at, len(tokens)), odd)
    spec_text = orjson_dumps(spec)[1:-1]

    def text(lst: bytes) -> bytes:
        if first:
            return b'{"positions"' + colon.encode() + lst + b"," + spec_text + b"}"
        return b"{" + spec_text + b',"positions"' + colon.encode() + lst + b"}"
    if colon != "::":    # let the full path learn this body's template
        learnt.execute(learnt.prepare("rope", text(b"[5]"), BIN["accept"]))
    lst = (open_ + seps.join(tokens) + close).encode()
    body = text(lst)
    c = learnt.hot("rope", body, ACCEPT_HDRS)
    event(f"C: {'answered' if c is not None else 'full path'}")
    if c is not None:
        assert c == learnt.execute(learnt.prepare("rope", body, BIN["accept"]))[0]
        bf16 = {"cos", "sin"} if spec.get("dtype") == "bfloat16" else frozenset()
        want = formats.to_safetensors(compute("rope", json.loads(body)), bf16, {"family": "rope"})
        assert c == want


@needs_native
def test_native_shortcut_needs_a_learnt_accept_and_a_small_body(learnt):
    body = orjson_dumps({**HOT_SPECS[0], "positions": [1, 2]})
    assert learnt.hot("rope", body, ACCEPT_HDRS) is not None
    assert learnt.hot("rope", body, ACCEPT_HDRS[:2]) is None                                   # no Accept: JSON
    assert learnt.hot("rope", body, [(b"accept", b"application/json")]) is None
    odd = b"application/x-safetensors;q=0.9, application/json;q=0.1"
    assert learnt.hot("rope", body, [(b"accept", odd)]) is None                                # not negotiated yet
    learnt.prepare("rope", body, odd.decode())
    assert learnt.hot("rope", body, [(b"accept", odd)]) == learnt.hot("rope", body, ACCEPT_HDRS)
    spaced = body.replace(b"[1,2]", b"[1," + b" " * learnt.settings.max_body_bytes + b"2]")
    assert learnt.hot("rope", spaced, ACCEPT_HDRS) is None                                     # over the body limit
    assert learnt.hot("rope", orjson_dumps({**HOT_SPECS[0], "positions": [1, 2048]}), ACCEPT_HDRS) is None   # past the table


@needs_native
def test_native_template_checks_its_arrays():
    from posenc.service import _hot
    a = np.zeros((4, 8), np.float32)
    cols = list(range(8))

    def rows(arrays, colmap=cols, hf=lambda n: b"", **kw):
        args = dict(offset=0, max_rows=64, lists_only=True) | kw
        return _hot.RowsTemplate(arrays, colmap, args["offset"], args["max_rows"], args["lists_only"], hf, b"")
    with pytest.raises(ValueError, match="2-d"):
        rows((np.zeros(8, np.float32),))
    with pytest.raises(ValueError, match="2-d"):
        rows((np.zeros((4, 8), np.float64),))
    with pytest.raises(ValueError, match="differ"):
        rows((a, np.zeros((4, 8), np.float16)))
    with pytest.raises(ValueError, match="outside"):
        rows((a,), [0, 8])
    with pytest.raises(ValueError, match="max_rows"):
        rows((a,), max_rows=65)
    with pytest.raises(TypeError, match="callable"):
        rows((a,), hf=None)
    m = np.ones(3)
    with pytest.raises(ValueError, match="float64"):
        _hot.AlibiTemplate(m.astype(np.float32), False, False, lambda q, k: b"", b"\0" * 12, 10, 100)
    with pytest.raises(ValueError, match="float32 slopes"):
        _hot.AlibiTemplate(m, False, False, lambda q, k: b"", b"", 10, 100)
    with pytest.raises(ValueError, match="causal"):
        _hot.AlibiTemplate(m, True, True, lambda q, k: b"", b"\0" * 12, 10, 100)
    t = rows((a, a), hf=lambda n: 7)   # a header_for that returns no bytes
    acc = ([(b"accept", b"x")], {b"x": True})
    with pytest.raises(TypeError, match="bytes"):
        _hot.answer(b'{"positions":[1]}', *acc, {b'{"positions":\0}': t}, 100, "rope")
    with pytest.raises(TypeError, match="AlibiTemplate"):   # a template of another family
        _hot.answer(b'{"query":[1],"key":[1]}', *acc, {b'{"query":\0,"key":\0}': t}, 100, "alibi")


def test_front_answers_a_repeated_spec_without_the_full_path(server):
    """The ASGI front, driven directly: with the C shortcut a repeated spec never reaches
    Service.prepare, a body in two chunks still gets the same answer, and every answer (either
    way) is the reference's bytes."""
    import asyncio

    import orjson

    from posenc.engine import formats
    from posenc.service.app import create_app
    from posenc.engine.settings import Settings
    front = create_app(Settings(namespace=server.namespace))
    front.svc.attach_all()
    prepared = []
    real_prepare = front.svc.prepare
    front.svc.prepare = lambda *a: prepared.append(a) or real_prepare(*a)

    async def call(raw: bytes, chunks: int = 1):
        step = -(-len(raw) // chunks)
        msgs = [{"type": "http.request", "body": raw[i:i + step], "more_body": i + step < len(raw)}
                for i in range(0, len(raw), step)]
        sent = []

        async def receive():
            return msgs.pop(0)

        async def send(m):
            sent.append(m)
        scope = {"type": "http", "method": "POST", "path": "/v1/rope", "headers": ACCEPT_HDRS}
        await front(scope, receive, send)
        assert sent[0]["status"] == 200, sent
        return sent[1]["body"]

    spec = {"head_dim": 64, "layout": "interleaved"}
    for i, positions in enumerate([[5], [5], [9, 1], [2047], [3, 3, 3]]):
        body = {**spec, "positions": positions}
        got = asyncio.run(call(orjson_dumps(body), chunks=2 if i == 3 else 1))
        assert got == formats.to_safetensors(compute("rope", body), frozenset(), {"family": "rope"}), positions
    # with the C shortcut: the first sight of the spec and the body in two chunks (it takes
    # single-message bodies only); without it, every body takes the full path
    want = [[5], [2047]] if front.svc.shortcut == "c" else [[5], [5], [9, 1], [2047], [3, 3, 3]]
    assert [orjson.loads(a[1])["positions"] for a in prepared] == want


ALIBI_SPECS = [{"num_heads": 12}, {"num_heads": 12, "heads": [11, 0, 0], "mask_future": True},
               {"num_heads": 12, "mode": "symmetric", "max_bias": 8.0}, {"mask_future": False, "num_heads": 12}]


def _selection_text(draw, odd):
    if draw(st.booleans()):
        items = [str(v) for v in draw(st.lists(st.integers(0, 3000), min_size=1, max_size=12))]
        if odd is not None:
            items.insert(draw(st.integers(0, len(items))), odd)
        return "[" + draw(st.sampled_from([",", ", "])).join(items) + "]"
    start = draw(st.integers(0, 3000))
    parts = {"start": str(start), "stop": str(start + draw(st.integers(-2, 300)))}
    if draw(st.booleans()):
        parts["step"] = draw(st.sampled_from(["1", "3", "0", "null", "1.0", "-1"]))
    if odd is not None:
        parts[draw(st.sampled_from(["start", "stop", "stap"]))] = odd
    order = draw(st.permutations(list(parts)))
    sep = draw(st.sampled_from([":", " : "]))
    return "{" + ",".join(f'"{k}"{sep}{parts[k]}' for k in order) + "}"


@st.composite
def alibi_bodies(draw):
    spec = draw(st.sampled_from(ALIBI_SPECS))
    odd = draw(st.one_of(st.just(None), st.just(None), _ODD))
    which = draw(st.sampled_from(["query", "key"]))
    sel = {f: _selection_text(draw, odd if f == which else None) for f in ("query", "key")}
    fields = [(k, orjson_dumps(v).decode()) for k, v in spec.items()] + list(sel.items())
    order = draw(st.permutations(fields))
    return spec, "{" + ",".join(f'"{k}":{v}' for k, v in order) + "}"


def learn_then_answer(svc, family: str, body: bytes):
    """Let the full path learn ``body``'s template (its selections replaced by valid ones), then
    answer ``body`` both ways: (the C shortcut's bytes or None, the full path's bytes or None)."""
    from posenc.engine.errors import PosencError
    from posenc.service import replay
    cut = replay.spans(body, replay.FIELDS[family])
    if cut is not None:
        probe = bytearray(body)
        for a, b in sorted(cut, reverse=True):
            probe[a:b] = b"[1]"
        try:
            svc.execute(svc.prepare(family, bytes(probe), BIN["accept"]))
        except PosencError:   # the cut did not fall on the selections ('[[1],0]'): nothing to learn
            pass
    c = svc.hot(family, body, ACCEPT_HDRS)
    try:
        full = svc.execute(svc.prepare(family, body, BIN["accept"]))[0]
    except PosencError:
        full = None
    event(f"C: {'answered' if c is not None else 'full path'}, full path: {'answered' if full else 'refused'}")
    return c, full


@needs_native
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=alibi_bodies())
def test_native_alibi_answers_like_the_full_path(learnt, drawn):
    """A float32 ALiBi body whose spec has been answered before: the C shortcut gives the full
    path's bytes and the float64 reference's, or leaves the body to the full path."""
    from posenc.engine import formats
    spec, text = drawn
    body = text.encode()
    c, full = learn_then_answer(learnt, "alibi", body)
    if c is not None:
        assert c == full
        assert c == formats.to_safetensors(compute("alibi", json.loads(body)), frozenset(), {"family": "alibi"})


@needs_native
def test_native_alibi_keeps_the_limits(learnt):
    spec = {"num_heads": 12}
    learnt.execute(learnt.prepare("alibi", orjson_dumps({**spec, "query": [1], "key": [1]}), BIN["accept"]))
    small = orjson_dumps({**spec, "query": [4095], "key": {"start": 0, "stop": 4096}})
    assert learnt.hot("alibi", small, ACCEPT_HDRS) == learnt.execute(learnt.prepare("alibi", small, BIN["accept"]))[0]
    big = orjson_dumps({**spec, "query": [4095], "key": {"start": 0, "stop": 90000}})   # 4.3 MB: over HOT_BYTES
    assert learnt.hot("alibi", big, ACCEPT_HDRS) is None
    learnt.execute(learnt.prepare("alibi", orjson_dumps({**spec, "dtype": "float16", "query": [1], "key": [1]}),
                                  BIN["accept"]))
    f16 = orjson_dumps({**spec, "dtype": "float16", "query": [3], "key": [1, 2]})
    assert learnt.hot("alibi", f16, ACCEPT_HDRS) is None                                 # float32 only
    from posenc.service.handlers import Service
    from posenc.engine.settings import Settings
    tight = Service(Settings(namespace=learnt.settings.namespace, max_positions=100))
    tight.hot("alibi", b"{}", ACCEPT_HDRS)
    tight.execute(tight.prepare("alibi", orjson_dumps({**spec, "query": [1], "key": [1]}), BIN["accept"]))
    assert tight.hot("alibi", orjson_dumps({**spec, "query": [9], "key": {"start": 0, "stop": 100}}),
                     ACCEPT_HDRS) is not None
    assert tight.hot("alibi", orjson_dumps({**spec, "query": [9], "key": {"start": 0, "stop": 101}}),
                     ACCEPT_HDRS) is None                                               # max_positions: the full path's 413


@pytest.mark.parametrize("family, first, second, want", [
    ("rope", b'{"head_dim":64,"positions":[5],"positions":[5]}', b'{"head_dim":64,"positions":[7],"positions":[5]}',
     {"head_dim": 64, "positions": [5]}),
    ("rope", b'{"head_dim":64,"positions":[5],"\\u0070ositions":[5]}',
     b'{"head_dim":64,"positions":[7],"\\u0070ositions":[5]}', {"head_dim": 64, "positions": [5]}),
    ("alibi", b'{"num_heads":12,"query":[5],"key":[1],"query":[5]}', b'{"num_heads":12,"query":[9],"key":[1],"query":[5]}',
     {"num_heads": 12, "query": [5], "key": [1]}),
])
def test_duplicate_keys_never_reach_a_shortcut(http, family, first, second, want):
    """JSON's last duplicate key wins: a body whose first "positions" is not the one that counts
    must not teach either shortcut a template that answers from the first."""
    from posenc.engine import formats
    for body in (first, second):
        r = http.post(f"/v1/{family}", content=body, headers=BIN)
        assert r.status_code == 200, r.text
        assert r.content == formats.to_safetensors(compute(family, want), frozenset(), {"family": family})


@needs_native
@pytest.mark.parametrize("spec", ALIBI_SPECS[:3], ids=["all-heads", "heads-masked", "symmetric"])
def test_native_alibi_decode_blocks_at_the_table_edge(learnt, spec):
    """Decode blocks (consecutive keys up to the query) are copied from the engine's distance
    table while every distance is inside it (2048 here) and computed past it: both exact."""
    from posenc.engine import formats
    learnt.execute(learnt.prepare("alibi", orjson_dumps({**spec, "query": [1], "key": [1]}), BIN["accept"]))
    for q in (0, 5, 2046, 2047, 2048, 2049, 70000):
        for key in ({"start": 0, "stop": q + 1}, {"start": max(0, q - 5), "stop": q + 1},
                    {"start": 0, "stop": q + 2}, {"start": 0, "stop": q + 1, "step": 2}):
            if key["stop"] - key["start"] > 4096:
                continue
            for query in ([q], [q, q], {"start": q, "stop": q + 2}):
                body = orjson_dumps({**spec, "query": query, "key": key})
                got = learnt.hot("alibi", body, ACCEPT_HDRS)
                want = formats.to_safetensors(compute("alibi", json.loads(body)), frozenset(), {"family": "alibi"})
                assert got == want, body


@needs_native
def test_a_failing_shortcut_falls_back_to_the_full_path(server):
    """Whatever goes wrong in the C shortcut, the request is still answered, exactly."""
    import asyncio

    from posenc.engine import formats
    from posenc.service.app import create_app
    from posenc.engine.settings import Settings
    front = create_app(Settings(namespace=server.namespace))
    front.svc.attach_all()
    front.svc.hot = lambda *a: 1 / 0
    body = {"head_dim": 64, "positions": [3, 1]}
    sent = []

    async def receive():
        return {"type": "http.request", "body": orjson_dumps(body), "more_body": False}

    async def send(m):
        sent.append(m)
    for _ in range(2):
        sent.clear()
        asyncio.run(front({"type": "http", "method": "POST", "path": "/v1/rope", "headers": ACCEPT_HDRS},
                          receive, send))
        assert sent[0]["status"] == 200
        assert sent[1]["body"] == formats.to_safetensors(compute("rope", body), frozenset(), {"family": "rope"})


def test_concurrent_decode_traffic_is_exact(server):
    """Decode-like traffic from many threads at once over HTTP, on both workers: RoPE rows and
    ALiBi blocks for a growing position t, each answer the float64 reference's bytes (most are
    answered by the template shortcut after each worker's first)."""
    from posenc.engine import formats
    rope = {"head_dim": 128, "rope_theta": 500000.0, "max_position_embeddings": 131072,
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192}}
    alibi = {"num_heads": 12}

    def one(t: int):
        if t % 2:
            family, body = "rope", {**rope, "positions": [t, t // 2]}
        else:
            family, body = "alibi", {**alibi, "query": [t], "key": {"start": 0, "stop": t + 1}}
        with httpx.Client(base_url=server.url, timeout=30) as c:
            r = c.post(f"/v1/{family}", content=orjson_dumps(body), headers=BIN)
        assert r.status_code == 200, r.text
        want = formats.to_safetensors(compute(family, body), frozenset(), {"family": family})
        return r.content == want, r.headers["x-posenc-worker"]
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(one, range(1, 2400, 7)))
    assert all(ok for ok, _ in results)
    assert len({w for _, w in results}) == 2


SINUSOIDAL_SPECS = [{"d_model": 33}, {"d_model": 33, "layout": "concat", "offset": 2, "dtype": "bfloat16"},
                    {"d_model": 33, "layout": "fairseq", "dtype": "float16"}, {"d_model": 32, "layout": "fairseq"}]


@st.composite
def sinusoidal_bodies(draw):
    spec = draw(st.sampled_from(SINUSOIDAL_SPECS))
    odd = draw(st.one_of(st.just(None), st.just(None), _ODD))
    if draw(st.booleans()):
        items = [str(v) for v in draw(st.lists(st.integers(0, 2100), min_size=1, max_size=70))]
        if odd is not None:
            items.insert(draw(st.integers(0, len(items))), odd)
        sel = "[" + ",".join(items) + "]"
    else:
        start = draw(st.integers(0, 2100))
        sel = '{"start":%d,"stop":%d%s}' % (start, start + draw(st.integers(-1, 70)),
                                             draw(st.sampled_from(["", ',"step":3', ',"step":null'])))
    fields = [(k, orjson_dumps(v).decode()) for k, v in spec.items()] + [("positions", sel)]
    return "{" + ",".join(f'"{k}":{v}' for k, v in draw(st.permutations(fields))) + "}"


@needs_native
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=sinusoidal_bodies())
def test_native_sinusoidal_answers_like_the_full_path(learnt, text):
    """Sinusoidal rows from a known spec: the C shortcut's bytes are the full path's and the
    float64 reference's (every layout, offsets, bfloat16), or the body takes the full path."""
    from posenc.engine import formats
    body = text.encode()
    c, full = learn_then_answer(learnt, "sinusoidal", body)
    if c is not None:
        req = json.loads(body)
        bf16 = {"encoding"} if req.get("dtype") == "bfloat16" else frozenset()
        assert c == full
        assert c == formats.to_safetensors(compute("sinusoidal", req), bf16, {"family": "sinusoidal"})
