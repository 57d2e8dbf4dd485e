"""diffusers' LTX group (engine/models/diffusers_ltx.py): LTX-Video, LTX-2, Sana-WM and Sana-WM's
LTX-2 refiner, against each class's own positional module.

Each class is built from its config defaults on the meta device with its positional module on the
CPU (test_diffusers_zoo._built); the module is called as the transformer (or its pipeline) calls it
for several latent grids, and posenc must give the same cos/sin through ``compute`` (from the config
as diffusers saves it and from ``_class_name`` alone, and a config of other sizes) and over HTTP.

Tolerance: hf_zoo.tolerance, the transformers zoo's float32 bound (1e-6 + 2.5e-7·p), with p the
size of the angle the class computes in float32: for LTX its frequencies reach θ·π/2 and multiply
2·g − 1, g its normalised coordinate, so p = θ·π/2·(2·|g| + 1) of each token, g read from the
class's own coordinates; Sana-WM's frequencies are at most 1, so p is the largest grid index.
"""

from __future__ import annotations

import json
import math

import httpx
import numpy as np
import orjson
import pytest
import torch

from posenc.engine.answer import pipeline
from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from posenc.engine.core.formats import read_safetensors
from posenc.engine.models import diffusers_ltx
from posenc.engine.tables import FAMILIES
from tests.engine.test_diffusers_zoo import GRIDS, _built, _complex, _grid_ids, _saved
from tests.numeric import assert_close
from tests.procs import serve_for_module, wait_for
from tests.tools import hf_zoo

LTX = ["LTXVideoTransformer3DModel", "LTX2VideoTransformer3DModel", "SanaWMLTX2RefinerTransformer3DModel"]
SANA = "SanaWMTransformer3DModel"
CPU = torch.device("cpu")
ROPE = FAMILIES["rope"]
# a config of other sizes per class: an inner width whose dim % 6 differs, patches of 2, and for
# LTX-2 its bases, scale factors, θ and causal offset
OTHER = {
    "LTXVideoTransformer3DModel": {
        "num_attention_heads": 4,
        "attention_head_dim": 20,
        "patch_size": 2,
        "patch_size_t": 2,
    },
    "LTX2VideoTransformer3DModel": {
        "num_attention_heads": 3,
        "attention_head_dim": 26,
        "patch_size": 2,
        "patch_size_t": 2,
        "vae_scale_factors": [4, 16, 8],
        "pos_embed_max_pos": 16,
        "base_height": 1024,
        "base_width": 512,
        "rope_theta": 500.0,
        "causal_offset": 0,
        "rope_double_precision": False,
    },
    SANA: {"linear_head_dim": 64, "hidden_size": 1280},
}
OTHER["SanaWMLTX2RefinerTransformer3DModel"] = {**OTHER["LTX2VideoTransformer3DModel"], "causal_offset": 3}


def _ltx_call(model, module, grid, fps, first=0):
    """The class's (cos, sin) [n, dim] for a grid of patches and the normalised coordinates g [n, 3]
    of its tokens, as its transformer or pipeline builds them (written from their definitions)."""
    f, h, w = grid
    p, pt = module.patch_size, module.patch_size_t
    if hasattr(module, "_prepare_video_coords"):  # LTX-Video: its pipeline's rope_interpolation_scale
        # it builds a coordinate per cell of the sizes it is given (its pipeline passes the latent's,
        # whose cells are the tokens with patches of 1): the token grid, each index times the patch
        scale = (8 / fps, 32, 32)
        g = module._prepare_video_coords(1, f, h, w, scale, CPU)[0]
        cos, sin = module(torch.zeros(1, 1, 1), f, h, w, scale)
    else:
        if first:  # the refiner's window: build_rotary_emb_for_absolute_positions
            frames = list(range(first, first + f * pt))
            cos, sin = model.build_rotary_emb_for_absolute_positions(1, frames, h * p, w * p, CPU, fps)
            coords = None
        else:  # LTX2VideoTransformer3DModel.forward: rope.prepare_video_coords, then rope(coords)
            coords = module.prepare_video_coords(1, f * pt, h * p, w * p, CPU, fps=fps)
            cos, sin = module(coords)
        if coords is None:  # a bound of the window's coordinates, for the tolerance: its ends
            sf = module.scale_factors
            ends = [(first + f * pt) * sf[0] / fps, h * p * sf[1], w * p * sf[2]]
            coords = torch.tensor(ends, dtype=torch.float64)[None, :, None, None]
        base = torch.tensor([module.base_num_frames, module.base_height, module.base_width])
        g = (coords[0].mean(-1) / base[:, None]).T
    return cos[0].double().numpy(), sin[0].double().numpy(), g.double().numpy()


def _tol(module, g):
    """hf_zoo.tolerance of the angles the class computes: θ·π/2·(2·|g| + 1) per token."""
    return hf_zoo.tolerance(module.theta * math.pi / 2 * (2 * np.abs(g).max(axis=1) + 1), 1.0)


def _sana_call(module, grid):
    """SanaWMTransformer3DModel.forward: self.rope((frames, height, width) in patches): complex freqs."""
    return _complex(module(tuple(grid), CPU))


def _check(got, cos, sin, tol, what):
    assert_close(np.asarray(got["cos"], np.float64), cos, atol=tol, what=f"{what} cos")
    assert_close(np.asarray(got["sin"], np.float64), sin, atol=tol, what=f"{what} sin")


def _body_grid(grid, **more):
    return {**dict(zip(("frames", "height", "width"), grid)), **more}


@pytest.mark.parametrize("name", LTX)
def test_ltx_class_vs_its_own_module(name):
    model, module = _built(name)
    saved = json.loads(json.dumps(_saved(name)))
    record = diffusers_ltx.CLASSES[name]["rope"]
    for grid, fps in zip(GRIDS, (None, 30, 12.5)):
        cos, sin, g = _ltx_call(model, module, grid, record.fps if fps is None else fps)
        tol = _tol(module, g)
        body_grid = _body_grid(grid) if fps is None else _body_grid(grid, fps=fps)
        full = compute("rope", {"hf_config": saved, "grid": body_grid})
        _check(full, cos, sin, tol, f"{name} {body_grid} (saved config)")
        bare = compute("rope", {"hf_config": {"_class_name": name}, "grid": body_grid})
        _check(bare, cos, sin, tol, f"{name} {body_grid} (_class_name alone)")
        assert bare["spec"] == full["spec"]


@pytest.mark.parametrize("name", LTX)
def test_ltx_config_of_other_sizes(name):
    """Another inner width (dim % 6 = 2 or 0 unrotated columns), patches of 2 and, for LTX-2, its
    bases, VAE scale factors, θ and causal offset, as the class reads them."""
    change = OTHER[name]
    model, module = _built(name, change)
    for grid in GRIDS:
        cos, sin, g = _ltx_call(model, module, grid, 24.0)
        got = compute(
            "rope", {"hf_config": {"_class_name": name, **change}, "grid": _body_grid(grid, fps=24)}
        )
        _check(got, cos, sin, _tol(module, g), f"{name} {change} {grid}")


def test_the_refiner_window_from_its_first_frame():
    """Sana-WM's refiner: build_rotary_emb_for_absolute_positions over latent frames first_frame..."""
    name = "SanaWMLTX2RefinerTransformer3DModel"
    for change in ({}, OTHER[name]):
        model, module = _built(name, change)
        for first, grid in ((5, (3, 2, 3)), (1, (2, 3, 1))):
            cos, sin, g = _ltx_call(model, module, grid, 24.0, first)
            body = {"hf_config": {"_class_name": name, **change}, "grid": _body_grid(grid, first_frame=first)}
            _check(compute("rope", body), cos, sin, _tol(module, g), f"{name} {change} from frame {first}")
    with pytest.raises(SpecError) as e:  # LTX-2's own forward starts at frame 0
        compute(
            "rope",
            {
                "hf_config": {"_class_name": "LTX2VideoTransformer3DModel"},
                "grid": {"height": 2, "width": 2, "first_frame": 3},
            },
        )
    assert e.value.loc == ("grid", "first_frame") and e.value.kind == "extra_forbidden", e.value


@pytest.mark.parametrize("name", LTX[1:])
def test_ltx2_split_rope_per_head(name):
    """rope_type "split": the module's cos/sin are [b, heads, n, hd/2], head h's applied half-split
    over its hd columns (apply_split_rotary_emb: [c | c]); a grid's ``head`` asks one head's."""
    for change in ({"rope_type": "split"}, {**OTHER[name], "num_attention_heads": 7, "rope_type": "split"}):
        model, module = _built(name, change)
        grid = GRIDS[0]
        p, pt = module.patch_size, module.patch_size_t
        coords = module.prepare_video_coords(1, grid[0] * pt, grid[1] * p, grid[2] * p, CPU, fps=30.0)
        cos, sin = module(coords)
        base = torch.tensor([module.base_num_frames, module.base_height, module.base_width])
        tol = _tol(module, (coords[0].mean(-1) / base[:, None]).T.double().numpy())
        heads = cos.shape[1]
        for head in sorted({0, 1, heads // 2, heads - 1}):
            want = [np.concatenate([x[0, head].double().numpy()] * 2, axis=1) for x in (cos, sin)]
            body = {"hf_config": {"_class_name": name, **change}, "grid": _body_grid(grid, fps=30, head=head)}
            _check(compute("rope", body), *want, tol, f"{name} {change} head {head}")
        with pytest.raises(SpecError) as e:  # which head
            compute("rope", {"hf_config": {"_class_name": name, **change}, "grid": _body_grid(grid)})
        assert e.value.loc == ("grid", "head") and e.value.kind == "missing", e.value
        with pytest.raises(SpecError) as e:
            compute(
                "rope", {"hf_config": {"_class_name": name, **change}, "grid": _body_grid(grid, head=heads)}
            )
        assert e.value.loc == ("grid", "head"), e.value


def test_sana_wm_vs_its_own_module():
    model, module = _built(SANA)
    saved = json.loads(json.dumps(_saved(SANA)))
    for grid in GRIDS:
        cos, sin = _sana_call(module, grid)
        pid = _grid_ids(*grid)
        tol = hf_zoo.tolerance(pid.max(axis=0), 1.0)
        for raw in (saved, {"_class_name": SANA}):
            by_grid = compute("rope", {"hf_config": raw, "grid": _body_grid(grid)})
            _check(by_grid, cos, sin, tol, f"{SANA} {grid} by grid")
            by_ids = compute("rope", {"hf_config": raw, "position_ids": pid.tolist()})
            _check(by_ids, cos, sin, tol, f"{SANA} {grid} by position_ids")
    change = OTHER[SANA]
    _, module = _built(SANA, change)
    cos, sin = _sana_call(module, GRIDS[0])
    got = compute("rope", {"hf_config": {"_class_name": SANA, **change}, "grid": _body_grid(GRIDS[0])})
    _check(got, cos, sin, hf_zoo.tolerance(_grid_ids(*GRIDS[0]).max(axis=0), 1.0), f"{SANA} {change}")


@pytest.mark.parametrize(
    "name, config, grid, loc",
    [
        (LTX[1], {"rope_type": "half"}, {"height": 2, "width": 2}, ("hf_config", "rope_type")),
        (LTX[1], {}, {"height": 2, "width": 2, "head": 0}, ("grid", "head")),
        (LTX[0], {}, {"height": 2, "width": 2, "head": 0}, ("grid", "head")),
        (
            LTX[2],
            {"rope_type": "split", "attention_head_dim": 63},
            {"height": 2, "width": 2, "head": 0},
            None,
        ),
        (LTX[0], {"num_attention_heads": 3, "attention_head_dim": 3}, {"height": 2, "width": 2}, None),
        (
            LTX[1],
            {"vae_scale_factors": [8, 32]},
            {"height": 2, "width": 2},
            ("hf_config", "vae_scale_factors"),
        ),
        (LTX[1], {}, {"height": 2, "width": 2, "fps": 0}, ("grid", "fps")),
        (LTX[2], {}, {"height": 2, "width": 2, "fps": "24"}, ("grid", "fps")),
        (LTX[2], {}, {"height": 2, "width": 2, "first_frame": -1}, ("grid", "first_frame")),
        (LTX[1], {"num_attention_heads": 10**9}, {"height": 2, "width": 2}, None),  # before any array
        (LTX[1], {"patch_size_t": 10**15}, {"frames": 3, "height": 2, "width": 2}, ("grid", "frames")),
        (LTX[1], {"patch_size": 10**12}, {"height": 2, "width": 2}, ("hf_config", "patch_size")),
        (LTX[0], {}, None, ("grid",)),
        (LTX[0], {}, {"height": 2, "width": 2, "text": 3}, ("grid", "text")),
        (SANA, {"use_pe": False}, {"height": 2, "width": 2}, ("hf_config", "use_pe")),
        (SANA, {}, {"height": 1025, "width": 2}, ("grid", "height")),
    ],
)
def test_bad_configs_and_grids_are_refused_naming_the_key(name, config, grid, loc):
    body = {"hf_config": {"_class_name": name, **config}}
    if grid is not None:
        body["grid"] = grid
    with pytest.raises(SpecError) as e:
        compute("rope", body)
    assert e.value.loc == (loc or ("hf_config", "attention_head_dim")), e.value


def test_position_ids_beside_an_ltx_grid_are_refused():
    with pytest.raises(SpecError) as e:
        compute(
            "rope",
            {"hf_config": {"_class_name": LTX[1]}, "grid": {"height": 2, "width": 2}, "position_ids": [[0]]},
        )
    assert e.value.loc[0] == "position_ids", e.value


def test_mrope_axes_take_coordinates():
    """The rope fields LTX's reading uses (rope_grid.py): ``axes_coords`` per axis of ``mrope_axes``,
    against the formula in float64 (frequency j at its axis's coordinate scale·i + offset,
    interleaved); the stored table's key gives the spec back."""
    freqs, axis = [3.0, 1.0, 0.5, 0.25, 0.125, 7.0], [2, 0, 1, 0, 1, 0]
    coords, ids = [[0.5, -1.0], [2 / 3, 0.25], [0.0, 0.0]], [[0, 1, 5, 9], [3, 0, 2, 1], [0, 0, 0, 0]]
    body = {
        "head_dim": 12,
        "inv_freq": freqs,
        "mrope_axes": axis,
        "axes_coords": coords,
        "layout": "interleaved",
        "position_ids": ids,
    }
    got = compute("rope", body)
    ang = np.array(
        [[(coords[a][0] * ids[a][t] + coords[a][1]) * f for f, a in zip(freqs, axis)] for t in range(4)]
    )
    tol = hf_zoo.tolerance(np.abs(ang).max(axis=1), 1.0)
    _check(
        got, np.repeat(np.cos(ang), 2, 1), np.repeat(np.sin(ang), 2, 1), tol, "mrope_axes with axes_coords"
    )
    assert got["cos"][:, :2].tolist() == [[1.0, 1.0]] * 4 and got["sin"][:, :2].tolist() == [[0.0, 0.0]] * 4
    req = pipeline.parse("rope", body)
    key = orjson.loads(orjson.dumps(ROPE.table_key(req.table.spec, req.table.variant)))
    assert ROPE.table_spec(key) == (req.table.spec, req.table.variant)
    with pytest.raises(SpecError) as e:  # a pair per axis of mrope_axes
        compute("rope", {**body, "axes_coords": coords[:2]})
    assert e.value.loc == ("axes_coords",), e.value


# -- over HTTP -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory, request):
    return serve_for_module(tmp_path_factory.mktemp("dzoo-ltx"), request, None, workers=1)


@pytest.fixture(scope="module")
def http(served):
    with httpx.Client(base_url=served.url, timeout=60) as c:
        yield c


@pytest.mark.parametrize("name", [*LTX, SANA])
def test_class_over_http(http, name):
    model, module = _built(name)
    grid = GRIDS[0]
    if name == SANA:
        cos, sin = _sana_call(module, grid)
        tol = hf_zoo.tolerance(_grid_ids(*grid).max(axis=0), 1.0)
    else:
        cos, sin, g = _ltx_call(model, module, grid, 30.0)
        tol = _tol(module, g)
    body = {"hf_config": _saved(name), "grid": _body_grid(grid, **({} if name == SANA else {"fps": 30}))}
    r = http.post("/v1/rope", json=body, headers={"accept": "application/x-safetensors"})
    assert r.status_code == 200, (name, r.text[:300])
    arrays, _ = read_safetensors(r.content)
    _check(arrays, cos, sin, tol, f"{name} over HTTP (binary)")
    j = http.post("/v1/rope", json=body)
    assert j.status_code == 200, j.text[:300]
    _check(j.json(), cos, sin, tol, f"{name} over HTTP (JSON)")
    bad = http.post("/v1/rope", json={**body, "grid": {"height": 2, "width": 2, "fps": -1}})
    assert bad.status_code == 422, (name, bad.status_code, bad.text[:300])


@pytest.mark.parametrize("change", [{}, {"rope_type": "split"}])
def test_kserve_v2_and_the_shared_memory_client(http, served, change):
    """LTX-2's grid body as KServe v2's spec parameter (no inputs: the grid gives the positions) and
    through Client.lookup on the server's engine, computed and then from the stored table in shared
    memory (the unrotated columns' axis and the coordinates kept in its key)."""
    from posenc.engine.reader.client import Client

    name = LTX[1]
    model, module = _built(name, change)
    cos, sin, g = _ltx_call(model, module, GRIDS[0], 30.0)
    if change:  # [heads, n, hd/2]: head 3's, as its attention applies it ([c | c])
        cos, sin = (np.concatenate([x[3]] * 2, axis=1) for x in (cos, sin))
    tol = _tol(module, g)
    body = {"hf_config": {"_class_name": name, **change}, "grid": _body_grid(GRIDS[0], fps=30)}
    if change:
        body["grid"]["head"] = 3
    r = http.post("/v2/models/rope/infer", json={"inputs": [], "parameters": {"spec": json.dumps(body)}})
    assert r.status_code == 200, r.text[:300]
    outs = {o["name"]: np.asarray(o["data"], np.float64).reshape(o["shape"]) for o in r.json()["outputs"]}
    _check(outs, cos, sin, tol, f"{name} {change} over v2")
    c = Client(namespace=served.namespace)
    _check(c.lookup("rope", body), cos, sin, tol, f"{name} {change} through Client.lookup, computed")
    req = c.resolve("rope", body)  # the first lookup asked the engine for the grid's table
    wait_for(lambda: c.view(req) is not None, 60, 0.02, what=f"{name} {change}'s grid table mapped")
    _check(
        c.lookup("rope", body), cos, sin, tol, f"{name} {change} through Client.lookup, from shared memory"
    )
