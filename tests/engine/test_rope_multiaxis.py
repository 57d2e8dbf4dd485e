"""Multi-axis RoPE (mrope_section, mrope_interleaved, axes_dim with position_ids) against float64
math written here from docs/reference.md (every dtype and layout), against transformers 5.24's
Qwen2-VL / Qwen2.5-VL / Qwen3-VL rotary classes and diffusers' FluxPosEmbed within their float32
error, the stored-table gathers against the exact computation, and every named refusal."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from diffusers.models.transformers.transformer_flux import FluxPosEmbed
from transformers import Qwen2_5_VLTextConfig, Qwen2VLTextConfig, Qwen3VLTextConfig
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLRotaryEmbedding
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding

from posenc.engine.answer import pipeline
from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from tests.engine.rope_refs import hf_tol, lay, ref_axes64, ref_mrope64, rope_exponents
from tests.numeric import FLOAT_DTYPES, angle_slack, assert_close, assert_within_ulp, spec_error
from tests.service.shortcut.test_templates_in_memory import view_of


def mixed_ids(rng, n_text=5, grid=(2, 3, 4), start=None, k=3):
    """Qwen-VL style [k, n] position ids: text tokens (t = h = w), then a (t, h, w) grid offset by
    the text, then text again; ``start`` puts the whole sequence far out."""
    base = int(rng.integers(0, 2**31 - 4096)) if start is None else start
    text = np.arange(n_text) + base
    t, h, w = np.meshgrid(*(np.arange(g) for g in grid), indexing="ij")
    img = np.stack([t.ravel(), h.ravel(), w.ravel()])[:k] + base + n_text
    tail = np.arange(3) + int(img.max()) + 1
    ids = np.concatenate([np.repeat(text[None], k, 0), img, np.repeat(tail[None], k, 0)], axis=1)
    return ids[:, rng.permutation(ids.shape[1])]


MROPE = {
    "qwen2-vl": {"head_dim": 128, "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
    "qwen3-vl": {
        "head_dim": 128,
        "rope_theta": 5e6,
        "mrope_section": [24, 20, 20],
        "mrope_interleaved": True,
    },
    "odd-sections-yarn": {
        "head_dim": 80,
        "rope_theta": 1e6,
        "mrope_section": [10, 14, 16],
        "max_position_embeddings": 4096,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
    },
    "linear-interleaved": {
        "head_dim": 64,
        "mrope_section": [8, 12, 12],
        "mrope_interleaved": True,
        "rope_scaling": {"rope_type": "linear", "factor": 2.0},
    },
}


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", MROPE)
def test_mrope_against_float64(case, dtype, layout, rng):
    spec = MROPE[case]
    ids = np.concatenate([mixed_ids(rng, start=0), mixed_ids(rng)], axis=1)
    out = compute("rope", {**spec, "layout": layout, "dtype": dtype, "position_ids": ids.tolist()})
    ang, alpha, inv = ref_mrope64(spec, ids, int(ids.max()) + 1)
    e, base = rope_exponents(spec, int(ids.max()) + 1)
    slack = angle_slack(ang, e[None, :], base, alpha)
    for name, f in (("cos", np.cos), ("sin", np.sin)):
        assert_within_ulp(
            out[name], lay([f(ang) * alpha], layout), dtype, slack=lay([slack], layout), what=f"{case} {name}"
        )
    assert_within_ulp(out["inv_freq"], inv, "float32", slack=angle_slack(inv, e, base))


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("axes_dim,theta", [([16, 56, 56], 10000.0), ([32, 48, 48], 256.0), ([2, 6], 1e6)])
def test_axes_dim_against_float64(axes_dim, theta, dtype, layout, rng):
    k = len(axes_dim)
    ids = np.concatenate([mixed_ids(rng, start=0, k=k), mixed_ids(rng, k=k)], axis=1)
    out = compute(
        "rope",
        {
            "head_dim": sum(axes_dim),
            "rope_theta": theta,
            "axes_dim": axes_dim,
            "layout": layout,
            "dtype": dtype,
            "position_ids": ids.tolist(),
        },
    )
    angs, exps = ref_axes64(axes_dim, theta, ids)
    slack = lay([angle_slack(a, e[None, :], theta) for a, e in zip(angs, exps)], layout)
    assert_within_ulp(out["cos"], lay([np.cos(a) for a in angs], layout), dtype, slack=slack, what="cos")
    assert_within_ulp(out["sin"], lay([np.sin(a) for a in angs], layout), dtype, slack=slack, what="sin")
    inv = np.concatenate([1.0 / theta**e for e in exps])
    assert_within_ulp(
        out["inv_freq"],
        inv,
        "float32",
        slack=np.concatenate([angle_slack(1.0 / theta**e, e, theta) for e in exps]),
    )
    assert out["attention_scaling"] == 1.0


def test_mrope_plain_positions_are_every_axis_at_that_position():
    spec = MROPE["qwen2-vl"]
    pos = [0, 7, 4096, 2**31 - 1]
    a = compute("rope", {**spec, "positions": pos})
    b = compute("rope", {**spec, "position_ids": [pos, pos, pos]})
    np.testing.assert_array_equal(a["cos"], b["cos"])
    np.testing.assert_array_equal(a["sin"], b["sin"])


# --------------------------------------------------------------------------- vs the libraries

QWEN = [
    ("qwen2_vl", Qwen2VLTextConfig, Qwen2VLRotaryEmbedding, [16, 24, 24], False),
    ("qwen2_5_vl", Qwen2_5_VLTextConfig, Qwen2_5_VLRotaryEmbedding, [16, 24, 24], False),
    ("qwen3_vl", Qwen3VLTextConfig, Qwen3VLTextRotaryEmbedding, [24, 20, 20], True),
]


@pytest.mark.parametrize("name,config_cls,rotary_cls,section,interleaved", QWEN, ids=[q[0] for q in QWEN])
def test_qwen_vl_rotary_classes(name, config_cls, rotary_cls, section, interleaved, rng):
    theta = 1e6
    cfg = config_cls(
        hidden_size=1024,
        num_attention_heads=8,
        head_dim=128,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": theta,
            "mrope_section": section,
            **({"mrope_interleaved": True} if interleaved else {}),
        },
    )
    module = rotary_cls(cfg)
    ids = np.stack(
        [mixed_ids(rng, start=int(rng.integers(0, 1 << 17))) for _ in range(2)], axis=1
    )  # [3, B, N]
    cos, sin = module(torch.zeros(1, dtype=torch.float32), torch.from_numpy(ids))
    spec = {"head_dim": 128, "rope_theta": theta, "mrope_section": section, "mrope_interleaved": interleaved}
    for b in range(ids.shape[1]):
        out = compute("rope", {**spec, "position_ids": ids[:, b].tolist()})
        tol = hf_tol(ids[:, b].max(axis=0), 1.0)
        assert_close(out["cos"], cos[b].numpy(), tol, what=f"{name} cos")
        assert_close(out["sin"], sin[b].numpy(), tol, what=f"{name} sin")
        np.testing.assert_allclose(out["inv_freq"], module.inv_freq.numpy(), rtol=2e-7)


@pytest.mark.parametrize("axes_dim", [[16, 56, 56], [8, 24]])
def test_flux_pos_embed(axes_dim, rng):
    k = len(axes_dim)
    ids = np.concatenate(
        [mixed_ids(rng, start=0, k=k), mixed_ids(rng, start=int(rng.integers(0, 4096)), k=k)], 1
    )
    cos, sin = FluxPosEmbed(theta=10000, axes_dim=axes_dim)(torch.from_numpy(ids.T.copy()))
    out = compute(
        "rope",
        {
            "head_dim": sum(axes_dim),
            "axes_dim": axes_dim,
            "layout": "interleaved",
            "position_ids": ids.tolist(),
        },
    )
    # FluxPosEmbed is float64 throughout and rounds once to float32: the same rounding, give or
    # take a tie within the float64 error.
    tol = 1e-7 + 1e-15 * ids.max()
    assert_close(out["cos"], cos.numpy(), tol, what="cos")
    assert_close(out["sin"], sin.numpy(), tol, what="sin")


# --------------------------------------------------------------------------- tables
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize(
    "spec",
    [
        MROPE["qwen3-vl"],
        MROPE["odd-sections-yarn"],
        {"head_dim": 128, "axes_dim": [16, 56, 56], "layout": "interleaved"},
    ],
    ids=["qwen3", "yarn", "flux"],
)
def test_table_gathers_equal_the_computation(spec, dtype, rng):
    """Rows served from a stored table (inside it and past its end) are the computed rows, bit for bit."""
    ids = np.concatenate([rng.integers(0, 4096, (3, 40)), mixed_ids(rng, start=4090)], axis=1)
    body = {**spec, "dtype": dtype, "position_ids": ids.tolist()}
    req = pipeline.parse("rope", body, 4096)
    assert req.table is not None
    served, computed = pipeline.arrays(req, view_of(req.table)), pipeline.arrays(req)
    for name in ("cos", "sin", "inv_freq"):
        np.testing.assert_array_equal(served[name], computed[name])


def test_position_ids_from_an_unaligned_buffer():
    """Binary v2 inputs arrive at any byte offset: parsed into aligned int64 for the kernels."""
    buf = bytearray(1 + 6 * 8)
    arr = np.frombuffer(buf, np.int64, count=6, offset=1).reshape(3, 2)
    assert not arr.flags.aligned
    out = compute("rope", {**MROPE["qwen2-vl"], "position_ids": arr})
    np.testing.assert_array_equal(
        out["cos"], compute("rope", {**MROPE["qwen2-vl"], "position_ids": [[0, 0]] * 3})["cos"]
    )


def test_mrope_shares_the_plain_table():
    plain = pipeline.parse("rope", {"head_dim": 128, "rope_theta": 1e6, "positions": [1]})
    mrope = pipeline.parse("rope", {**MROPE["qwen2-vl"], "position_ids": [[1], [2], [3]]})
    assert mrope.table.key == plain.table.key


# --------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    "body,loc",
    [
        ({"head_dim": 128, "mrope_section": [16, 24, 23], "positions": [0]}, ("mrope_section",)),
        ({"head_dim": 128, "mrope_section": [16, 0, 48], "positions": [0]}, ("mrope_section", 1)),
        (
            {"head_dim": 128, "mrope_section": [32, 32], "mrope_interleaved": True, "positions": [0]},
            ("mrope_section",),
        ),
        ({"head_dim": 128, "mrope_interleaved": True, "positions": [0]}, ("mrope_interleaved",)),
        ({"head_dim": 128, "axes_dim": [16, 56, 54], "position_ids": [[0], [0], [0]]}, ("axes_dim",)),
        ({"head_dim": 128, "axes_dim": [16, 55, 57], "position_ids": [[0], [0], [0]]}, ("axes_dim", 1)),
        (
            {
                "head_dim": 128,
                "axes_dim": [16, 56, 56],
                "mrope_section": [16, 24, 24],
                "position_ids": [[0], [0], [0]],
            },
            ("axes_dim",),
        ),
        (
            {
                "head_dim": 128,
                "axes_dim": [64, 64],
                "max_position_embeddings": 64,
                "rope_scaling": {"rope_type": "linear", "factor": 2.0},
                "position_ids": [[0], [0]],
            },
            ("rope_scaling", "rope_type"),
        ),
        ({"head_dim": 128, "position_ids": [[0], [0], [0]]}, ("position_ids",)),
        ({"head_dim": 128, "axes_dim": [64, 64], "positions": [0]}, ("position_ids",)),
        (
            {
                "head_dim": 128,
                "mrope_section": [16, 24, 24],
                "positions": [0],
                "position_ids": [[0], [0], [0]],
            },
            ("positions",),
        ),
        (
            {"head_dim": 128, "mrope_section": [16, 24, 24], "position_ids": [[0, 1], [0], [0, 1]]},
            ("position_ids", 1),
        ),
        ({"head_dim": 128, "mrope_section": [16, 24, 24], "position_ids": [[0], [0]]}, ("position_ids",)),
        (
            {"head_dim": 128, "mrope_section": [16, 24, 24], "position_ids": [[0], [0], [2**31]]},
            ("position_ids", 2, 0),
        ),
        (
            {"head_dim": 128, "mrope_section": [16, 24, 24], "position_ids": [[0], [0.5], [0]]},
            ("position_ids", 1, 0),
        ),
        (
            {"head_dim": 128, "mrope_section": [16, 24, 24], "position_ids": [[0], [2**70], [0]]},
            ("position_ids", 1, 0),
        ),
        (
            {"head_dim": 128, "mrope_section": [16, 24, 24], "position_ids": [[0], [True], [0]]},
            ("position_ids", 1, 0),
        ),
        (
            {"head_dim": 128, "mrope_section": [16, 24, 24], "position_ids": [[0], [-1], [0]]},
            ("position_ids", 1, 0),
        ),
        ({"head_dim": 128, "mrope_section": [16, 24, 24], "position_ids": [[], [], []]}, ("position_ids", 0)),
        ({"head_dim": 128, "mrope_section": [16, 24, 24], "position_ids": [0, 1, 2]}, ("position_ids",)),
    ],
)
def test_refusals_name_the_field(body, loc):
    with pytest.raises(SpecError) as e:
        compute("rope", body)
    assert spec_error(e) == loc
