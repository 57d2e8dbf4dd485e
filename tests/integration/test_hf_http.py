"""hf_config and named tables over HTTP: a real ``posenc serve`` whose table config names tables
by model config (an object and a config.json path), and the co-located Client on its engine."""

from __future__ import annotations

import io
import json

import httpx
import numpy as np
import pytest

from posenc.engine.answer import pipeline
from posenc.engine.answer.pipeline import compute
from posenc.engine.core.encode import encode
from posenc.engine.core.formats import read_safetensors
from posenc.engine.reader.client import Client
from tests.engine.hf_published import ALIBI, ROPE
from tests.procs import serve_for_module

LLAMA = ROPE["llama-3.1-8b"]
BIN = {"accept": "application/x-safetensors"}


@pytest.fixture(scope="module")
def server(tmp_path_factory, request):
    tmp = tmp_path_factory.mktemp("hfserve")
    (tmp / "llama.json").write_text(json.dumps(LLAMA))
    config = {
        "length": 4096,
        "tables": [
            {"name": "llama", "family": "rope", "hf_config": "llama.json", "dtypes": ["float32", "bfloat16"]},
            {"name": "mpt", "family": "alibi", "hf_config": ALIBI["mpt-7b"]},
            {
                "name": "gptj-like",
                "family": "rope",
                "spec": {"head_dim": 256, "partial_rotary_factor": 0.25, "layout": "interleaved"},
            },
        ],
    }
    return serve_for_module(tmp, request, config)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


def _same(got, want):
    for k, v in want.items():
        if k == "spec":
            assert got[k] == v
        elif isinstance(v, float):
            assert float(got[k]) == v
        else:
            assert np.asarray(got[k]).tobytes() == v.tobytes(), k


def test_hf_config_body_in_json_and_npz(http):
    body = {"hf_config": LLAMA, "positions": [0, 1, 4096, 200000]}
    r = http.post("/v1/rope", json=body)
    assert r.status_code == 200, r.text
    got, want = r.json(), compute("rope", body)
    assert got["spec"] == want["spec"] and got["spec"]["rope_scaling"]["rope_type"] == "llama3"
    np.testing.assert_array_equal(np.asarray(got["cos"], dtype=np.float32), want["cos"])
    r = http.post("/v1/rope", json=body, headers={"accept": "application/x-npz"})
    z = np.load(io.BytesIO(r.content))
    assert json.loads(str(z["spec"])) == want["spec"]
    assert z["sin"].tobytes() == want["sin"].tobytes()


def test_named_tables_and_their_spec(http):
    t = http.get("/v1/tables").json()
    assert {"llama", "mpt", "gptj-like"} <= {e["name"] for e in t["tables"]}
    r = http.post("/v1/rope", json={"table": "gptj-like", "positions": [0, 3, 5000]}, headers=BIN)
    arrays, _ = read_safetensors(r.content)
    want = compute(
        "rope",
        {"head_dim": 256, "partial_rotary_factor": 0.25, "layout": "interleaved", "positions": [0, 3, 5000]},
    )
    assert arrays["cos"].tobytes() == want["cos"].tobytes()  # the layout survives the name
    r = http.post("/v1/alibi", json={"table": "mpt", "query": [9], "key": {"start": 0, "stop": 10}})
    assert r.json()["spec"]["num_heads"] == 32


def test_repeated_bodies_answer_the_full_paths_bytes(http, server):
    """Decode-style traffic (same table or config, new positions): every answer, whichever path
    served it, is byte for byte the full path's, spec metadata included."""
    named = Client(namespace=server.namespace).named_tables()
    for body0 in ({"table": "llama", "dtype": "bfloat16"}, {"hf_config": LLAMA}):
        for p in (5, 6, 7, 4000, 4095):
            body = {**body0, "positions": [p, p + 1]}
            r = http.post("/v1/rope", content=json.dumps(body).encode(), headers=BIN)
            assert r.status_code == 200, r.text
            req = pipeline.parse("rope", body, named=named)
            assert r.content == encode(req.family, pipeline.arrays(req), req.dtype, "safetensors")[0]
            n = int.from_bytes(r.content[:8], "little")
            assert json.loads(json.loads(r.content[8 : 8 + n])["__metadata__"]["spec"]) == req.shown


@pytest.mark.parametrize(
    "body,loc",
    [
        ({"table": "nope", "positions": [1]}, ["body", "table"]),
        ({"table": "mpt", "positions": [1]}, ["body", "table"]),
        ({"hf_config": ALIBI["bloom-560m"], "positions": [1]}, ["body", "hf_config", "model_type"]),
        ({"hf_config": LLAMA, "head_dim": 128, "positions": [1]}, ["body", "head_dim"]),
        (
            {
                "hf_config": {**LLAMA, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
                "positions": [1],
            },
            ["body", "hf_config", "rope_scaling", "low_freq_factor"],
        ),
    ],
)
def test_422s_name_the_field(http, body, loc):
    r = http.post("/v1/rope", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == loc
    if body.get("table") == "nope":
        assert "llama" in r.json()["detail"][0]["msg"] and "gptj-like" in r.json()["detail"][0]["msg"]


def test_colocated_client_by_name_and_by_config(server):
    c = Client(namespace=server.namespace)
    c.wait_ready()
    got = c.lookup("rope", {"table": "llama", "positions": [3, 9000]})
    _same(got, compute("rope", {"hf_config": LLAMA, "positions": [3, 9000]}))
    pinned = {e["digest"] for e in c.tables() if e["name"] == "llama"}
    view = c.table("rope", {"hf_config": LLAMA})  # the configured table, not a new one
    assert view.segment.entry["name"] == "llama" and view.segment.entry["pinned"]
    assert c.table("rope", {"table": "llama"}, dtype="bfloat16").dtype == "bfloat16"
    assert len(pinned) == 2


@pytest.mark.skipif(
    "__import__('posenc.service.shortcut.templates').service.shortcut.templates.shortcut_in_use('auto') != 'c'",
    reason="the C template shortcut runs with service._hot built and the simd backend",
)
def test_template_shortcut_writes_the_spec_metadata(server):
    """In-process: once the full path has answered a table or hf_config body twice (a key is learnt
    at its second answer: service/shortcut/store.py), the C shortcut answers the next ones with the
    same bytes, spec metadata included."""
    from posenc.service.core.settings import Settings
    from posenc.service.front.service import Service

    hdrs = [(b"host", b"x"), (b"accept", b"application/x-safetensors")]
    svc = Service(Settings(namespace=server.namespace))
    svc.client.wait_ready()
    svc.hot("rope", b"{}", hdrs)  # first sight of the manifest
    for body0 in ({"table": "llama", "dtype": "bfloat16"}, {"hf_config": LLAMA}):
        raw = json.dumps({**body0, "positions": [5]}).encode()
        full = svc.execute(svc.prepare("rope", raw, "application/x-safetensors"))[0]
        assert svc.hot("rope", raw, hdrs) is None  # answered once: seen, not learnt
        assert svc.execute(svc.prepare("rope", raw, "application/x-safetensors"))[0] == full
        assert svc.hot("rope", raw, hdrs) == full
        raw = json.dumps({**body0, "positions": [9, 100]}).encode()
        got = svc.hot("rope", raw, hdrs)
        assert (
            got is not None and got == svc.execute(svc.prepare("rope", raw, "application/x-safetensors"))[0]
        )


def test_readme_config_json_commands_work(server, tmp_path):
    """The README's shell lines that send a whole config.json, run as written (bash, jq, curl)."""
    import pathlib
    import re
    import shutil
    import subprocess

    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    lines = [ln for ln in readme.splitlines() if "config.json" in ln and "| curl" in ln]
    assert len(lines) >= 2
    (tmp_path / "Llama-3.1-8B").mkdir()
    (tmp_path / "Llama-3.1-8B" / "config.json").write_text(json.dumps(LLAMA, indent=2))
    want = compute("rope", {"hf_config": LLAMA, "positions": [0, 1, 4096]})
    for line in lines:
        if line.startswith("jq"):
            assert shutil.which("jq"), "jq is not installed: `apt-get install -y jq` (.ci/run installs it)"
        cmd = re.sub(r"localhost:8000", f"127.0.0.1:{server.port}", line) + " --fail"
        r = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, capture_output=True, timeout=30)
        assert r.returncode == 0, (line, r.stderr)
        got = json.loads(r.stdout)
        assert (
            got["spec"] == want["spec"]
            and np.asarray(got["cos"], np.float32).tobytes() == want["cos"].tobytes()
        )
