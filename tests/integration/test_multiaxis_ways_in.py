"""Multi-axis RoPE (position_ids) and sinusoidal-grid through every way in, against a real
`posenc serve`: /v1 JSON and safetensors, KServe v2 over REST and gRPC with the real tritonclient
(single requests and [B, k, N] / [B, N] batches), ``posenc compute``, and the co-located Client
(``table`` and ``lookup``). Every answer equals the exact computation (posenc.engine.answer.pipeline, held
to float64 math, transformers and diffusers by tests/engine/test_rope_multiaxis.py and
test_sinusoidal_grid.py), bit for bit."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import orjson
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from posenc.engine.answer.pipeline import compute
from posenc.engine.reader.client import Client
from tests.independent import assert_answer
from tests.integration.kserve_cases import bits, v1_answer
from tests.integration.test_metrics_paths import wait_counts_written
from tests.procs import wait_for

pytestmark = pytest.mark.slow
TRANSPORTS = {"rest": httpclient, "grpc": grpcclient}

QWEN = {"head_dim": 128, "rope_theta": 1e6, "mrope_section": [16, 24, 24], "dtype": "bfloat16"}
QWEN3 = {"head_dim": 128, "rope_theta": 5e6, "mrope_section": [24, 20, 20], "mrope_interleaved": True}
FLUX = {"head_dim": 128, "axes_dim": [16, 56, 56], "layout": "interleaved", "dtype": "float16"}
# ERNIE-4.5-VL's dealing (h and w in pairs, then t) and GLM-4 MoE's odd rotary width (21)
ERNIE = {"head_dim": 128, "rope_theta": 5e5, "layout": "interleaved", "mrope_axes": [1, 2] * 22 + [0] * 20}
ODD = {"head_dim": 128, "partial_rotary_factor": 21 / 128, "dtype": "bfloat16"}
GRID = {"embed_dim": 64, "grid_size": [6, 9], "base_size": 4, "interpolation_scale": 1.5, "extra_tokens": 1}
GRID3 = {
    "embed_dim": 64,
    "grid_size": [3, 4],
    "temporal_size": 2,
    "interpolation_scale": 1.875,
    "dtype": "bfloat16",
}


def ids(rng, k=3, n=7, hi=5000):
    out = rng.integers(0, hi, (k, n))
    out[:, :2] = out[0, :2]  # two text tokens: every axis at one position
    return out


def _same(got: dict, want: dict):
    for name, ref in want.items():
        if name == "spec":
            continue
        g = np.atleast_1d(np.asarray(got[name]))
        ref = np.atleast_1d(np.asarray(ref))
        assert g.dtype == ref.dtype and g.shape == ref.shape, (name, g.dtype, g.shape, ref.dtype, ref.shape)
        assert np.array_equal(g.view(np.uint8), np.ascontiguousarray(ref).view(np.uint8)), name


@pytest.mark.parametrize(
    "family,spec,sel",
    [
        ("rope", QWEN, "ids"),
        ("rope", QWEN3, "ids"),
        ("rope", FLUX, "ids"),
        ("rope", ERNIE, "ids"),
        ("rope", QWEN, "positions"),
        ("rope", ODD, "positions"),
        ("sinusoidal-grid", GRID, None),
        ("sinusoidal-grid", GRID3, "rows"),
    ],
)
def test_v1_json_and_binary(clients, family, spec, sel, rng):
    body = dict(spec)
    if sel == "ids":
        body["position_ids"] = ids(rng).tolist()
    elif sel == "positions":
        body["positions"] = [0, 5, 70000]
    elif sel == "rows":
        body["positions"] = rng.integers(0, 24, 9).tolist()
    want = compute(family, body)
    v1 = v1_answer(clients["http"], family, body)
    assert_answer(family, body, v1, what=f"v1 {family}")  # the float64 reference of the docs' formulas
    _same(v1, want)
    r = clients["http"].post(f"/v1/{family}", content=orjson.dumps({**body, "dtype": "float32"}))
    assert r.status_code == 200, r.text
    exact = compute(family, {**body, "dtype": "float32"})
    for name, v in r.json().items():
        np.testing.assert_array_equal(
            np.asarray(v, dtype=np.float32), np.asarray(exact[name], dtype=np.float32)
        )


@pytest.mark.parametrize(
    "family,spec",
    [("rope", QWEN), ("rope", FLUX), ("rope", ERNIE), ("sinusoidal-grid", GRID), ("sinusoidal-grid", GRID3)],
    ids=["qwen", "flux", "ernie", "grid", "grid3"],
)
def test_v1_repeated_binary_requests(clients, v2server, family, spec, rng):
    """Repeats of one spec (what the template shortcut learns from: small grids are answered by
    it), with position_ids and, for mrope, plain positions in turn: every answer is the exact one."""
    for i in range(8):
        if family == "sinusoidal-grid":
            body = {**spec, "positions": rng.integers(0, 24, 1 + i).tolist()}
        elif i % 2 and ("mrope_section" in spec or "mrope_axes" in spec):
            body = {**spec, "positions": rng.integers(0, 9000, 3).tolist()}
        else:
            body = {**spec, "position_ids": ids(rng, n=3).tolist()}
        _same(v1_answer(clients["http"], family, body), compute(family, body))
    shortcut = clients["http"].get("/v1/tables").json()["shortcut"] == "c"  # off with the numpy backend
    if shortcut:  # not vacuous: once the table is built, the shortcut answers grid rows and position_ids

        def answered() -> float:
            line = next(
                (
                    x
                    for x in clients["http"].get("/metrics").text.splitlines()
                    if x.startswith("posenc_hot_path_total")
                    and f'route="/v1/{family}"' in x
                    and "shortcut" in x
                ),
                "0 0",
            )
            return float(line.split()[-1])

        wait_counts_written(v2server.namespace)  # every worker's counts so far reach the scrape
        before = answered()

        def shortcut_answers() -> bool:
            if family == "sinusoidal-grid":
                body = {**spec, "positions": rng.integers(0, 24, 3).tolist()}
            else:  # position_ids only, inside the table and past it (hot_axes.c)
                body = {**spec, "position_ids": ids(rng, n=2, hi=int(rng.choice([4096, 40000]))).tolist()}
            _same(v1_answer(clients["http"], family, body), compute(family, body))
            return answered() > before

        wait_for(shortcut_answers, 30, 0.05, f"a {family} request answered by the template shortcut")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_v2_repeated_grid_requests(clients, transport, rng):
    """The v2 shortcut learns a grid row template on a repeated request: still the exact rows."""
    spec = {k: v for k, v in GRID.items()}
    for _ in range(6):
        rows = rng.integers(0, 55, 4)
        r = _infer(transport, clients[transport], "sinusoidal-grid", spec, {"positions": rows})
        want = compute("sinusoidal-grid", {**spec, "positions": rows.tolist()})["encoding"]
        assert np.array_equal(bits(r.as_numpy("encoding")), want)


@pytest.mark.parametrize(
    "body,loc",
    [
        ({**QWEN, "position_ids": [[0, 1], [0], [0, 1]]}, ["body", "position_ids", 1]),
        ({**FLUX, "positions": [0]}, ["body", "position_ids"]),
        ({"head_dim": 128, "mrope_section": [16, 24, 23], "positions": [0]}, ["body", "mrope_section"]),
    ],
)
def test_v1_refusals_name_the_field(clients, body, loc):
    r = clients["http"].post("/v1/rope", content=orjson.dumps(body))
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == loc


def _infer(transport, client, model, spec, inputs):
    mod = TRANSPORTS[transport]
    ins = []
    for name, a in inputs.items():
        i = mod.InferInput(name, list(a.shape), "INT64")
        i.set_data_from_numpy(a.astype(np.int64))
        ins.append(i)
    return client.infer(model, ins, parameters={"spec": json.dumps(spec)})


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("spec", [QWEN, QWEN3, FLUX, ERNIE], ids=["qwen2.5", "qwen3", "flux", "ernie"])
def test_v2_position_ids_single_and_batched(clients, transport, spec, rng):
    one = ids(rng)
    r = _infer(transport, clients[transport], "rope", spec, {"position_ids": one})
    want = compute("rope", {**spec, "position_ids": one.tolist()})
    for name in ("cos", "sin", "inv_freq"):
        assert np.array_equal(bits(r.as_numpy(name)), want[name]), name
    batch = np.stack([ids(rng) for _ in range(3)])  # [B, k, N]
    r = _infer(transport, clients[transport], "rope", spec, {"position_ids": batch})
    for b in range(3):
        want = compute("rope", {**spec, "position_ids": batch[b].tolist()})
        for name in ("cos", "sin"):
            assert np.array_equal(bits(r.as_numpy(name))[b], want[name]), (name, b)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("spec", [GRID, GRID3], ids=["2d", "3d"])
def test_v2_grid_all_rows_and_batches(clients, transport, spec, rng):
    r = clients[transport].infer("sinusoidal-grid", [], parameters={"spec": json.dumps(spec)})
    assert np.array_equal(bits(r.as_numpy("encoding")), compute("sinusoidal-grid", spec)["encoding"])
    rows = rng.integers(0, 24, (2, 5))
    r = _infer(transport, clients[transport], "sinusoidal-grid", spec, {"positions": rows})
    for b in range(2):
        want = compute("sinusoidal-grid", {**spec, "positions": rows[b].tolist()})["encoding"]
        assert np.array_equal(bits(r.as_numpy("encoding"))[b], want)
    with pytest.raises(Exception, match=r"inputs\[0\]\.data\[1\]: row 1000000 is past"):
        _infer(transport, clients[transport], "sinusoidal-grid", spec, {"positions": np.array([0, 10**6])})


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_v2_ragged_or_wrong_axes_are_refused(clients, transport):
    with pytest.raises(Exception, match=r"inputs\[0\]\.data: must have one row per axis: 3, got 2"):
        _infer(transport, clients[transport], "rope", QWEN, {"position_ids": np.zeros((2, 4), np.int64)})


def test_cli_compute(tmp_path, rng):
    for family, body in (("rope", {**QWEN, "position_ids": ids(rng).tolist()}), ("sinusoidal-grid", GRID3)):
        out = tmp_path / f"{family}.npz"
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "posenc",
                "compute",
                family,
                "--spec",
                json.dumps(body),
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0, p.stderr
        _same(dict(np.load(out)), compute(family, body))
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "posenc",
            "compute",
            "rope",
            "--spec",
            json.dumps({**FLUX, "positions": [0]}),
            "--out",
            str(tmp_path / "x.npz"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "position_ids" in p.stderr and "Traceback" not in p.stderr


def test_client_table_and_lookup(v2server, rng):
    c = Client(namespace=v2server.namespace)
    if True:
        for family, spec in (
            ("rope", {k: v for k, v in FLUX.items() if k != "dtype"}),
            ("sinusoidal-grid", {k: v for k, v in GRID.items()}),
        ):
            view = c.table(family, spec)
            assert view.family == family
        for spec in (QWEN, ERNIE):
            body = {**spec, "position_ids": ids(rng).tolist()}
            _same(c.lookup("rope", body), compute("rope", body))
        body = {**ODD, "positions": [0, 5, 70000]}
        _same(c.lookup("rope", body), compute("rope", body))
        body = {**GRID, "positions": [0, 1, 54]}
        _same(c.lookup("sinusoidal-grid", body), compute("sinusoidal-grid", body))


def test_torch_module_reads_the_shared_table(v2server, rng):
    """posenc.torch.RotaryEmbedding for a Qwen2-VL text config, with an engine running: the rows
    come from the shared table and equal those of a module that builds its own."""
    import torch
    from transformers import Qwen2VLTextConfig

    from posenc.torch import RotaryEmbedding
    from tests.procs import unique_namespace

    config = Qwen2VLTextConfig(
        hidden_size=256,
        num_attention_heads=2,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
    )
    shared = RotaryEmbedding(config, client=Client(namespace=v2server.namespace))
    local = RotaryEmbedding(config, client=Client(namespace=unique_namespace()))
    pos = torch.from_numpy(np.stack([ids(rng, n=20, hi=9000) for _ in range(2)], axis=1))  # [3, B, N]
    x = torch.zeros(1, dtype=torch.bfloat16)
    for a, b in zip(shared(x, pos), local(x, pos)):
        assert a.dtype == torch.bfloat16 and torch.equal(a, b)
    assert shared.source == "shared" and local.source == "local"


def test_readme_requests(clients):
    """The README's mrope and grid curl lines, as written, answer the exact values."""
    import re

    from tests.procs import REPO

    text = (REPO / "README.md").read_text()
    found = {}
    for route, body in re.findall(r"curl -s localhost:8000/v1/([\w-]+) -d '(.*?)'", text, re.S):
        body = json.loads(body)
        if "position_ids" in body or route == "sinusoidal-grid":
            found[route] = body
            r = clients["http"].post(f"/v1/{route}", content=orjson.dumps(body))
            assert r.status_code == 200, r.text
            want = compute(route, body)
            for name, v in r.json().items():
                np.testing.assert_array_equal(np.asarray(v, np.float32), np.asarray(want[name], np.float32))
    assert set(found) == {"rope", "sinusoidal-grid"}


def test_on_demand_tables_are_built_and_served(clients, v2server, rng):
    """A grid and a Flux spec no config holds: the engine builds their tables on demand (the
    axes_dim one keyed by its frequencies, the mrope one is the plain table), and later answers,
    served from them, are still exact."""
    grid = {"embed_dim": 32, "grid_size": [5, 11], "base_size": 3, "interpolation_scale": 0.5}
    flux = {"head_dim": 64, "axes_dim": [8, 28, 28], "rope_theta": 2000.0}
    bodies = [
        ("sinusoidal-grid", {**grid, "positions": [0, 54]}),
        ("rope", {**flux, "position_ids": ids(rng, hi=3000).tolist()}),
    ]
    for family, body in bodies:
        assert clients["http"].post(f"/v1/{family}", content=orjson.dumps(body)).status_code == 200

    def built():
        tables = clients["http"].get("/v1/tables").json()
        text = json.dumps(tables)
        return "sinusoidal-grid" in text and ("[8,28,28]" in text or "[8, 28, 28]" in text)

    wait_for(built, 30, 0.1, "on-demand grid and axes tables")
    for family, body in bodies:
        _same(v1_answer(clients["http"], family, body), compute(family, body))
