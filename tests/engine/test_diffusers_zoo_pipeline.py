"""diffusers' rotary transformers of engine/models/diffusers_pipeline.py (JoyImage Edit and Edit Plus,
PRX, Lumina-Next), each against the class's own code: the class built from its config defaults on the
meta device, its positional module (or method) on the CPU (tests/engine/test_diffusers_zoo.py's
``_built``), called as its forward or its pipeline calls it (written here from their definitions)
for several grids, compared with posenc's answer through ``compute`` from the saved config and from
``{"_class_name": name}`` alone, from a config of other sizes, and over HTTP (JSON and binary), within
the zoo's float32 tolerance (``hf_zoo.tolerance``).
"""

from __future__ import annotations

import json
import math
import sys

import httpx
import numpy as np
import pytest
import torch

from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from posenc.engine.core.formats import read_safetensors
from posenc.engine.models import diffusers_pipeline, diffusers_rope, registry
from tests.engine import test_diffusers_zoo as zoo
from tests.numeric import assert_close
from tests.procs import serve_for_module
from tests.tools import hf_zoo

NAMES = sorted(diffusers_pipeline.CLASSES)
JOY, PLUS, PRX, LUMINA = (
    "JoyImageEditTransformer3DModel",
    "JoyImageEditPlusTransformer3DModel",
    "PRXTransformer2DModel",
    "LuminaNextDiT2DModel",
)
# the module each is built with on the CPU (None: the model's own method, on the meta-built model);
# test_diffusers_zoo.ATTR names "rope" for every class its own cases do not know
zoo.ATTR.update({JOY: None, PLUS: None, PRX: "pe_embedder", LUMINA: "patch_embedder"})
zoo.BUILD[LUMINA] = {"num_kv_heads": 8}  # its default (None) does not build; not positional
GRIDS = [(3, 4, 5), (1, 7, 2), (2, 3, 2)]  # frames, rows, columns in patches (PRX: the last two)
# Lumina-Next: grids around its default image (64 x 64 patches: scaling 1), smaller and larger
LUMINA_GRIDS = [(64, 64), (5, 7), (32, 48), (80, 96)]
TEXT = 5


def _joy_call(model, grid, text=None):
    """JoyImageEditTransformer3DModel.forward: get_rotary_pos_embed([tt, th, tw], txt_seq_len if
    rope_type == "mrope" else None); the image's cos/sin, then the caption's."""
    vis, txt = model.get_rotary_pos_embed(vis_rope_size=list(grid), txt_rope_size=text)
    cos, sin = zoo._real(vis)
    if txt is not None:
        tc, ts = zoo._real(txt)
        cos, sin = np.concatenate([cos, tc]), np.concatenate([sin, ts])
    return cos, sin


def _plus_call(model, shapes):
    """JoyImageEditPlusTransformer3DModel.forward's loop over one sample's shape_list: each item's
    range from the frame after the last one's."""
    parts, t0 = [], 0
    for t, h, w in shapes:
        parts.append(zoo._real(model._get_rotary_pos_embed_for_range((t0, 0, 0), (t0 + t, h, w))))
        t0 += t
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _plus_ids(shapes):
    """The positions of those items: (frame + offset, row, column), row-major."""
    parts, t0 = [], 0
    for t, h, w in shapes:
        parts.append(zoo._grid_ids(t, h, w) + np.array([[t0], [0], [0]]))
        t0 += t
    return np.concatenate(parts, axis=1)


def _prx_call(module, model, h, w):
    """PRXTransformer2DModel.forward: pe_embedder(get_image_ids(b, H, W, patch_size)) on a latent of
    h x w patches: [b, 1, n, d/2, 2, 2] rotation matrices [[cos, -sin], [sin, cos]]."""
    prx = sys.modules[type(model).__module__]
    p = model.patch_size
    r = module(prx.get_image_ids(1, h * p, w * p, p, torch.device("cpu")))[0, 0]
    return (
        r[..., 0, 0].double().repeat_interleave(2, dim=1).numpy(),
        r[..., 1, 0].double().repeat_interleave(2, dim=1).numpy(),
    )


def _lumina_call(module, model, h, w, phase="linear"):
    """pipeline_lumina's step: scaling_factor = sqrt(width * height / default_image_size**2)
    (default_image_size = sample_size * vae_scale_factor 8; the image h x w patches of patch_size
    latent pixels), linear_factor before scaling_watershed, ntk_factor from it on, then
    get_2d_rotary_pos_embed_lumina(head_dim, 384, 384, ...), which the transformer's patch_embedder
    slices to the latent's grid: complex freqs_cis [n, d/2]."""
    from diffusers.models.embeddings import get_2d_rotary_pos_embed_lumina

    p = model.config.patch_size
    height, width = h * p * 8, w * p * 8
    scaling = math.sqrt(width * height / (model.config.sample_size * 8) ** 2)
    linear, ntk = (scaling, 1.0) if phase == "linear" else (1.0, scaling)
    freqs = get_2d_rotary_pos_embed_lumina(model.head_dim, 384, 384, linear_factor=linear, ntk_factor=ntk)
    _, _, _, got = module(torch.zeros(1, model.config.in_channels, h * p, w * p), freqs)
    return zoo._complex(got[0]), scaling


def _body(name, grid):
    """A request's grid for a (frames, rows, columns) grid: 2-D classes take rows and columns."""
    f, h, w = grid
    return {"height": h, "width": w} if name == PRX else {"frames": f, "height": h, "width": w}


def _expected(name, model, module, grid):
    """(cos, sin, position_ids) of the class's own code for ``grid``."""
    f, h, w = grid
    if name == PRX:
        return *_prx_call(module, model, h, w), zoo._grid_ids(1, h, w)[1:]
    if name == PLUS:
        shapes = [(1, h, w)] * f  # the target and f - 1 references of its size
        return *_plus_call(model, shapes), _plus_ids(shapes)
    return *_joy_call(model, grid), zoo._grid_ids(f, h, w)


def _check_angles(got, cos, sin, bound, what):
    """The zoo's tolerance for angles up to ``bound`` (a position times the largest frequency)."""
    tol = hf_zoo.tolerance([bound], 1.0)
    assert_close(got["cos"], cos, atol=tol, what=f"{what} cos")
    assert_close(got["sin"], sin, atol=tol, what=f"{what} sin")


def test_records_are_the_catalogues_rotary_classes():
    for name in NAMES:
        assert diffusers_rope.CLASSES[name] is diffusers_pipeline.CLASSES[name]
        assert registry.CLASSES[name]["rope"] is diffusers_pipeline.CLASSES[name]["rope"]


@pytest.mark.parametrize("name", [JOY, PLUS, PRX])
def test_grid_class_vs_its_own_code(name):
    model, module = zoo._built(name)
    saved = zoo._saved(name)
    for grid in GRIDS:
        cos, sin, pid = _expected(name, model, module, grid)
        for raw in (json.loads(json.dumps(saved)), {"_class_name": name}):
            for sel in ({"grid": _body(name, grid)}, {"position_ids": pid.tolist()}):
                got = compute("rope", {"hf_config": raw, **sel})
                zoo._check(got, cos, sin, pid, f"{name} {grid} {list(sel)} {len(raw)} keys")


def test_joyimage_mrope_rotates_the_caption_after_the_image():
    """rope_type "mrope": txt_freqs at max(grid) + 1 + j on every axis, after the image's rows."""
    model, _ = zoo._built(JOY, {"rope_type": "mrope"})
    for f, h, w in GRIDS:
        cos, sin = _joy_call(model, (f, h, w), TEXT)
        cfg = {"_class_name": JOY, "rope_type": "mrope"}
        got = compute(
            "rope", {"hf_config": cfg, "grid": {"frames": f, "height": h, "width": w, "text": TEXT}}
        )
        top = max(f, h, w) + TEXT
        zoo._check(got, cos, sin, np.array([[top]]), f"JoyImage mrope {(f, h, w)}")
    with pytest.raises(SpecError) as e:  # rope_type "rope" (its default) rotates no caption
        compute("rope", {"hf_config": {"_class_name": JOY}, "grid": {"height": 2, "width": 2, "text": 3}})
    assert e.value.loc == ("grid", "text") and "rotates no caption" in e.value.msg, e.value


def test_joyimage_edit_plus_references_of_other_sizes():
    """Its pipeline's shape_list: the target, then references of their own sizes, each at the frames
    after the last: position_ids written from that loop."""
    model, _ = zoo._built(PLUS)
    for shapes in ([(1, 4, 5), (1, 3, 2), (1, 6, 1)], [(1, 2, 2)], [(2, 3, 3), (1, 5, 4)]):
        cos, sin = _plus_call(model, shapes)
        pid = _plus_ids(shapes)
        got = compute("rope", {"hf_config": {"_class_name": PLUS}, "position_ids": pid.tolist()})
        zoo._check(got, cos, sin, pid, f"JoyImage Edit Plus {shapes}")


# configs of other sizes each class reads: head widths, axes, θ, the null axes its own code fills
OTHER = {
    JOY: [
        {"hidden_size": 1536, "num_attention_heads": 24, "rope_dim_list": [16, 24, 24], "theta": 500},
        {"hidden_size": 2304, "num_attention_heads": 24, "rope_dim_list": None},  # [32, 32, 32]
    ],
    PLUS: [
        {"hidden_size": 768, "num_attention_heads": 8, "rope_dim_list": [32, 32, 32], "theta": 10000},
        {"hidden_size": 1152, "num_attention_heads": 24, "rope_dim_list": None},  # [16, 16, 16]
    ],
    PRX: [
        {"hidden_size": 1024, "num_heads": 16, "axes_dim": [16, 48], "theta": 500},
        {"hidden_size": 2048, "num_heads": 32, "axes_dim": None, "theta": 256},  # [32, 32]
    ],
}


@pytest.mark.parametrize("name", [JOY, PLUS, PRX])
def test_a_config_of_other_sizes_is_read_as_the_class_reads_it(name):
    for change in OTHER[name]:
        model, module = zoo._built(name, change)
        for grid in GRIDS[:2]:
            cos, sin, pid = _expected(name, model, module, grid)
            got = compute("rope", {"hf_config": {"_class_name": name, **change}, "grid": _body(name, grid)})
            zoo._check(got, cos, sin, pid, f"{name} {change} {grid}")


@pytest.mark.parametrize("config", [{}, {"hidden_size": 1024, "num_attention_heads": 16, "sample_size": 64}])
@pytest.mark.parametrize("phase", ["linear", "ntk"])
def test_lumina_next_vs_its_pipeline(config, phase):
    """Both of its pipeline's scalings, for images at, below and above its default size."""
    model, module = zoo._built(LUMINA, config)
    saved = zoo._saved(LUMINA) if not config else {"_class_name": LUMINA, **config}
    for h, w in LUMINA_GRIDS:
        (cos, sin), scaling = _lumina_call(module, model, h, w, phase)
        grid = {"height": h, "width": w} if phase == "linear" else {"height": h, "width": w, "phase": phase}
        # the largest angle: the largest position times the largest frequency (1 / scaling when linear)
        bound = max(h, w) / (scaling if phase == "linear" else 1.0)
        for raw in (json.loads(json.dumps(saved)), {"_class_name": LUMINA, **config}):
            got = compute("rope", {"hf_config": raw, "grid": grid})
            _check_angles(got, cos, sin, bound, f"Lumina-Next {config} {grid}")


def test_lumina_next_patch_size_sets_the_image_size():
    """patch_size 1: the image is 8 pixels a patch, and its scaling follows."""
    change = {"patch_size": 1, "in_channels": 4}
    model, module = zoo._built(LUMINA, change)
    (cos, sin), scaling = _lumina_call(module, model, 40, 24)
    got = compute(
        "rope", {"hf_config": {"_class_name": LUMINA, **change}, "grid": {"height": 40, "width": 24}}
    )
    _check_angles(got, cos, sin, 40 / scaling, "Lumina-Next patch_size 1")


@pytest.mark.parametrize(
    "name, config, sel, loc",
    [
        (JOY, {"rope_dim_list": [16, 56]}, {"position_ids": [[0], [0]]}, ("hf_config", "rope_dim_list")),
        (JOY, {"rope_dim_list": [16, 48, 48]}, {"position_ids": [[0]] * 3}, ("hf_config", "rope_dim_list")),
        (JOY, {"hidden_size": 3001}, {"position_ids": [[0]] * 3}, ("hf_config", "hidden_size")),
        # null rope_dim_list with a head of 63: [21, 21, 21] has odd widths its module cannot pair
        (
            PLUS,
            {"hidden_size": 1512, "rope_dim_list": None},
            {"position_ids": [[0]] * 3},
            ("hf_config", "rope_dim_list"),
        ),
        (PLUS, {"theta": "x"}, {"position_ids": [[0]] * 3}, ("hf_config", "theta")),
        (PRX, {"axes_dim": [32, 16, 16]}, {"position_ids": [[0]] * 3}, ("hf_config", "axes_dim")),
        (PRX, {"hidden_size": 1120}, {"grid": {"height": 2, "width": 2}}, ("hf_config", "axes_dim")),
        (PRX, {}, {"grid": {"frames": 2, "height": 2, "width": 2}}, ("grid", "frames")),
        (LUMINA, {"hidden_size": 2208}, {"grid": {"height": 2, "width": 2}}, ("hf_config", "hidden_size")),
        (LUMINA, {"hidden_size": 10**400}, {"grid": {"height": 2, "width": 2}}, ("hf_config", "hidden_size")),
        (LUMINA, {"patch_size": 10**400}, {"grid": {"height": 2, "width": 2}}, ("hf_config", "patch_size")),
        (LUMINA, {"sample_size": 2**17}, {"grid": {"height": 2, "width": 2}}, ("hf_config", "sample_size")),
        (LUMINA, {}, {"grid": {"height": 385, "width": 2}}, ("grid", "height")),
        (LUMINA, {}, {"grid": {"height": 2, "width": 2, "phase": "dynamic"}}, ("grid", "phase")),
        (LUMINA, {}, {"grid": {"height": 2, "width": 2, "frames": 1}}, ("grid", "frames")),
        (LUMINA, {}, {"position_ids": [[0], [0]]}, ("grid",)),
    ],
)
def test_refusals_name_the_key(name, config, sel, loc):
    with pytest.raises(SpecError) as e:
        compute("rope", {"hf_config": {"_class_name": name, **config}, **sel})
    assert e.value.loc[: len(loc)] == loc, e.value


# -- over HTTP -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory, request):
    return serve_for_module(tmp_path_factory.mktemp("dzoo_pipeline"), request, None, workers=1)


@pytest.fixture(scope="module")
def http(served):
    with httpx.Client(base_url=served.url, timeout=60) as c:
        yield c


@pytest.mark.parametrize("name", NAMES)
def test_class_over_http(http, name):
    model, module = zoo._built(name)
    if name == LUMINA:
        (cos, sin), scaling = _lumina_call(module, model, 32, 48)
        grid, check = (
            {"height": 32, "width": 48},
            lambda got, what: _check_angles(got, cos, sin, 48 / scaling, what),
        )
    else:
        cos, sin, pid = _expected(name, model, module, GRIDS[0])
        grid, check = _body(name, GRIDS[0]), lambda got, what: zoo._check(got, cos, sin, pid, what)
    body = {"hf_config": zoo._saved(name), "grid": grid}
    r = http.post("/v1/rope", json=body, headers={"accept": "application/x-safetensors"})
    assert r.status_code == 200, (name, r.text[:300])
    arrays, _ = read_safetensors(r.content)
    check({k: arrays[k].astype(np.float64) for k in ("cos", "sin")}, f"{name} over HTTP")
    j = http.post("/v1/rope", json=body)
    assert j.status_code == 200, j.text[:300]
    check({k: np.array(j.json()[k]) for k in ("cos", "sin")}, f"{name} over HTTP JSON")
    bad = http.post("/v1/rope", json={"hf_config": {"_class_name": name}, "grid": {"height": 0, "width": 2}})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-2:] == ["grid", "height"], bad.text[
        :300
    ]


@pytest.mark.parametrize("name", [LUMINA, PRX])
def test_the_co_located_client_reads_the_same(served, name):
    """Client.lookup (shared memory, the engine's tables) answers a config body as compute does:
    Lumina-Next's frequencies as data dealt alternately, PRX's axes."""
    from posenc.engine.reader.client import Client

    model, module = zoo._built(name)
    if name == LUMINA:
        (cos, sin), _ = _lumina_call(module, model, 24, 40, "ntk")
        grid = {"height": 24, "width": 40, "phase": "ntk"}
    else:
        cos, sin, _ = _expected(name, model, module, GRIDS[0])
        grid = _body(name, GRIDS[0])
    got = Client(namespace=served.namespace).lookup(
        "rope", {"hf_config": {"_class_name": name}, "grid": grid}
    )
    got = {k: np.asarray(got[k], dtype=np.float64) for k in ("cos", "sin")}
    _check_angles(got, cos, sin, max(GRIDS[0]) if name == PRX else 40, f"{name} Client.lookup")


@pytest.mark.parametrize("name", [JOY, LUMINA])
def test_kserve_v2_reads_the_config_and_grid_in_its_spec(http, name):
    """KServe v2: the config and the grid in ``parameters.spec``, no position input."""
    model, module = zoo._built(name)
    if name == LUMINA:
        (cos, sin), scaling = _lumina_call(module, model, 16, 12)
        grid, bound = {"height": 16, "width": 12}, 16 / scaling
    else:
        cos, sin, _ = _expected(name, model, module, GRIDS[1])
        grid, bound = _body(name, GRIDS[1]), max(GRIDS[1])
    body = {
        "parameters": {"spec": json.dumps({"hf_config": {"_class_name": name}, "grid": grid})},
        "inputs": [],
    }
    r = http.post("/v2/models/rope/infer", json=body)
    assert r.status_code == 200, (name, r.text[:300])
    out = {o["name"]: np.array(o["data"], dtype=np.float64).reshape(o["shape"]) for o in r.json()["outputs"]}
    _check_angles(out, cos, sin, bound, f"{name} over KServe v2")
