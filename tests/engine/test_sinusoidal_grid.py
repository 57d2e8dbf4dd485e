"""sinusoidal-grid against float64 math written here from docs/reference.md (exact coordinates,
every dtype), against the functions the models call (diffusers' get_2d_sincos_pos_embed,
get_3d_sincos_pos_embed, PatchEmbed (SD3's crop, as ``crop``), CogVideoXPatchEmbed; transformers' ViTMAE)
within their float32 error, the stored per-axis tables against the computation, and refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from diffusers.models.embeddings import (
    CogVideoXPatchEmbed,
    PatchEmbed,
    get_2d_sincos_pos_embed,
    get_3d_sincos_pos_embed,
)
from transformers import ViTMAEConfig, ViTMAEModel

from posenc.engine.answer import pipeline
from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from tests.engine.float64_refs import grid64
from tests.numeric import FLOAT_DTYPES, assert_close, assert_within_ulp, spec_error
from tests.service.shortcut.test_templates_in_memory import view_of

CASES = {
    "square": dict(embed_dim=64, grid_size=6),
    "non-square base 1.5-scale": dict(embed_dim=48, grid_size=[5, 7], base_size=4, interpolation_scale=1.5),
    "cls": dict(embed_dim=32, grid_size=[3, 4], extra_tokens=1, interpolation_scale=0.7),
    "3-D": dict(
        embed_dim=64,
        grid_size=[3, 5],
        temporal_size=4,
        interpolation_scale=1.875,
        temporal_interpolation_scale=1.3,
        extra_tokens=3,
    ),
}


def _ref(spec):
    g = spec["grid_size"]
    h, w = (g, g) if isinstance(g, int) else g
    return grid64(
        spec["embed_dim"],
        h,
        w,
        spec.get("base_size"),
        spec.get("interpolation_scale", 1.0),
        spec.get("temporal_size"),
        spec.get("temporal_interpolation_scale", 1.0),
        spec.get("extra_tokens", 0),
    )


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_against_float64(case, dtype, rng):
    spec = CASES[case]
    ref, slack = _ref(spec)
    out = compute("sinusoidal-grid", {**spec, "dtype": dtype})["encoding"]
    assert_within_ulp(out, ref, dtype, slack=slack, what=case)
    rows = rng.integers(0, ref.shape[0], 50)
    some = compute("sinusoidal-grid", {**spec, "dtype": dtype, "positions": rows.tolist()})["encoding"]
    np.testing.assert_array_equal(some, out[rows])


@pytest.mark.parametrize("form", ["rows", "axes"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_stored_tables_serve_the_computed_rows(case, dtype, form, rng, monkeypatch):
    """Both stored forms (the whole table; one table per axis) give the computed bits."""
    from posenc.engine.tables import sinusoidal_grid

    if form == "axes":
        monkeypatch.setattr(sinusoidal_grid, "FULL_BYTES", 0)
    spec = CASES[case]
    req = pipeline.parse("sinusoidal-grid", {**spec, "dtype": dtype})
    assert req.table is not None and req.table.variant == form
    np.testing.assert_array_equal(
        pipeline.arrays(req, view_of(req.table))["encoding"], pipeline.arrays(req)["encoding"]
    )
    rows = rng.integers(0, req.sel["positions"].n, 33).tolist()
    req = pipeline.parse("sinusoidal-grid", {**spec, "dtype": dtype, "positions": rows})
    np.testing.assert_array_equal(
        pipeline.arrays(req, view_of(req.table))["encoding"], pipeline.arrays(req)["encoding"]
    )


def _tol(ref_coords_max):
    # diffusers / MAE round the coordinates through float32 (relative 6e-8) before the sine.
    return 1e-6 + 1.2e-7 * ref_coords_max


@pytest.mark.parametrize(
    "grid,base,scale,extra", [((8, 8), 16, 1.0, 0), ((5, 9), 4, 1.5, 0), ((12, 7), 3.5, 0.75, 2)]
)
def test_diffusers_2d(grid, base, scale, extra):
    ref = get_2d_sincos_pos_embed(
        64, grid, cls_token=extra > 0, extra_tokens=extra, base_size=base, interpolation_scale=scale
    ).numpy()
    out = compute(
        "sinusoidal-grid",
        {
            "embed_dim": 64,
            "grid_size": list(grid),
            "base_size": base,
            "interpolation_scale": scale,
            "extra_tokens": extra,
        },
    )["encoding"]
    assert_close(out, ref, _tol(base / scale))


@pytest.mark.parametrize("hw,frames,s,ts", [((6, 4), 3, 1.875, 1.0), ((5, 5), 2, 1.0, 2.5)])
def test_diffusers_3d(hw, frames, s, ts):
    h, w = hw
    ref = get_3d_sincos_pos_embed(64, (w, h), frames, s, ts).numpy().reshape(-1, 64)
    out = compute(
        "sinusoidal-grid",
        {
            "embed_dim": 64,
            "grid_size": [h, w],
            "temporal_size": frames,
            "interpolation_scale": s,
            "temporal_interpolation_scale": ts,
        },
    )["encoding"]
    assert_close(out, ref, _tol(max(h, w, frames)))


def test_sd3_patch_embed_crop():
    """SD3's PatchEmbed: a pos_embed_max_size² table with base_size sample_size // patch_size,
    cropped at the centre for the input's size: those rows of posenc's table."""
    max_size, sample, patch, d = 24, 16, 2, 64
    pe = PatchEmbed(
        height=sample, width=sample, patch_size=patch, in_channels=4, embed_dim=d, pos_embed_max_size=max_size
    )
    h, w = 10, 14  # patches of the input
    ref = pe.cropped_pos_embed(h * patch, w * patch)[0].numpy()
    top, left = (max_size - h) // 2, (max_size - w) // 2
    rows = [(top + i) * max_size + left + j for i in range(h) for j in range(w)]
    out = compute(
        "sinusoidal-grid",
        {"embed_dim": d, "grid_size": max_size, "base_size": sample // patch, "positions": rows},
    )["encoding"]
    assert_close(out, ref, _tol(max_size))
    crop = compute(
        "sinusoidal-grid",
        {"embed_dim": d, "grid_size": max_size, "base_size": sample // patch, "crop": [top, left, h, w]},
    )["encoding"]
    np.testing.assert_array_equal(crop, out)


CROPS = {
    "centred, base 1.5-scale": (
        dict(embed_dim=48, grid_size=[9, 11], base_size=4, interpolation_scale=1.5),
        [2, 3, 5, 4],
    ),
    "corner, text rows": (dict(embed_dim=32, grid_size=8, extra_tokens=3), [0, 0, 3, 8]),
    "last cell": (dict(embed_dim=16, grid_size=[6, 7]), [5, 6, 1, 1]),
}


def _window(spec, crop):
    """The rows of the whole grid_size table that a crop [top, left, height, width] keeps."""
    g = spec["grid_size"]
    side_w = g if isinstance(g, int) else g[1]
    top, left, h, w = crop
    extra = spec.get("extra_tokens", 0)
    return list(range(extra)) + [extra + (top + i) * side_w + left + j for i in range(h) for j in range(w)]


@pytest.mark.parametrize("form", ["rows", "axes"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", CROPS)
def test_crop_is_that_window_of_the_whole_table(case, dtype, form, rng, monkeypatch):
    """``crop``: the window's rows, with the whole table's coordinates (float64 math written
    here), computed and from either stored form."""
    from posenc.engine.tables import sinusoidal_grid

    spec, crop = CROPS[case]
    g = spec["grid_size"]
    h, w = (g, g) if isinstance(g, int) else g
    ref, slack = grid64(
        spec["embed_dim"],
        h,
        w,
        spec.get("base_size"),
        spec.get("interpolation_scale", 1.0),
        extra=spec.get("extra_tokens", 0),
        rows=_window(spec, crop),
    )
    body = {**spec, "crop": crop, "dtype": dtype}
    out = compute("sinusoidal-grid", body)["encoding"]
    assert_within_ulp(out, ref, dtype, slack=slack, what=case)
    if form == "axes":
        monkeypatch.setattr(sinusoidal_grid, "FULL_BYTES", 0)
    rows = rng.integers(0, ref.shape[0], 20).tolist()
    req = pipeline.parse("sinusoidal-grid", {**body, "positions": rows})
    assert req.table is not None and req.table.variant == form
    np.testing.assert_array_equal(pipeline.arrays(req, view_of(req.table))["encoding"], out[rows])


def test_cogvideox_patch_embed():
    kw = dict(
        patch_size=2,
        embed_dim=64,
        sample_width=12,
        sample_height=8,
        sample_frames=9,
        temporal_compression_ratio=4,
        max_text_seq_length=5,
        spatial_interpolation_scale=1.875,
        temporal_interpolation_scale=1.0,
    )
    ref = CogVideoXPatchEmbed(in_channels=4, text_embed_dim=8, use_learned_positional_embeddings=False, **kw)
    out = compute(
        "sinusoidal-grid",
        {
            "embed_dim": 64,
            "grid_size": [4, 6],
            "temporal_size": 3,
            "interpolation_scale": 1.875,
            "extra_tokens": 5,
        },
    )["encoding"]
    assert_close(out, ref.pos_embedding[0].numpy(), _tol(6))


def test_vit_mae_embeddings():
    torch.manual_seed(0)
    cfg = ViTMAEConfig(
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=32,
        image_size=48,
        patch_size=8,
    )
    emb = ViTMAEModel(cfg).embeddings
    # ViTMAEEmbeddings.initialize_weights builds the fixed table; transformers 5 skips it once the
    # model's init has marked the projection initialised, so clear that mark and run it.
    emb.patch_embeddings.projection._is_hf_initialized = False
    emb.initialize_weights()
    ref = emb.position_embeddings[0].detach().numpy()
    assert np.abs(ref).sum() > 0
    out = compute("sinusoidal-grid", {"embed_dim": 64, "grid_size": 6, "extra_tokens": 1})["encoding"]
    assert_close(out, ref, _tol(6))


@pytest.mark.parametrize(
    "body,loc",
    [
        ({"embed_dim": 30, "grid_size": 4}, ("embed_dim",)),
        ({"embed_dim": 40, "grid_size": 4, "temporal_size": 2}, ("embed_dim",)),
        ({"embed_dim": 32, "grid_size": [4]}, ("grid_size",)),
        ({"embed_dim": 32, "grid_size": [4, 0]}, ("grid_size", 1)),
        ({"embed_dim": 32, "grid_size": 4, "base_size": 0}, ("base_size",)),
        ({"embed_dim": 32, "grid_size": 4, "interpolation_scale": -1}, ("interpolation_scale",)),
        ({"embed_dim": 32, "grid_size": 4, "temporal_size": 2, "base_size": 2}, ("base_size",)),
        (
            {"embed_dim": 32, "grid_size": 4, "temporal_interpolation_scale": 2.0},
            ("temporal_interpolation_scale",),
        ),
        ({"embed_dim": 32, "grid_size": 4, "extra_tokens": 1, "positions": [0, 17]}, ("positions", 1)),
        ({"embed_dim": 32, "grid_size": 4, "positions": {"start": 0, "stop": 17}}, ("positions", "stop")),
        ({"embed_dim": 32, "grid_size": 65536}, ("grid_size",)),
        ({"embed_dim": 32, "grid_size": 4, "layout": "concat"}, ("layout",)),
        ({"embed_dim": 32, "grid_size": 4, "crop": [0, 0, 2]}, ("crop",)),
        ({"embed_dim": 32, "grid_size": 4, "crop": [0, -1, 2, 2]}, ("crop", 1)),
        ({"embed_dim": 32, "grid_size": 4, "crop": [0, 0, 0, 2]}, ("crop", 2)),
        ({"embed_dim": 32, "grid_size": [4, 6], "crop": [1, 0, 4, 2]}, ("crop", 2)),
        ({"embed_dim": 32, "grid_size": [4, 6], "crop": [0, 3, 2, 4]}, ("crop", 3)),
        ({"embed_dim": 32, "grid_size": 4, "crop": [0, 0, 2, 2], "temporal_size": 2}, ("crop",)),
        ({"embed_dim": 32, "grid_size": 4, "crop": [1, 1, 2, 2], "positions": [4]}, ("positions", 0)),
    ],
)
def test_refusals_name_the_field(body, loc):
    with pytest.raises(SpecError) as e:
        compute("sinusoidal-grid", body)
    assert spec_error(e) == loc


def test_a_whole_table_over_the_limit_is_413_before_anything_is_built():
    from posenc.engine.core.errors import TooLarge

    with pytest.raises(TooLarge):
        compute("sinusoidal-grid", {"embed_dim": 1024, "grid_size": 4096})


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_the_template_shortcut_answers_the_pipelines_bytes(case, dtype, rng):
    """Small grids are stored whole, so the C template shortcut answers their rows: the same
    bytes as the pipeline's answer from the table and as the exact computation."""
    from tests.service.shortcut.test_templates_in_memory import answer_both

    spec = {**CASES[case], "dtype": dtype}
    n = pipeline.parse("sinusoidal-grid", spec).sel["positions"].n
    for rows in (rng.integers(0, n, 5).tolist(), rng.integers(0, n, 64).tolist(), [n - 1]):
        c, served, computed = answer_both(
            "sinusoidal-grid", {**spec, "positions": [1]}, {**spec, "positions": rows}
        )
        assert c is not None and c == served == computed


def test_large_grids_keep_axis_tables():
    small = pipeline.parse("sinusoidal-grid", {"embed_dim": 768, "grid_size": 14, "extra_tokens": 1})
    sd3 = pipeline.parse(
        "sinusoidal-grid", {"embed_dim": 1536, "grid_size": 192, "base_size": 64, "positions": [0]}
    )
    assert small.table.variant == "rows" and sd3.table.variant == "axes"
    assert sd3.table.nbytes() < 2 * 2**20 < 192 * 192 * 1536 * 4


@pytest.mark.parametrize("case", CROPS)
def test_the_template_shortcut_answers_a_crops_bytes(case, rng):
    from tests.service.shortcut.test_templates_in_memory import answer_both

    spec, crop = CROPS[case]
    spec = {**spec, "crop": crop}
    n = pipeline.parse("sinusoidal-grid", spec).sel["positions"].n
    for rows in (rng.integers(0, n, 7).tolist(), [n - 1]):
        c, served, computed = answer_both(
            "sinusoidal-grid", {**spec, "positions": [0]}, {**spec, "positions": rows}
        )
        assert c is not None and c == served == computed
