"""diffusers' rotary transformers of engine/models/diffusers_cosmos.py (Cosmos, Kandinsky 5 / 6 /
6-SR), against each class's own positional module.

As tests/engine/test_diffusers_zoo.py (whose helpers this file uses): each class is built from its
config on the meta device with its positional module on the CPU, the module is called as the
transformer's forward calls it (Cosmos' ``fps``, Kandinsky's ``scale_factor`` and NABLA token
blocks, Kandinsky 6's image-to-video reference frame written from its pipeline), and posenc must
give the same cos/sin within ``hf_zoo.tolerance`` (at each token's largest coordinate) through
``compute``, from the config as diffusers saves it and from its ``_class_name`` alone, for a config
of other sizes, and over HTTP (JSON and binary).
"""

from __future__ import annotations

import json
import sys

import httpx
import numpy as np
import pytest
import torch

from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from posenc.engine.core.formats import read_safetensors
from posenc.engine.models import diffusers_cosmos
from tests.engine.test_diffusers_zoo import ATTR, _built, _check, _grid_ids, _real, _saved
from tests.procs import serve_for_module

COSMOS, K5, K6, K6SR = (
    "CosmosTransformer3DModel",
    "Kandinsky5Transformer3DModel",
    "Kandinsky6Transformer3DModel",
    "Kandinsky6SRTransformer3DModel",
)
ATTR.update({COSMOS: "rope", K5: "visual_rope_embeddings", K6: "visual_rope_embeddings"})
ATTR[K6SR] = "visual_rope_embeddings"

# the latent grids asked (frames, rows, columns in patches) and the forward's own argument: Cosmos'
# fps (None: an image), Kandinsky 5's scale_factor (its pipelines pass (1, 1, 1), (1, 2, 2) or
# (1, 3.16, 3.16)); 6-SR's NABLA blocks need rows and columns in multiples of 8
CASES = {
    COSMOS: [((3, 4, 5), None), ((2, 3, 2), 30), ((1, 7, 2), 16), ((4, 2, 3), 7), ((3, 2, 2), 23.976)],
    K5: [((3, 4, 5), None), ((2, 3, 2), (1, 2, 2)), ((1, 7, 2), (1, 3.16, 3.16))],
    K6: [((3, 4, 5), None), ((2, 3, 2), None), ((1, 7, 2), None)],
    K6SR: [((2, 8, 16), None), ((1, 16, 8), None)],
}
# other sizes of each class's config (its rotary widths, scale factors, tables)
OTHER = {
    COSMOS: {"attention_head_dim": 64, "rope_scale": [3.0, 2.0, 1.5], "max_size": [16, 40, 40]},
    K5: {"axes_dims": [8, 12, 12], "attention_type": "nabla"},
    K6: {"axes_dims": [16, 24, 24], "scale_factor": [2.0, 1.5, 3.16]},
    K6SR: {"axes_dims": [8, 12, 12], "scale_factor": [1.0, 1.0, 1.0]},
}


def _matrices(r):
    """Kandinsky's 2x2 rotation matrices [.., d/2, 2, 2] [[cos, −sin], [sin, cos]] as (cos, sin) [n, d]."""
    r = r.reshape(-1, r.shape[-3], 2, 2)
    return (
        r[..., 0, 0].double().repeat_interleave(2, dim=1).numpy(),
        r[..., 1, 0].double().repeat_interleave(2, dim=1).numpy(),
    )


def _nabla(model):
    return model.config.get("attention_type") == "nabla" or type(model).__name__ == K6SR


def _call(name, model, module, grid, arg=None, frame_pos=None):
    """The module called as the transformer's forward calls it, tokens in its order: (cos, sin) [n, d]."""
    f, h, w = grid
    if name == COSMOS:  # forward(hidden_states [b, c, frames, height, width], fps)
        pt, ph, pw = module.patch_size
        return _real(module(torch.zeros(1, 1, f * pt, h * ph, w * pw), fps=arg))
    pos = [
        torch.arange(f) if frame_pos is None else torch.tensor(frame_pos),
        torch.arange(h),
        torch.arange(w),
    ]
    own = sys.modules[type(model).__module__]
    if name == K5:  # visual_rope_embeddings(visual_shape, visual_rope_pos, scale_factor), fractal_flatten
        rope = module((1, f, h, w), pos, arg or (1.0, 1.0, 1.0))
        _, rope = own.fractal_flatten(
            torch.zeros(1, f, h, w, 1), rope, (1, f, h, w), block_mask=_nabla(model)
        )
        return _matrices(rope)
    rope = module(tuple(pos), model.config.scale_factor)  # (T, H, W, 1, d/2, 2, 2)
    if name == K6SR:  # its forward: _local_patch over (1, 8, 8) blocks
        rope = own._local_patch(rope, (len(pos[0]), h, w), (1, 8, 8), dim=0).flatten(0, 1)
    return _matrices(rope)  # the tokens row-major, as its forward's flatten(0, 2)


def _coords(name, model, grid, arg=None, frame_pos=None):
    """Each token's coordinates (frame, row, column) in the class's order, written from its definition:
    the tolerance's bound and, for Kandinsky 6, the position_ids its forward is handed."""
    f, h, w = grid
    ids = _grid_ids(f, h, w).astype(np.float64)
    if frame_pos is not None:  # per frame its given index
        ids[0] = np.asarray(frame_pos, dtype=np.float64)[ids[0].astype(np.int64)]
    if _nabla(model):  # per frame the 8x8 blocks, row-major, each block row-major
        order = np.arange(f * h * w).reshape(f, h // 8, 8, w // 8, 8).transpose(0, 1, 3, 2, 4).reshape(-1)
        ids = ids[:, order]
    if name == COSMOS and arg is not None:
        ids[0] *= 24 / arg
    return ids


def _grid(grid, arg=None):
    body = dict(zip(("frames", "height", "width"), grid))
    if arg is not None:
        body["scale_factor" if isinstance(arg, (tuple, list)) else "fps"] = arg
    return body


def _rope(config, sel):
    return compute("rope", {"hf_config": json.loads(json.dumps(config)), **sel})


@pytest.mark.parametrize("name", sorted(diffusers_cosmos.CLASSES))
def test_class_vs_its_own_positional_module(name):
    model, module = _built(name)
    saved = _saved(name)
    for grid, arg in CASES[name]:
        cos, sin = _call(name, model, module, grid, arg)
        what = f"{name} {grid} {arg}"
        full = _rope(saved, {"grid": _grid(grid, arg)})
        _check(full, cos, sin, _coords(name, model, grid, arg), f"{what} (saved config)")
        bare = _rope({"_class_name": name}, {"grid": _grid(grid, arg)})
        _check(bare, cos, sin, _coords(name, model, grid, arg), f"{what} (_class_name alone)")
        assert bare["spec"] == full["spec"]


@pytest.mark.parametrize("name", sorted(diffusers_cosmos.CLASSES))
def test_a_config_of_other_sizes_is_read_as_the_class_reads_it(name):
    model, module = _built(name, OTHER[name])
    grid, arg = ((2, 8, 16), (1, 2.5, 3.16)) if name == K5 else CASES[name][1]
    cos, sin = _call(name, model, module, grid, arg)
    got = _rope({"_class_name": name, **OTHER[name]}, {"grid": _grid(grid, arg)})
    _check(got, cos, sin, _coords(name, model, grid, arg), f"{name} {OTHER[name]}")


def test_kandinsky6_takes_the_position_ids_its_pipeline_hands_in():
    """Kandinsky6's image-to-video pipeline appends the reference frame at frame 0 (visual_rope_pos)."""
    model, module = _built(K6)
    for grid, frames in (((4, 3, 2), [0, 1, 2, 0]), ((2, 2, 5), [0, 0])):
        cos, sin = _call(K6, model, module, grid, frame_pos=frames)
        pid = _coords(K6, model, grid, frame_pos=frames).astype(np.int64)
        for config in (_saved(K6), {"_class_name": K6}):
            got = _rope(config, {"position_ids": pid.tolist()})
            _check(got, cos, sin, pid, f"{K6} {grid} frames {frames}")


@pytest.mark.parametrize(
    "name, config, grid, loc",
    [
        (COSMOS, {}, {"frames": 129, "height": 2, "width": 2}, ("grid", "frames")),
        (COSMOS, {"max_size": [16, 40, 40]}, {"height": 21, "width": 2}, ("grid", "height")),
        (COSMOS, {"attention_head_dim": 10}, {"height": 2, "width": 2}, ("hf_config", "attention_head_dim")),
        (COSMOS, {"attention_head_dim": 65}, {"height": 2, "width": 2}, ("hf_config", "attention_head_dim")),
        (COSMOS, {"rope_scale": [2.0, -1.0, 1.0]}, {"height": 2, "width": 2}, ("hf_config", "rope_scale", 1)),
        (COSMOS, {"patch_size": [1, 0, 2]}, {"height": 2, "width": 2}, ("hf_config", "patch_size")),
        (COSMOS, {}, {"height": 2, "width": 2, "fps": 0}, ("grid", "fps")),
        (K5, {}, {"height": 2, "width": 129}, ("grid", "width")),
        (K5, {}, {"height": 2, "width": 2, "scale_factor": [1, 0, 1]}, ("grid", "scale_factor", 1)),
        (K5, {}, {"height": 2, "width": 2, "scale_factor": 2}, ("grid", "scale_factor")),
        (K5, {"attention_type": "nabla"}, {"height": 8, "width": 12}, ("grid", "width")),
        (K5, {"axes_dims": [16, 24, 23]}, {"height": 2, "width": 2}, ("hf_config", "axes_dims")),
        (K6, {"scale_factor": [1.0, "x", 2.0]}, {"height": 2, "width": 2}, ("hf_config", "scale_factor", 1)),
        (K6SR, {}, {"height": 12, "width": 8}, ("grid", "height")),
        (K6SR, {}, {"height": 8, "width": 8, "scale_factor": [1, 1, 1]}, ("grid", "scale_factor")),
    ],
)
def test_what_the_class_cannot_build_is_refused_at_its_key(name, config, grid, loc):
    """A grid past the class's tables or its NABLA blocks, a width it cannot pair, a scale it cannot
    divide by: a 422 at the key (the class itself raises, or divides by zero)."""
    with pytest.raises(SpecError) as e:
        compute("rope", {"hf_config": {"_class_name": name, **config}, "grid": grid})
    assert e.value.loc == loc, e.value


def test_a_grid_only_class_refuses_position_ids_and_wants_a_grid():
    for name in (COSMOS, K5, K6SR):
        with pytest.raises(SpecError) as e:
            compute("rope", {"hf_config": {"_class_name": name}, "position_ids": [[0], [0], [0]]})
        assert e.value.loc == ("grid",) and "field required" in e.value.msg, e.value
    with pytest.raises(SpecError) as e:  # a grid and position_ids both
        compute(
            "rope",
            {"hf_config": {"_class_name": K6}, "grid": {"height": 2, "width": 2}, "position_ids": [[0]] * 3},
        )
    assert e.value.loc[0] == "position_ids", e.value


# -- over HTTP -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory, request):
    return serve_for_module(tmp_path_factory.mktemp("dzoo_cosmos"), request, None, workers=1)


@pytest.fixture(scope="module")
def http(served):
    with httpx.Client(base_url=served.url, timeout=60) as c:
        yield c


@pytest.mark.parametrize("name", sorted(diffusers_cosmos.CLASSES))
def test_class_over_http(http, name):
    model, module = _built(name)
    grid, arg = CASES[name][1]
    cos, sin = _call(name, model, module, grid, arg)
    coords = _coords(name, model, grid, arg)
    body = {"hf_config": _saved(name), "grid": _grid(grid, arg)}
    r = http.post("/v1/rope", json=body, headers={"accept": "application/x-safetensors"})
    assert r.status_code == 200, (name, r.text[:300])
    arrays, _ = read_safetensors(r.content)
    _check({k: arrays[k].astype(np.float64) for k in ("cos", "sin")}, cos, sin, coords, f"{name} over HTTP")
    j = http.post("/v1/rope", json=body)
    assert j.status_code == 200, j.text[:300]
    _check({k: np.array(j.json()[k]) for k in ("cos", "sin")}, cos, sin, coords, f"{name} over HTTP JSON")
    bad = http.post("/v1/rope", json={**body, "grid": {"height": 200, "width": 8}})
    assert bad.status_code == 422 and "grid" in bad.text, bad.text[:300]


def test_kserve_v2_and_the_co_located_client_read_the_same(served, http):
    """KServe v2: the config and its grid in ``parameters.spec`` (Cosmos, no inputs), or Kandinsky 6's
    position_ids as the input tensor; Client.lookup (shared memory) answers the same bodies."""
    from posenc.engine.reader.client import Client

    cosmos, cosmos_module = _built(COSMOS)
    k6, k6_module = _built(K6)
    (grid, fps), frames = CASES[COSMOS][1], [0, 1, 2, 0]
    pid = _coords(K6, k6, (4, 3, 2), frame_pos=frames).astype(np.int64)
    cases = [  # (class, spec's selection, position_ids input, its module's cos and sin, coordinates)
        (
            COSMOS,
            {"grid": _grid(grid, fps)},
            None,
            _call(COSMOS, cosmos, cosmos_module, grid, fps),
            _coords(COSMOS, cosmos, grid, fps),
        ),
        (K6, {}, pid, _call(K6, k6, k6_module, (4, 3, 2), frame_pos=frames), pid),
    ]
    for name, sel, ids, (cos, sin), coords in cases:
        spec = {"hf_config": {"_class_name": name}, **sel}
        inputs = []
        if ids is not None:
            flat = ids.reshape(-1).tolist()
            inputs = [{"name": "position_ids", "datatype": "INT64", "shape": list(ids.shape), "data": flat}]
        r = http.post(
            "/v2/models/rope/infer", json={"parameters": {"spec": json.dumps(spec)}, "inputs": inputs}
        )
        assert r.status_code == 200, (name, r.text[:300])
        out = {o["name"]: np.array(o["data"]).reshape(o["shape"]) for o in r.json()["outputs"]}
        _check(out, cos, sin, coords, f"{name} over KServe v2")
        body = {**spec, **({} if ids is None else {"position_ids": ids.tolist()})}
        got = Client(namespace=served.namespace).lookup("rope", body)
        got = {k: np.asarray(got[k], dtype=np.float64) for k in ("cos", "sin")}
        _check(got, cos, sin, coords, f"{name} Client.lookup")
