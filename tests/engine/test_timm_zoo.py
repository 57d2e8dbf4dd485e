"""The timm zoo: every rotary ViT of the pinned timm that posenc reads (engine/models/timm_zoo.json,
written by tests/tools/timm_zoo.py from timm's registry), against the model's own rope module.

For each model, the rope module is built from the arguments its registered model function gives it
(the class timm names, with ``feat_shape`` the grid asked for, as ``set_input_size`` rebuilds it),
in eval mode, and its ``get_embed`` (``[sin | cos]``; Gemma4's ``forward`` on its (x, y) patch
coordinates) is what posenc must give for a ``{"height", "width"}`` grid named with the model's
config: the default grid, a non-square one and a thin one, through ``compute`` and over HTTP (a real
``posenc serve``: binary and JSON answers, KServe v2 and ``Client.lookup`` over shared memory). The
tolerance is the transformers zoo's (hf_zoo.tolerance), at each token's largest angle as timm's own
grid and frequencies give it. The models posenc does not read are listed here with the reason.
"""

from __future__ import annotations

import json
import math
import warnings

import httpx
import numpy as np
import pytest
import torch

from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from posenc.engine.core.formats import read_safetensors
from posenc.engine.models import registry, timm_vit
from tests.numeric import assert_close
from tests.procs import serve_for_module
from tests.tools import hf_zoo, timm_zoo
from tests.waits import wait_for

warnings.filterwarnings("ignore", module="timm")
import timm  # noqa: E402
import timm.layers.pos_embed_sincos as pes  # noqa: E402

MODELS = timm_vit.ZOO["models"]
CLASSES = timm_zoo.rope_classes()
LEARNED = timm_zoo.WHY["RotaryEmbeddingMixed"]
# the rotary models of timm 1.0.31 posenc does not read, and why
NOT_READ = {
    f"vit_{size}_patch16_rope_mixed{ape}_224": LEARNED
    for size in ("small", "base", "large")
    for ape in ("", "_ape")
}


def config(name: str) -> dict:
    """A timm config.json as the hub publishes one (the keys beside ``architecture`` say nothing of rope)."""
    return {"architecture": name, "num_classes": 1000, "global_pool": "avg", "pretrained_cfg": {"tag": "x"}}


def grids(name: str) -> list:
    shape = MODELS[name]["args"].get("feat_shape") or [14, 14]
    return [tuple(shape), (7, 11), (3, 1)]


def timm_answer(name: str, h: int, w: int):
    """(cos, sin, each token's largest |angle|) as timm's own module hands them to attention."""
    row = MODELS[name]
    args = dict(row["args"])
    klass = CLASSES[row["module"]]
    if row["module"] == "Gemma4RotaryEmbedding2D":
        m = klass(**args).eval()
        rows, cols = np.indices((h, w)).reshape(2, -1)
        xy = torch.from_numpy(np.stack([cols, rows], -1)[None])  # Gemma4's (x, y) patch coordinates
        cos, sin = m(torch.zeros(1), xy)
        angle = xy[0].double().abs().amax(-1).numpy() * float(m.inv_freq.max())
        return cos[0].double().numpy(), sin[0].double().numpy(), angle
    if args.get("feat_shape") is not None:
        args["feat_shape"] = [h, w]
    m = klass(**args).eval()
    sin, cos = np.split(m.get_embed(shape=[h, w]).double().numpy(), 2, axis=-1)
    if row["module"] == "RotaryEmbeddingDinoV3":
        coords = pes._build_grid([h, w], grid_type="centered", grid_offset=m.grid_offset, ndim=2)
        top = float((2 * math.pi / m.periods).max())
    else:
        coords = pes._build_grid(
            [h, w],
            grid_type=m.grid_type,
            ref_feat_shape=m.ref_feat_shape,
            grid_offset=m.grid_offset,
            grid_indexing=m.grid_indexing,
            normalize_coords=m.normalize_coords,
        )
        top = float(m.bands.abs().max())
    angle = coords.reshape(h * w, -1).double().abs().amax(-1).numpy() * top
    return cos, sin, angle


def check(got, name, h, w, what):
    cos, sin, angle = timm_answer(name, h, w)
    tol = hf_zoo.tolerance(angle, 1.0)
    assert float(got["attention_scaling"]) == 1.0, what
    assert_close(got["cos"], cos, atol=tol, what=f"{what} cos")
    assert_close(got["sin"], sin, atol=tol, what=f"{what} sin")


def test_the_table_covers_the_pinned_timm():
    assert timm_vit.ZOO["timm"] == timm.__version__
    assert set(registry.ARCHITECTURES) == set(MODELS)
    assert not set(MODELS) & set(timm_vit.UNREAD)


@pytest.mark.slow
def test_the_table_is_what_the_tool_writes():
    """engine/models/timm_zoo.json is tests/tools/timm_zoo.py's output on the pinned timm: every
    model of timm's registry with a rope module, created on the meta device (``--check``)."""
    assert timm_zoo.TABLE.read_text() == timm_zoo.dumps(timm_zoo.build()), (
        "engine/models/timm_zoo.json is stale: .venv/bin/python -m tests.tools.timm_zoo"
    )


def test_what_is_not_read_changes_only_on_purpose():
    assert timm_vit.UNREAD == NOT_READ


def test_share_of_the_zoo_read():
    """Of timm's rotary models whose frequencies are not learned, posenc reads >= 90% (all, now)."""
    learned = {n for n, why in timm_vit.UNREAD.items() if why == LEARNED}
    share = len(MODELS) / (len(MODELS) + len(timm_vit.UNREAD) - len(learned))
    print(
        f"timm zoo: {len(MODELS)} read, {len(timm_vit.UNREAD)} not read ({len(learned)} learned), {share:.1%}"
    )
    assert share >= 0.9


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_by_compute(name):
    for h, w in grids(name):
        got = compute("rope", {"hf_config": config(name), "grid": {"height": h, "width": w}})
        assert got["cos"].shape == (h * w, got["spec"]["head_dim"]), name
        check(got, name, h, w, f"{name} {h}x{w}")


def test_the_answer_spec_sent_back_gives_the_same_rows():
    """The canonical spec of a grid answer, with the grid's position_ids, is an ordinary rope body."""
    for name in (
        "eva02_base_patch14_448",
        "vit_base_patch16_dinov3",
        "gemma4_vit_167m",
        "vit_pe_core_base_patch16_224",
    ):
        got = compute("rope", {"hf_config": config(name), "grid": {"height": 5, "width": 4}})
        rows, cols = np.indices((5, 4)).reshape(2, -1)
        xy = MODELS[name]["args"].get("grid_indexing") == "xy" or "gemma4" in name
        ids = [cols.tolist(), rows.tolist()] if xy else [rows.tolist(), cols.tolist()]
        again = compute("rope", {**got["spec"], "position_ids": ids})
        assert again["cos"].tobytes() == got["cos"].tobytes(), name
        assert again["sin"].tobytes() == got["sin"].tobytes(), name


def _refused(body, loc, *words):
    with pytest.raises(SpecError) as e:
        compute("rope", body)
    assert ".".join(map(str, e.value.loc)) == loc, e.value
    for word in words:
        assert word in e.value.msg, e.value.msg


def test_refusals_name_the_field_and_what_to_send():
    grid = {"height": 4, "width": 4}
    _refused(
        {"hf_config": config("vit_nonexistent"), "grid": grid}, "hf_config.architecture", "send the rope spec"
    )
    _refused(
        {"hf_config": config("vit_base_patch16_rope_mixed_224"), "grid": grid},
        "hf_config.architecture",
        "learns its frequencies",
    )
    eva = config("eva02_base_patch14_224")
    _refused({"hf_config": eva}, "grid", '"height": 16')
    _refused({"hf_config": eva, "grid": {"height": 4}}, "grid.width", "required")
    _refused({"hf_config": eva, "grid": {"height": 0, "width": 4}}, "grid.height", "[1, 65536]")
    _refused({"hf_config": eva, "grid": {"height": 4, "width": 4.0}}, "grid.width", "integer")
    _refused(
        {"hf_config": eva, "grid": {"height": 4, "width": 4, "frames": 2}}, "grid.frames", "height, width"
    )
    _refused({"hf_config": eva, "grid": [4, 4]}, "grid", "object")
    _refused({"hf_config": eva, "grid": {"height": 2048, "width": 1024}}, "grid", "tokens")
    _refused({"hf_config": eva, "grid": grid, "positions": [0]}, "positions", "beside grid")
    _refused({"hf_config": eva, "grid": grid, "position_ids": [[0], [0]]}, "position_ids", "beside grid")
    _refused({"hf_config": eva, "grid": grid, "layer_type": "full_attention"}, "layer_type", "no layer types")
    _refused(
        {"hf_config": {**eva, "model_args": {"ref_feat_shape": [8, 8]}}, "grid": grid},
        "hf_config.model_args.ref_feat_shape",
        "rope spec fields",
    )
    _refused({"head_dim": 64, "grid": grid}, "grid", "only with hf_config")
    _refused({"table": "x", "grid": grid}, "grid", "only with hf_config")
    llama = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4}
    _refused({"hf_config": llama, "grid": grid}, "grid", "not a token grid")


@pytest.fixture(scope="module")
def server(tmp_path_factory, request):
    return serve_for_module(tmp_path_factory.mktemp("timm"), request, None, workers=1)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def test_every_model_over_http(http):
    """Binary answers for every model at a grid unlike its default; JSON for a few."""
    for name in sorted(MODELS):
        body = {"hf_config": config(name), "grid": {"height": 6, "width": 9}}
        r = http.post("/v1/rope", json=body, headers={"accept": "application/x-safetensors"})
        assert r.status_code == 200, (name, r.text[:300])
        arrays, _ = read_safetensors(r.content)
        got = {k: np.asarray(arrays[k], np.float64) for k in ("cos", "sin", "attention_scaling")}
        check(got, name, 6, 9, f"{name} over HTTP")
    for name in ("eva02_tiny_patch14_336", "qwen3_vit_88m"):  # asked again: the same answer
        body = {"hf_config": config(name), "grid": {"height": 6, "width": 9}}
        first = http.post("/v1/rope", json=body, headers={"accept": "application/x-safetensors"}).content
        for _ in range(3):
            r = http.post("/v1/rope", json=body, headers={"accept": "application/x-safetensors"})
            assert r.status_code == 200 and r.content == first, name
    for name in ("eva02_tiny_patch14_336", "vit_small_patch16_dinov3", "qwen3_vit_88m"):
        r = http.post("/v1/rope", json={"hf_config": config(name), "grid": {"height": 2, "width": 3}})
        assert r.status_code == 200, (name, r.text[:300])
        got = r.json()
        got = {
            "cos": np.array(got["cos"]),
            "sin": np.array(got["sin"]),
            "attention_scaling": got["attention_scaling"],
        }
        check(got, name, 2, 3, f"{name} JSON")


def test_refusals_over_http(http):
    r = http.post(
        "/v1/rope", json={"hf_config": config("vit_nonexistent"), "grid": {"height": 2, "width": 2}}
    )
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "hf_config", "architecture"], r.text
    r = http.post("/v1/rope", json={"hf_config": config("eva02_base_patch14_224")})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "grid"], r.text


def test_kserve_v2_and_the_shared_memory_client(http, server):
    """A grid body as KServe v2's spec parameter (no inputs: the grid gives the positions) and
    through Client.lookup on the server's engine: the model's own answer."""
    name, grid = "vit_base_patch16_rope_reg1_gap_256", {"height": 4, "width": 5}
    spec = json.dumps({"hf_config": config(name), "grid": grid})
    r = http.post("/v2/models/rope/infer", json={"inputs": [], "parameters": {"spec": spec}})
    assert r.status_code == 200, r.text
    outs = {o["name"]: o for o in r.json()["outputs"]}
    got = {
        "cos": np.asarray(outs["cos"]["data"], np.float64).reshape(outs["cos"]["shape"]),
        "sin": np.asarray(outs["sin"]["data"], np.float64).reshape(outs["sin"]["shape"]),
        "attention_scaling": 1.0,
    }
    check(got, name, 4, 5, f"{name} over v2")
    from posenc.engine.reader.client import Client

    c = Client(namespace=server.namespace)
    body = {"hf_config": config(name), "grid": grid}
    check(c.lookup("rope", body), name, 4, 5, f"{name} through Client.lookup, computed")
    req = c.resolve("rope", body)  # the first lookup asked the engine for the grid's table
    wait_for(lambda: c.view(req) is not None, 60, 0.02, what=f"{name}'s 4x5 grid table mapped")
    check(c.lookup("rope", body), name, 4, 5, f"{name} through Client.lookup, from shared memory")
