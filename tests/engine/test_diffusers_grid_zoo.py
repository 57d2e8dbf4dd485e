"""diffusers' sin-cos position tables read from their transformers' configs (engine/models/
diffusers_grid.py, and SD3's and CogVideoX's records in vision.py), each held to what the class's
own embedding module adds to its tokens: the transformer is built from its config (the positional
keys at their defaults, or at another sample size; unrelated keys small), its patch embedding's
projections are zeroed, and its forward on a zero latent is the table it hands the model (SD3's and
OmniGen's centred crops, CogView3-Plus's top-left crop after the text, CogVideoX's and ConsisID's
text rows). posenc answers the same config through ``compute`` and over HTTP (a real server),
within diffusers' float32 rounding of the coordinates. The classes diffusers_zoo.json catalogues
as sin-cos are all read; the learned tables are refused, with the reason."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import httpx
import numpy as np
import pytest
import torch
from diffusers import (
    CogVideoXTransformer3DModel,
    CogView3PlusTransformer2DModel,
    ConsisIDTransformer3DModel,
    DiTTransformer2DModel,
    LatteTransformer3DModel,
    OmniGenTransformer2DModel,
    PixArtTransformer2DModel,
    SanaTransformer2DModel,
    SD3Transformer2DModel,
    Transformer2DModel,
    TransformerTemporalModel,
)

from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from posenc.engine.core.formats import read_safetensors
from posenc.engine.models import diffusers_grid, registry
from tests.integration.kserve_cases import bits, clients_of, wait_grpc_ready
from tests.numeric import assert_close, spec_error
from tests.procs import Procs
from tests.shm import shm_files


def _zero(module: torch.nn.Module) -> torch.nn.Module:
    """The module with every parameter zero: its forward adds nothing but its positions."""
    with torch.no_grad():
        for p in module.parameters():
            p.zero_()
    return module


def _patch(model, h: int, w: int, channels: int) -> np.ndarray:
    """The model's PatchEmbed (OmniGenPatchEmbed) on a zero latent of h × w patches."""
    if isinstance(model, OmniGenTransformer2DModel):
        pe, kw = model.patch_embedding, {"is_input_image": False}
    else:
        pe, kw = (model.patch_embed if isinstance(model, SanaTransformer2DModel) else model.pos_embed), {}
    pe = _zero(pe)
    p = pe.patch_size
    with torch.no_grad():
        out = pe(torch.zeros(1, channels, h * p, w * p), **kw)
    return out[0].double().numpy()


def _cogview3plus(model, h, w, text=5):
    pe = _zero(model.patch_embed)
    p = pe.patch_size
    with torch.no_grad():
        out = pe(torch.zeros(1, pe.in_channels, h * p, w * p), torch.zeros(1, text, pe.text_hidden_size))
    return out[0].double().numpy()


def _cogvideox(model, frames, h, w):
    pe = _zero(model.patch_embed)
    p = pe.patch_size
    text = torch.zeros(1, pe.max_text_seq_length, pe.text_proj.in_features)
    with torch.no_grad():
        out = pe(text, torch.zeros(1, frames, pe.proj.in_channels, h * p, w * p))
    return out[0].double().numpy()


# class -> (small values of keys that do not touch the positions, a second sample size)
SMALL = {
    DiTTransformer2DModel: ({"num_layers": 0}, {"sample_size": 20}),
    PixArtTransformer2DModel: ({"num_layers": 0, "caption_channels": 8}, {"sample_size": 256}),
    Transformer2DModel: (
        {
            "num_layers": 0,
            "in_channels": 4,
            "patch_size": 2,
            "sample_size": 64,
            "norm_type": "ada_norm_single",
            "caption_channels": 8,
            "num_embeds_ada_norm": 1000,
        },
        {"sample_size": 192, "interpolation_scale": 1.5},
    ),
    SanaTransformer2DModel: (
        {
            "num_layers": 0,
            "interpolation_scale": 2,
            "caption_channels": 8,
            "cross_attention_dim": 8,
            "num_cross_attention_heads": 1,
            "cross_attention_head_dim": 8,
        },
        {"sample_size": 24, "patch_size": 2, "interpolation_scale": 0.5},
    ),
    LatteTransformer3DModel: (
        {
            "num_layers": 0,
            "patch_size": 2,
            "in_channels": 4,
            "caption_channels": 8,
            "norm_type": "ada_norm_single",
            "num_embeds_ada_norm": 1000,
        },
        {"sample_size": 160},
    ),
    OmniGenTransformer2DModel: (
        {
            "num_layers": 0,
            "vocab_size": 8,
            "pad_token_id": 0,
            "intermediate_size": 8,
            "rope_scaling": {"short_factor": [1.0] * 48, "long_factor": [1.0] * 48},
        },
        {"pos_embed_max_size": 40, "hidden_size": 96},
    ),
    CogView3PlusTransformer2DModel: (
        {"num_layers": 0, "text_embed_dim": 8, "time_embed_dim": 8},
        {"pos_embed_max_size": 24, "attention_head_dim": 8},
    ),
    SD3Transformer2DModel: (
        {"num_layers": 0, "joint_attention_dim": 8, "caption_projection_dim": 8, "pooled_projection_dim": 8},
        {"sample_size": 64, "pos_embed_max_size": 48},
    ),
    CogVideoXTransformer3DModel: (
        {"num_layers": 0, "text_embed_dim": 8, "time_embed_dim": 8},
        {"sample_height": 24, "sample_width": 40, "sample_frames": 17, "spatial_interpolation_scale": 1.5},
    ),
    ConsisIDTransformer3DModel: (
        {"num_layers": 0, "text_embed_dim": 8, "time_embed_dim": 8},
        {"sample_height": 20, "sample_width": 28, "sample_frames": 9, "max_text_seq_length": 3},
    ),
}
# OmniGen's defaults build a 192² × 3072 table (about 20 s and 1 GB in diffusers' float64)
HEAVY = {("OmniGenTransformer2DModel", "default")}
GRIDS = [
    pytest.param(name, v, marks=[pytest.mark.slow] if (name, v) in HEAVY else [])
    for name, v in sorted((cls.__name__, v) for cls in SMALL for v in ("default", "other"))
]
CLASS = {cls.__name__: cls for cls in SMALL}


def _build(name: str, variant: str):
    cls = CLASS[name]
    small, other = SMALL[cls]
    model = cls(**{**small, **(other if variant == "other" else {})})
    return model, json.loads(model.to_json_string())


def _theirs(model) -> np.ndarray:
    """The table the model's own embedding adds to its tokens at its configured sample size."""
    c = model.config
    if isinstance(model, (CogVideoXTransformer3DModel, ConsisIDTransformer3DModel)):
        frames = (c.sample_frames - 1) // c.temporal_compression_ratio + 1
        return _cogvideox(model, frames, c.sample_height // c.patch_size, c.sample_width // c.patch_size)
    if isinstance(model, CogView3PlusTransformer2DModel):  # the whole buffer, no text
        m = c.pos_embed_max_size
        return _cogview3plus(model, m, m, text=0)
    if isinstance(model, (SD3Transformer2DModel, OmniGenTransformer2DModel)):  # the whole buffer
        m = c.pos_embed_max_size
        return _patch(model, m, m, c.in_channels)
    n = c.sample_size // c.patch_size
    return _patch(model, n, n, c.in_channels)


def _tol(table_rows: int) -> float:
    # diffusers rounds each coordinate (< the grid's side, or a frame index) through float32
    # before the sine (relative 6e-8), then the table to float32: transformers' zoo tolerance
    # (docs/reference.md) at the largest coordinate
    return 1e-6 + 2.5e-7 * np.sqrt(table_rows)


def _rows(n: int, rng, most: int = 3000) -> list[int]:
    """Every row of a table of n rows, or its first and last and a random sample of them."""
    if n <= most:
        return list(range(n))
    return sorted({0, n - 1, *rng.choice(n, most - 2, replace=False).tolist()})


@pytest.mark.parametrize("name,variant", GRIDS)
def test_each_class_table_is_its_patch_embeddings(name, variant, rng):
    model, cfg = _build(name, variant)
    want = _theirs(model)
    rows = _rows(want.shape[0], rng)
    out = compute("sinusoidal-grid", {"hf_config": cfg, "positions": rows})
    assert_close(out["encoding"], want[rows], _tol(want.shape[0]), what=f"{name} {variant}")


def test_latte_frames_are_its_temporal_table():
    model, cfg = _build("LatteTransformer3DModel", "default")
    want = model.temp_pos_embed[0].double().numpy()
    out = compute("sinusoidal", {"hf_config": cfg, "positions": {"start": 0, "stop": want.shape[0]}})
    assert_close(out["encoding"], want, 1e-6 + 2.5e-7 * want.shape[0], what="Latte frames")


@pytest.mark.parametrize("frames", [5, 24])
def test_transformer_temporal_frames_are_its_block_table(frames):
    model = TransformerTemporalModel(
        num_attention_heads=4,
        attention_head_dim=10,
        in_channels=32,
        positional_embeddings="sinusoidal",
        num_positional_embeddings=24,
    )
    cfg = json.loads(model.to_json_string())
    with torch.no_grad():
        want = model.transformer_blocks[0].pos_embed(torch.zeros(1, frames, 40))[0].double().numpy()
    out = compute("sinusoidal", {"hf_config": cfg, "positions": {"start": 0, "stop": frames}})
    assert_close(out["encoding"], want, 1e-6 + 2.5e-7 * frames, what="TransformerTemporalModel")


def _all_records():
    for name, by in registry.CLASSES.items():
        for family, record in by.items():
            if family in ("sinusoidal-grid", "sinusoidal"):
                yield name, family, record


def test_defaults_are_the_classes():
    """Each record's defaults are its class's __init__ defaults."""
    import diffusers

    for name, family, record in _all_records():
        init = inspect.signature(getattr(diffusers, name).__init__).parameters
        for k, v in record.defaults.items():
            assert init[k].default == v, (name, family, k)


def test_every_sin_cos_class_of_the_catalogue_is_read():
    zoo = json.loads((registry.pathlib.Path(registry.__file__).parent / "diffusers_zoo.json").read_text())
    sincos = {name for name, row in zoo["classes"].items() if row["kind"] == "sin-cos"}
    read = {name for name, _, _ in _all_records()}
    assert sincos <= read, sorted(sincos - read)


# class -> a token grid other than its sample size's (patches; frames; CogView3-Plus's text tokens)
GRID = {
    "DiTTransformer2DModel": {"height": 10, "width": 14},
    "PixArtTransformer2DModel": {"height": 48, "width": 80},
    "Transformer2DModel": {"height": 20, "width": 12},
    "SanaTransformer2DModel": {"height": 24, "width": 40},
    "LatteTransformer3DModel": {"height": 16, "width": 24},
    "OmniGenTransformer2DModel": {"height": 24, "width": 33},  # of its "other" (40²) table
    "CogView3PlusTransformer2DModel": {"height": 30, "width": 50, "text": 7},
    "SD3Transformer2DModel": {"height": 40, "width": 73},
    "CogVideoXTransformer3DModel": {"frames": 3, "height": 12, "width": 20},
    "ConsisIDTransformer3DModel": {"frames": 2, "height": 9, "width": 16},
}


def _theirs_at(model, grid) -> np.ndarray:
    """The table the model's own embedding adds to a latent of ``grid``."""
    h, w = grid["height"], grid["width"]
    if "frames" in grid:
        return _cogvideox(model, grid["frames"], h, w)
    if isinstance(model, CogView3PlusTransformer2DModel):
        return _cogview3plus(model, h, w, text=grid["text"])
    return _patch(model, h, w, model.config.in_channels)


@pytest.fixture(scope="module")
def server(tmp_path_factory, request):
    """``posenc serve`` (one HTTP worker and its KServe v2 gRPC server), stopped cleanly at the end."""
    procs = Procs(tmp_path_factory.mktemp("diffusers-grid"))
    s = procs.serve(None, workers=1, grpc=True)

    def stop():
        assert s.stop() == 0, s.output()
        procs.cleanup()
        assert shm_files(s.namespace) == []

    request.addfinalizer(stop)
    wait_grpc_ready(s)
    return s


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


@pytest.mark.parametrize("name", sorted(GRID))
def test_a_token_grid_is_the_table_its_latent_gets(name, http, rng):
    """``grid`` names the latent: the table is the one the class builds (or crops) for it, through
    compute and over HTTP (binary and JSON)."""
    model, cfg = _build(name, "other" if (name, "default") in HEAVY else "default")
    want = _theirs_at(model, GRID[name])
    rows = _rows(want.shape[0], rng, most=2000)
    body = {"hf_config": cfg, "grid": GRID[name], "positions": rows}
    tol = _tol(want.shape[0])
    assert_close(compute("sinusoidal-grid", body)["encoding"], want[rows], tol, what=f"{name} compute")
    r = http.post("/v1/sinusoidal-grid", json=body, headers={"accept": "application/x-safetensors"})
    assert r.status_code == 200, (name, r.text[:300])
    arrays, _ = read_safetensors(r.content)
    assert_close(arrays["encoding"], want[rows], tol, what=f"{name} over HTTP")
    r = http.post("/v1/sinusoidal-grid", json={**body, "positions": rows[:5]})
    assert r.status_code == 200, (name, r.text[:300])
    assert_close(np.array(r.json()["encoding"]), want[rows[:5]], tol, what=f"{name} JSON")


def test_default_table_over_http(http):
    model, cfg = _build("DiTTransformer2DModel", "other")
    want = _theirs(model)
    r = http.post(
        "/v1/sinusoidal-grid", json={"hf_config": cfg}, headers={"accept": "application/x-safetensors"}
    )
    assert r.status_code == 200, r.text[:300]
    arrays, _ = read_safetensors(r.content)
    assert_close(arrays["encoding"], want, _tol(want.shape[0]), what="DiT over HTTP")


@pytest.mark.parametrize(
    "family,cfg,extra,loc",
    [
        (
            "sinusoidal-grid",
            {"_class_name": "SanaTransformer2DModel"},
            {},
            ("hf_config", "interpolation_scale"),
        ),
        (
            "sinusoidal-grid",
            {"_class_name": "Transformer2DModel", "in_channels": 4},
            {},
            ("hf_config", "patch_size"),
        ),
        (
            "sinusoidal-grid",
            {"_class_name": "Transformer2DModel", "num_vector_embeds": 10, "sample_size": 8},
            {},
            ("hf_config", "num_vector_embeds"),
        ),
        (
            "sinusoidal-grid",
            {"_class_name": "Transformer2DModel", "in_channels": 4, "patch_size": 2},
            {},
            ("hf_config", "sample_size"),
        ),
        ("sinusoidal-grid", {"_class_name": "LatteTransformer3DModel"}, {}, ("hf_config", "patch_size")),
        (
            "sinusoidal-grid",
            {"_class_name": "ConsisIDTransformer3DModel", "use_rotary_positional_embeddings": True},
            {},
            ("hf_config", "use_rotary_positional_embeddings"),
        ),
        (
            "sinusoidal",
            {"_class_name": "TransformerTemporalModel"},
            {},
            ("hf_config", "positional_embeddings"),
        ),
        (
            "sinusoidal",
            {"_class_name": "TransformerTemporalModel", "positional_embeddings": "sinusoidal"},
            {},
            ("hf_config", "num_positional_embeddings"),
        ),
        (
            "sinusoidal-grid",
            {"_class_name": "SD3Transformer2DModel"},
            {"grid": {"height": 97, "width": 8}},
            ("grid", "height"),
        ),
        (
            "sinusoidal-grid",
            {"_class_name": "OmniGenTransformer2DModel"},
            {"grid": {"height": 8}},
            ("grid", "width"),
        ),
        (
            "sinusoidal-grid",
            {"_class_name": "DiTTransformer2DModel"},
            {"grid": {"height": 8, "width": 8, "frames": 2}},
            ("grid", "frames"),
        ),
        (
            "sinusoidal-grid",
            {"_class_name": "CogVideoXTransformer3DModel"},
            {"grid": {"height": 8, "width": 8}},
            ("grid", "frames"),
        ),
        (
            "sinusoidal",
            {"_class_name": "LatteTransformer3DModel", "patch_size": 2},
            {"grid": {"height": 8, "width": 8}},
            ("grid",),
        ),
        (
            "sinusoidal-grid",
            {"_class_name": "CogView3PlusTransformer2DModel"},
            {"grid": {"height": 8, "width": 8, "text": -1}},
            ("grid", "text"),
        ),
        (
            "sinusoidal-grid",
            {"_class_name": "SD3Transformer2DModel"},
            {"grid": {"height": 8, "width": 8, "text": 3}},
            ("grid", "text"),
        ),
        ("sinusoidal-grid", {"_class_name": "AuraFlowTransformer2DModel"}, {}, ("hf_config", "_class_name")),
        ("sinusoidal-grid", {"_class_name": "NoSuchTransformer"}, {}, ("hf_config", "_class_name")),
    ],
)
def test_refusals_name_the_key(family, cfg, extra, loc):
    with pytest.raises(SpecError) as e:
        compute(family, {"hf_config": cfg, "positions": [0], **extra})
    assert spec_error(e) == loc, e.value.msg


def test_learned_tables_are_refused_with_the_reason(http):
    for name, why in diffusers_grid.UNREAD.items():
        with pytest.raises(SpecError) as e:
            compute("sinusoidal-grid", {"hf_config": {"_class_name": name}})
        assert spec_error(e) == ("hf_config", "_class_name") and why in e.value.msg, e.value.msg
    got = http.get("/v1/models").json()
    assert got["diffusers_learned_not_read"] == diffusers_grid.UNREAD
    read = {name for name, _, _ in _all_records()}
    assert read <= set(got["diffusers_classes"]) and not read & set(diffusers_grid.UNREAD)


def test_refusal_over_http_is_a_422(http):
    r = http.post("/v1/sinusoidal-grid", json={"hf_config": {"_class_name": "SanaTransformer2DModel"}})
    assert r.status_code == 422, r.text[:300]
    assert "interpolation_scale" in r.text


def test_every_door_answers_a_config_and_its_grid(server, tmp_path, rng):
    """SD3's config and a latent grid through KServe v2 (REST and gRPC, the real tritonclient),
    the co-located Client's lookup and ``posenc compute``: the bits ``compute`` gives, which are
    the class's own crop to its float32 rounding."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    from posenc.engine.reader.client import Client

    model, cfg = _build("SD3Transformer2DModel", "default")
    grid = GRID["SD3Transformer2DModel"]
    want = _theirs_at(model, grid)
    rows = rng.integers(0, want.shape[0], 40)
    spec = {"hf_config": cfg, "grid": grid}
    exact = compute("sinusoidal-grid", {**spec, "positions": rows.tolist()})["encoding"]
    assert_close(exact, want[rows], _tol(want.shape[0]), what="SD3 grid")
    with clients_of(server) as c:
        for transport, mod in (("rest", httpclient), ("grpc", grpcclient)):
            i = mod.InferInput("positions", [rows.size], "INT64")
            i.set_data_from_numpy(rows.astype(np.int64))
            r = c[transport].infer("sinusoidal-grid", [i], parameters={"spec": json.dumps(spec)})
            assert np.array_equal(bits(r.as_numpy("encoding")), exact), transport
    got = Client(namespace=server.namespace).lookup("sinusoidal-grid", {**spec, "positions": rows.tolist()})
    assert np.array_equal(got["encoding"], exact)
    out = tmp_path / "sd3.npz"
    body = json.dumps({**spec, "positions": rows.tolist()})
    p = subprocess.run(
        [sys.executable, "-m", "posenc", "compute", "sinusoidal-grid", "--spec", body, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert np.array_equal(np.load(out)["encoding"], exact)


def test_sd3_without_a_max_size_builds_the_latents_own_grid():
    """SD3's PatchEmbed without pos_embed_max_size: no crop, the table of the latent's grid."""
    small, _ = SMALL[SD3Transformer2DModel]
    model = SD3Transformer2DModel(**small, sample_size=32, pos_embed_max_size=None)
    cfg = json.loads(model.to_json_string())
    want = _patch(model, 12, 20, model.config.in_channels)
    out = compute("sinusoidal-grid", {"hf_config": cfg, "grid": {"height": 12, "width": 20}})
    assert "crop" not in out["spec"] and out["spec"]["grid_size"] == [12, 20]
    assert_close(out["encoding"], want, _tol(want.shape[0]), what="SD3 without a max size")
    want = _patch(model, 16, 16, model.config.in_channels)  # its sample size's own table
    out = compute("sinusoidal-grid", {"hf_config": cfg})["encoding"]
    assert_close(out, want, _tol(want.shape[0]), what="SD3 without a max size, its sample size")
