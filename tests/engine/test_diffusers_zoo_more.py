"""diffusers' rotary transformers of engine/models/diffusers_more.py (Allegro, Ideogram4, OmniGen,
Wan-Animate 2, AnyFlow-FAR), against each class's own positional code.

As tests/engine/test_diffusers_zoo.py (whose helpers this file uses): each class is built from its
config on the meta device with its positional module on the CPU, the module (or the function its
attention calls) is called as the transformer calls it, for the positions the model or its pipeline
builds, and posenc must give the same cos/sin within ``hf_zoo.tolerance`` through ``compute``, from
the config as diffusers saves it and from its ``_class_name`` (with only the keys the class has no
default for), for a config of other sizes, and over HTTP (JSON and binary).
"""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
import torch

from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from posenc.engine.core.formats import read_safetensors
from posenc.engine.models import diffusers_more
from tests.engine.test_diffusers_zoo import ATTR, _built, _check, _real
from tests.procs import serve_for_module

IDEOGRAM, OMNIGEN, ANIMATE, FAR, ALLEGRO = (
    "Ideogram4Transformer2DModel",
    "OmniGenTransformer2DModel",
    "WanAnimate2Transformer3DModel",
    "AnyFlowFARTransformer3DModel",
    "AllegroTransformer3DModel",
)
ATTR.update({IDEOGRAM: "rotary_emb", OMNIGEN: "rope", ANIMATE: None, FAR: "rope", ALLEGRO: None})


def _saved(name, config=None):
    """The config as diffusers saves it (``model.config``: the class's defaults filled in)."""
    model, _ = _built(name, config)
    return {"_class_name": name, **{k: v for k, v in dict(model.config).items() if not k.startswith("_")}}


def _rope(name, body, sel):
    return compute("rope", {"hf_config": json.loads(json.dumps({"_class_name": name, **body})), **sel})


# -- Ideogram4: Ideogram4MRoPE at the ids its pipeline packs ---------------------------------------

# (text tokens, padded text length, grid rows, grid columns)
PACKS = [(6, 8, 4, 5), (1, 1, 7, 2), (3, 5, 3, 2)]


def _ideogram_ids(text, pad, h, w):
    """Ideogram4Pipeline._prepare_ids: [left pad][text (i, i, i)][image 65536 + (0, row, column)]."""
    from diffusers.pipelines.ideogram4.pipeline_ideogram4 import Ideogram4Pipeline

    ids, _, _ = Ideogram4Pipeline._prepare_ids([text], h, w, pad, torch.device("cpu"))
    return ids


def _ideogram_case(module, pack):
    ids = _ideogram_ids(*pack)
    return ids[0].numpy().T, _real(module(ids))  # Ideogram4MRoPE.forward(position_ids [b, n, 3])


def test_ideogram4_vs_its_mrope():
    saved = _saved(IDEOGRAM)
    _, module = _built(IDEOGRAM)
    for pack in PACKS:
        pid, (cos, sin) = _ideogram_case(module, pack)
        assert pid.max() >= 65536, pid.max()  # the image's offset is in the positions compared
        sel = {"position_ids": pid.tolist()}
        full = _rope(IDEOGRAM, saved, sel)
        _check(full, cos, sin, pid, f"Ideogram4 {pack} (saved config)")
        bare = _rope(IDEOGRAM, {}, sel)
        _check(bare, cos, sin, pid, f"Ideogram4 {pack} (_class_name alone)")
        assert bare["spec"] == full["spec"]


@pytest.mark.parametrize(
    "change",
    [
        {"attention_head_dim": 64, "mrope_section": [12, 10, 10], "rope_theta": 500},  # covers d/2
        {"attention_head_dim": 64, "mrope_section": [4, 3, 9]},  # rows and columns uneven, t the rest
    ],
)
def test_ideogram4_other_sizes(change):
    _, module = _built(IDEOGRAM, change)
    pid, (cos, sin) = _ideogram_case(module, PACKS[0])
    _check(_rope(IDEOGRAM, change, {"position_ids": pid.tolist()}), cos, sin, pid, f"Ideogram4 {change}")


def test_ideogram4_refuses_a_section_past_its_frequencies():
    """mrope_section[1] = 50 of d/2 = 128: its index arange(1, 150, 3) leaves the frequencies."""
    change = {"mrope_section": [24, 50, 20]}
    _, module = _built(IDEOGRAM, change)
    with pytest.raises(IndexError):
        module(_ideogram_ids(*PACKS[0]))
    with pytest.raises(SpecError) as e:
        _rope(IDEOGRAM, change, {"position_ids": [[0], [0], [0]]})
    assert e.value.loc == ("hf_config", "mrope_section", 1), e.value


# -- OmniGen: Phi-3's su-scaled rope at its collator's positions -----------------------------------


def _factors(n, lo, hi):
    return np.round(np.linspace(lo, hi, n), 4).tolist()


SCALING = {"type": "su", "short_factor": _factors(48, 1.0, 1.5), "long_factor": _factors(48, 1.0, 40.0)}
# (text tokens, padded text length, image tokens): the last passes original_max_position_embeddings
COLLATES = [(5, 7, 16), (1, 3, 64), (20, 20, 4200)]


def _omnigen_case(module, collate):
    """OmniGenCollator.create_position (its pipeline's positions), then rope(hidden, position_ids)."""
    from diffusers.pipelines.omnigen.processor_omnigen import OmniGenCollator

    text, pad, image = collate
    mask = torch.tensor([[0] * (pad - text) + [1] * text])
    position_ids = OmniGenCollator().create_position(mask, [image])
    return position_ids.numpy(), _real(module(torch.zeros(1), position_ids))


def test_omnigen_vs_its_su_scaled_rope():
    saved = _saved(OMNIGEN, {"rope_scaling": SCALING})
    _, module = _built(OMNIGEN, {"rope_scaling": SCALING})
    for collate in COLLATES:
        pid, (cos, sin) = _omnigen_case(module, collate)
        sel = {"positions": pid[0].tolist()}
        full = _rope(OMNIGEN, saved, sel)
        _check(full, cos, sin, pid, f"OmniGen {collate} (saved config)")
        bare = _rope(OMNIGEN, {"rope_scaling": SCALING}, sel)  # rope_scaling: it has no default
        _check(bare, cos, sin, pid, f"OmniGen {collate} (_class_name and rope_scaling)")
        assert bare["spec"] == full["spec"]
    assert pid.max() + 1 > saved["original_max_position_embeddings"]  # the long factors were compared


def test_omnigen_other_sizes():
    """Another head, θ, and max_position_embeddings at the original one (attention factor 1)."""
    change = {
        "hidden_size": 1536,
        "num_attention_heads": 24,
        "rope_base": 500,
        "max_position_embeddings": 4096,
        "rope_scaling": {"short_factor": _factors(32, 0.5, 2.0), "long_factor": _factors(32, 1.0, 8.0)},
    }
    _, module = _built(OMNIGEN, change)
    for collate in (COLLATES[0], COLLATES[2]):
        pid, (cos, sin) = _omnigen_case(module, collate)
        got = _rope(OMNIGEN, change, {"positions": pid[0].tolist()})
        _check(got, cos, sin, pid, f"OmniGen {change['hidden_size']} {collate}")


def test_omnigen_without_its_factors_is_refused_naming_the_key():
    with pytest.raises(TypeError):  # the class itself: rope_scaling["short_factor"] of None
        _built(OMNIGEN)
    with pytest.raises(SpecError) as e:
        _rope(OMNIGEN, {}, {"positions": [0, 1]})
    assert e.value.loc == ("hf_config", "rope_scaling") and "short_factor" in e.value.msg, e.value
    with pytest.raises(SpecError) as e:  # d/2 = 48 factors
        _rope(OMNIGEN, {"rope_scaling": {**SCALING, "short_factor": [1.0] * 47}}, {"positions": [0]})
    assert e.value.loc == ("hf_config", "rope_scaling", "short_factor"), e.value


# -- Wan-Animate 2: rope_apply over the generation grid and the reference latent --------------------


def _apply(model, grid, offsets, stride):
    """rope_apply(x, grid_sizes, model._rope_freqs(offsets), stride) on x whose pairs are (1, 0):
    the rotated pairs are (cos, sin) of each token's angles, as its attention multiplies them."""
    import sys

    rope_apply = sys.modules[type(model).__module__].rope_apply
    d = model.config.dim // model.config.num_heads
    n = int(np.prod(grid))
    x = torch.zeros(1, n, 1, d)
    x[..., 0::2] = 1.0
    out = rope_apply(x, torch.tensor([grid]), model._rope_freqs(offsets, torch.device("cpu")), stride)[
        0, :, 0
    ]
    cos, sin = out[:, 0::2], out[:, 1::2]
    return cos.repeat_interleave(2, dim=1), sin.repeat_interleave(2, dim=1)


def _animate_case(model, grid, ref=None):
    """The cached pass: the generation tokens (offsets 0, stride 1), then the reference keys at the
    refer_offset_* (a negative one: the reference grid's size on that axis) and every refer_stride-th frame."""
    cos, sin = _apply(model, grid, (0, 0, 0), 1)
    ids = [np.stack(np.meshgrid(*map(np.arange, grid), indexing="ij")).reshape(3, -1)]
    if ref is not None:
        c = model.config
        offsets = tuple(
            o if o >= 0 else ref[a]
            for a, o in enumerate((c.refer_offset_t, c.refer_offset_h, c.refer_offset_w))
        )
        rcos, rsin = _apply(model, ref, offsets, c.refer_stride)
        cos, sin = torch.cat([cos, rcos]), torch.cat([sin, rsin])
        rid = np.stack(np.meshgrid(*map(np.arange, ref), indexing="ij")).reshape(3, -1)
        ids.append(rid * np.array([[c.refer_stride], [1], [1]]) + np.array(offsets)[:, None])
    return np.concatenate(ids, axis=1), (cos.double().numpy(), sin.double().numpy())


ANIMATE_GRIDS = [((3, 4, 5), None), ((1, 7, 2), (1, 7, 2)), ((2, 3, 2), (3, 2, 4))]


def _animate_grid(grid, ref):
    body = dict(zip(("frames", "height", "width"), grid))
    if ref is not None:
        body.update(zip(diffusers_more.REFERENCE, ref))
    return {"grid": body}


@pytest.mark.parametrize(
    "change",
    [
        {},
        {
            "dim": 768,
            "num_heads": 8,
            "refer_offset_t": 3,
            "refer_offset_h": -1,
            "refer_offset_w": 0,
            "refer_stride": 2,
        },
    ],
)
def test_wan_animate2_vs_its_rope_apply(change):
    model, _ = _built(ANIMATE, change)
    saved = _saved(ANIMATE, change)
    for grid, ref in ANIMATE_GRIDS:
        pid, (cos, sin) = _animate_case(model, grid, ref)
        what = f"Wan-Animate 2 {change} {grid} {ref}"
        for body in (saved, change):
            _check(_rope(ANIMATE, body, _animate_grid(grid, ref)), cos, sin, pid, f"{what} grid")
        _check(_rope(ANIMATE, change, {"position_ids": pid.tolist()}), cos, sin, pid, f"{what} position_ids")


def test_wan_animate2_refuses_grids_past_its_tables_and_odd_heads():
    model, _ = _built(ANIMATE)
    with pytest.raises(RuntimeError):  # its own rope_apply: 513 frames of a 512-row table
        _apply(model, (513, 1, 1), (0, 0, 0), 1)
    for grid, key in (
        ({"frames": 513, "height": 1, "width": 1}, "frames"),
        (
            {"height": 1, "width": 1, "reference_frames": 2, "reference_height": 1, "reference_width": 513},
            "reference_width",
        ),
        ({"height": 1, "width": 1, "reference_frames": 2}, "reference_height"),
    ):
        with pytest.raises(SpecError) as e:
            _rope(ANIMATE, {}, {"grid": grid})
        assert e.value.loc == ("grid", key), e.value
    with pytest.raises(RuntimeError):  # 3 reference frames every 300th: rows 0, 300 and 600 of 512
        _apply(model, (3, 1, 1), (0, 0, 0), 300)
    ref = {"height": 1, "width": 1, **dict.fromkeys(diffusers_more.REFERENCE, 3)}
    with pytest.raises(SpecError) as e:
        _rope(ANIMATE, {"refer_stride": 300}, {"grid": ref})
    assert e.value.loc == ("grid", "reference_frames"), e.value
    assert _rope(ANIMATE, {"refer_stride": 255}, {"grid": ref})["cos"] is not None  # rows 0, 255, 510
    with pytest.raises(SpecError) as e:  # 5120 // 1024 = 5: rope_params asserts even widths
        _rope(ANIMATE, {"num_heads": 1024}, {"grid": {"height": 1, "width": 1}})
    assert e.value.loc == ("hf_config", "dim"), e.value


# -- AnyFlow-FAR: AnyFlowCausalRotaryPosEmbed over compressed, then full-resolution frames ---------

# grid: frames, compressed frames (the first ones), full rows and columns in patches
FAR_GRIDS = [
    {"frames": 5, "compressed_frames": 2, "height": 4, "width": 6},
    {"frames": 3, "height": 3, "width": 2},
    {"frames": 4, "compressed_frames": 4, "height": 2, "width": 2},
    {"frames": 2, "compressed_frames": 1, "height": 1, "width": 3},  # a compressed grid of 0 rows
]


def _far_case(model, module, grid):
    """AnyFlowCausalRotaryPosEmbed.forward(far_cfg, device) with the far_cfg its forward builds from a
    latent of height · patch_size rows (compressed_frame_shape: latent // compressed_patch_size): the
    key's frequencies, complex, compressed tokens first."""
    c = model.config
    f, h, w = grid.get("frames", 1), grid["height"], grid["width"]
    shape = (
        grid.get("compressed_height", h * c.patch_size[1] // c.compressed_patch_size[1]),
        grid.get("compressed_width", w * c.patch_size[2] // c.compressed_patch_size[2]),
    )
    far_cfg = {
        "total_frames": f,
        "full_frame_shape": (h, w),
        "compressed_frame_shape": shape,
        "num_compressed_frames": grid.get("compressed_frames", 0),
    }
    z = module(far_cfg, torch.device("cpu"))["key"]
    z = z.reshape(-1, z.shape[-1])
    cos = z.real.double().repeat_interleave(2, dim=1).numpy()
    sin = z.imag.double().repeat_interleave(2, dim=1).numpy()
    return np.array([[max(f, h, w, *shape) * 6 + 6]]), (cos, sin)  # a bound of |coordinate|


@pytest.mark.parametrize(
    "change, grids",
    [
        ({}, FAR_GRIDS),
        (
            {
                "attention_head_dim": 64,
                "patch_size": [1, 1, 1],
                "compressed_patch_size": [2, 3, 6],
                "rope_max_seq_len": 64,
            },
            [
                {"frames": 6, "compressed_frames": 3, "height": 7, "width": 12},
                {"frames": 1, "height": 2, "width": 1},
            ],
        ),
        (  # 6 // 4 = 1: the compressed grid is the latent's // 6, given here
            {"patch_size": [1, 4, 4], "compressed_patch_size": [1, 6, 6]},
            [
                {
                    "frames": 3,
                    "compressed_frames": 2,
                    "height": 3,
                    "width": 5,
                    "compressed_height": 2,
                    "compressed_width": 3,
                }
            ],
        ),
    ],
)
def test_anyflow_far_vs_its_rotary_module(change, grids):
    name = FAR
    model, module = _built(name, change)
    saved = _saved(name, change)
    for grid in grids:
        pid, (cos, sin) = _far_case(model, module, grid)
        assert cos.shape[0] == len(_rope(name, change, {"grid": grid})["cos"])
        for body in (saved, change):
            _check(_rope(name, body, {"grid": grid}), cos, sin, pid, f"AnyFlow-FAR {change} {grid}")


def test_anyflow_far_refuses_what_its_module_cannot_pool_to_a_rotation():
    """A pooling window of 7 positions: the averaged e^(i·f·p) of f = 1 points away from its centre."""
    name = FAR
    change = {"compressed_patch_size": [1, 14, 14]}
    model, module = _built(name, change)
    grid = {"frames": 1, "compressed_frames": 1, "height": 7, "width": 7}
    _, (cos, _) = _far_case(model, module, grid)
    # row 0 averages positions 0..6 (centre 3); column 44 is the rows' first frequency, f = 1
    assert np.cos(3.0) < 0 < cos[0, 44], cos[0, 44]  # turned by π from the centre's
    with pytest.raises(SpecError) as e:
        _rope(name, change, {"grid": grid})
    assert e.value.loc == ("hf_config", "compressed_patch_size"), e.value
    for grid, key in (
        ({"frames": 2, "compressed_frames": 3, "height": 1, "width": 1}, "compressed_frames"),
        ({"height": 1025, "width": 1}, "height"),
    ):
        with pytest.raises(SpecError) as e:
            _rope(name, {}, {"grid": grid})
        assert e.value.loc == ("grid", key), e.value


# -- Allegro: its pipeline's rope, applied by apply_rotary_emb_allegro --------------------------------

ALLEGRO_GRIDS = [(3, 4, 5), (1, 7, 2), (2, 3, 2)]


def _allegro_case(model, grid):
    """AllegroPipeline._prepare_rotary_positional_embeddings (a latent of frames x height x width
    patches, vae_scale_factor_spatial 8), then apply_rotary_emb_allegro on two probes x = 1 and
    x = s = [-1.. | +1..] per third: it returns cos + s·sin and s·cos − sin."""
    from types import SimpleNamespace

    from diffusers.models.embeddings import apply_rotary_emb_allegro
    from diffusers.pipelines.allegro.pipeline_allegro import AllegroPipeline

    f, h, w = grid
    p = model.config.patch_size * 8
    pipe = SimpleNamespace(vae_scale_factor_spatial=8, transformer=model)
    freqs, pos = AllegroPipeline._prepare_rotary_positional_embeddings(pipe, 1, h * p, w * p, f, "cpu")
    d, n = model.config.attention_head_dim, f * h * w
    third = torch.ones(d // 3)
    third[: d // 6] = -1
    sign = third.repeat(3)
    one = apply_rotary_emb_allegro(torch.ones(1, 1, n, d), freqs, pos)[0, 0].double()
    signed = apply_rotary_emb_allegro(sign.expand(1, 1, n, d).clone(), freqs, pos)[0, 0].double()
    sign = sign.double()
    pid = np.stack([t[0].numpy() for t in pos])
    return pid, (((one + sign * signed) / 2).numpy(), (sign * (one - sign * signed) / 2).numpy())


@pytest.mark.parametrize(
    "change",
    [
        {},
        {
            "attention_head_dim": 48,
            "interpolation_scale_t": 1.0,
            "interpolation_scale_h": 0.75,
            "patch_size": 1,
        },
    ],
)
def test_allegro_vs_its_pipelines_rope(change):
    name = ALLEGRO
    model, _ = _built(name, change)
    saved = _saved(name, change)
    for grid in ALLEGRO_GRIDS:
        pid, (cos, sin) = _allegro_case(model, grid)
        assert pid.tolist() == np.indices(grid).reshape(3, -1).tolist()  # its cartesian_prod, row-major
        sel = dict(zip(("frames", "height", "width"), grid))
        for body in (saved, change):
            _check(_rope(name, body, {"grid": sel}), cos, sin, pid, f"Allegro {change} {grid} grid")
        _check(_rope(name, change, {"position_ids": pid.tolist()}), cos, sin, pid, f"Allegro {grid} ids")


def test_allegro_refuses_heads_its_thirds_cannot_pair_and_scales_of_zero():
    name = ALLEGRO
    for change, key in (
        ({"attention_head_dim": 64}, "attention_head_dim"),
        ({"interpolation_scale_h": 0}, "interpolation_scale_h"),
    ):
        with pytest.raises(SpecError) as e:
            _rope(name, change, {"grid": {"height": 2, "width": 2}})
        assert e.value.loc == ("hf_config", key), e.value


def test_a_grid_of_two_parts_counts_their_sum():
    """A reference latent or compressed frames follow the latent's tokens: a request's token count is
    the parts' sum (docs/reference.md's examples), and an unknown key is refused naming it."""
    ref = {"frames": 4, "height": 30, "width": 52, "reference_height": 30, "reference_width": 52}
    assert len(_rope(ANIMATE, {}, {"grid": ref})["cos"]) == 4 * 30 * 52 + 30 * 52
    far = {"frames": 9, "compressed_frames": 4, "height": 30, "width": 52}
    assert len(_rope(FAR, {}, {"grid": far})["cos"]) == 5 * 30 * 52 + 4 * 15 * 26
    for name in (ANIMATE, FAR):
        with pytest.raises(SpecError) as e:
            _rope(name, {}, {"grid": {"height": 2, "width": 2, "text": 3}})
        assert e.value.loc == ("grid", "text") and e.value.kind == "extra_forbidden", e.value


# -- over HTTP -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory, request):
    return serve_for_module(tmp_path_factory.mktemp("dzoo_more"), request, None, workers=1)


@pytest.fixture(scope="module")
def http(served):
    with httpx.Client(base_url=served.url, timeout=60) as c:
        yield c


def _cases():
    _, ideogram = _built(IDEOGRAM)
    pid, (cos, sin) = _ideogram_case(ideogram, PACKS[0])
    yield IDEOGRAM, _saved(IDEOGRAM), {"position_ids": pid.tolist()}, pid, cos, sin
    _, omnigen = _built(OMNIGEN, {"rope_scaling": SCALING})
    pid, (cos, sin) = _omnigen_case(omnigen, COLLATES[2])
    yield OMNIGEN, _saved(OMNIGEN, {"rope_scaling": SCALING}), {"positions": pid[0].tolist()}, pid, cos, sin
    animate, _ = _built(ANIMATE)
    grid, ref = ANIMATE_GRIDS[2]
    pid, (cos, sin) = _animate_case(animate, grid, ref)
    yield ANIMATE, _saved(ANIMATE), _animate_grid(grid, ref), pid, cos, sin
    allegro, _ = _built(ALLEGRO)
    pid, (cos, sin) = _allegro_case(allegro, ALLEGRO_GRIDS[0])
    sel = {"grid": dict(zip(("frames", "height", "width"), ALLEGRO_GRIDS[0]))}
    yield ALLEGRO, _saved(ALLEGRO), sel, pid, cos, sin
    far, module = _built(FAR)
    pid, (cos, sin) = _far_case(far, module, FAR_GRIDS[0])
    yield FAR, _saved(FAR), {"grid": FAR_GRIDS[0]}, pid, cos, sin


def test_over_http(http):
    for name, config, sel, pid, cos, sin in _cases():
        body = {"hf_config": config, **sel}
        r = http.post("/v1/rope", json=body, headers={"accept": "application/x-safetensors"})
        assert r.status_code == 200, (name, r.text[:300])
        arrays, _ = read_safetensors(r.content)
        _check(
            {k: arrays[k].astype(np.float64) for k in ("cos", "sin")}, cos, sin, pid, f"{name} HTTP binary"
        )
        j = http.post("/v1/rope", json=body)
        assert j.status_code == 200, (name, j.text[:300])
        _check({k: np.array(j.json()[k]) for k in ("cos", "sin")}, cos, sin, pid, f"{name} HTTP JSON")
    r = http.post("/v1/rope", json={"hf_config": {"_class_name": OMNIGEN}, "positions": [0]})
    assert r.status_code == 422 and "rope_scaling" in r.text, r.text[:300]


def test_the_co_located_client_reads_the_same(served):
    """Client.lookup (shared memory, the engine's tables): mrope_axes, longrope, axes_coords."""
    from posenc.engine.reader.client import Client

    client = Client(namespace=served.namespace)
    for name, config, sel, pid, cos, sin in _cases():
        got = client.lookup("rope", {"hf_config": config, **sel})
        got = {k: np.asarray(got[k], dtype=np.float64) for k in ("cos", "sin")}
        _check(got, cos, sin, pid, f"{name} Client.lookup")


def test_kserve_v2_reads_the_config_and_grid_in_its_spec(http):
    """KServe v2: the config and the grid in ``parameters.spec``, no position input."""
    for name, config, sel, pid, cos, sin in _cases():
        if "grid" not in sel:
            continue
        spec = json.dumps({"hf_config": config, **sel})
        r = http.post("/v2/models/rope/infer", json={"parameters": {"spec": spec}, "inputs": []})
        assert r.status_code == 200, (name, r.text[:300])
        out = {
            o["name"]: np.array(o["data"], dtype=np.float64).reshape(o["shape"]) for o in r.json()["outputs"]
        }
        _check(out, cos, sin, pid, f"{name} over KServe v2")
