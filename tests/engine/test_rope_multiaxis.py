"""Multi-axis RoPE (mrope_section, mrope_interleaved, mrope_axes, axes_dim with position_ids) against
float64 math written here from docs/reference.md (every dtype and layout), against transformers
5.25's Qwen2-VL / Qwen2.5-VL / Qwen3-VL, ERNIE-4.5-VL, NeoMME, Qwen4-Exp and Qwen3-Omni talker
rotary classes and diffusers' FluxPosEmbed within their float32 error, the stored-table gathers
against the exact computation, and every named refusal."""

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


# The classes that deal their frequencies neither in Qwen2-VL's sections nor by Qwen3-VL's rule:
# (model type, rotary class, layer type, the axis of each frequency as read here from the class's
# recomposition_frequencies: ERNIE pre-rotates h and w into pairs ahead of t; NeoMME alternates
# row and column over all of d/2; Qwen4-Exp and the talker interleave 3 ways over 3·section[a]
# columns only, the rest on t).
def _qwen3_rule(section, h):
    return [a if a and k % 3 == a and k < 3 * section[a] else 0 for k in range(h) for a in [k % 3]]


DEALT = [
    (
        "ernie4_5_vl_moe_text",
        "ernie4_5_vl_moe.modeling_ernie4_5_vl_moe.Ernie4_5_VLMoeTextRotaryEmbedding",
        None,
        [1, 2] * 22 + [0] * 20,
    ),
    ("neomme", "neomme.modeling_neomme.NeoMMERotaryEmbedding", "sliding_attention", [0, 1] * 16),
    ("neomme", "neomme.modeling_neomme.NeoMMERotaryEmbedding", "full_attention", [0, 1] * 4),
    (
        "qwen4_exp_text",
        "qwen4_exp.modeling_qwen4_exp.Qwen4ExpTextRotaryEmbedding",
        None,
        _qwen3_rule([11, 11, 10], 128),
    ),
    (
        "qwen3_omni_moe_talker_text",
        "qwen3_omni_moe.modeling_qwen3_omni_moe.Qwen3OmniMoeTalkerRotaryEmbedding",
        None,
        _qwen3_rule([24, 20, 20], 32),
    ),
]


def _rotary(path, conf):
    import importlib

    mod, cls = path.rsplit(".", 1)
    return getattr(importlib.import_module(f"transformers.models.{mod}"), cls)(conf)


@pytest.mark.parametrize("mt,path,layer_type,mrope_axes", DEALT, ids=[f"{d[0]}-{d[2]}" for d in DEALT])
def test_dealt_by_mrope_axes_as_their_classes(mt, path, layer_type, mrope_axes, rng):
    """A hand-written mrope_axes spec, and the model's config read by posenc, give the class's own
    cos/sin for different positions per axis."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    conf = CONFIG_MAPPING[mt]()
    module = _rotary(path, conf)
    k = max(mrope_axes) + 1
    ids = np.concatenate(
        [mixed_ids(rng, start=0, k=k), mixed_ids(rng, start=int(rng.integers(0, 1 << 17)), k=k)], 1
    )
    x = torch.zeros(1, dtype=torch.float32)
    with torch.no_grad():
        args = (x, torch.from_numpy(ids[:, None, :])) + ((layer_type,) if layer_type else ())
        cos, sin = (t[0].double().numpy() for t in module(*args))
    rp = conf.rope_parameters[layer_type] if layer_type else conf.rope_parameters
    head = getattr(conf, "head_dim", None) or conf.hidden_size // conf.num_attention_heads
    spec = {
        "head_dim": head,
        "rope_theta": rp["rope_theta"],
        "partial_rotary_factor": rp.get("partial_rotary_factor", 1.0),
        "layout": "interleaved" if mt.startswith("ernie") else "half_split",
        "mrope_axes": mrope_axes,
    }
    tol = hf_tol(ids.max(axis=0), 1.0)
    by_config = {"hf_config": conf.to_dict(), **({"layer_type": layer_type} if layer_type else {})}
    for what, body in (("spec", spec), ("hf_config", by_config)):
        out = compute("rope", {**body, "position_ids": ids.tolist()})
        assert_close(out["cos"], cos, tol, what=f"{mt} {what} cos")
        assert_close(out["sin"], sin, tol, what=f"{mt} {what} sin")
    assert out["spec"]["mrope_axes"] == mrope_axes


def test_mrope_axes_with_every_axis_at_one_position_is_plain_rope():
    pos = [0, 7, 4096, 2**31 - 1]
    spec = {"head_dim": 64, "rope_theta": 5e5, "layout": "interleaved"}
    plain = compute("rope", {**spec, "positions": pos})
    for body in ({"positions": pos}, {"position_ids": [pos] * 3}):
        out = compute("rope", {**spec, "mrope_axes": [1, 2] * 12 + [0] * 8, **body})
        np.testing.assert_array_equal(out["cos"], plain["cos"])
        np.testing.assert_array_equal(out["sin"], plain["sin"])


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
        {"head_dim": 64, "rope_theta": 5e5, "layout": "interleaved", "mrope_axes": [1, 2] * 11 + [0] * 10},
    ],
    ids=["qwen3", "yarn", "flux", "mrope_axes"],
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
        ({"head_dim": 8, "mrope_axes": [0, 1, 2], "positions": [0]}, ("mrope_axes",)),
        ({"head_dim": 8, "mrope_axes": [0, 1, 8, 0], "positions": [0]}, ("mrope_axes", 2)),
        ({"head_dim": 8, "mrope_axes": [0, 1, -1, 0], "positions": [0]}, ("mrope_axes", 2)),
        ({"head_dim": 8, "mrope_axes": [0, 1.5, 1, 0], "positions": [0]}, ("mrope_axes", 1)),
        ({"head_dim": 8, "mrope_axes": "0101", "positions": [0]}, ("mrope_axes",)),
        (
            {"head_dim": 8, "mrope_axes": [0, 1, 0, 1], "mrope_section": [2, 2], "positions": [0]},
            ("mrope_axes",),
        ),
        ({"head_dim": 8, "mrope_axes": [0, 1, 0, 1], "position_ids": [[0], [0], [0]]}, ("position_ids",)),
        # ERNIE-4.5-VL's pairs need h == w and [h, w, t] summing to d/2: named at the config's key
        (
            {
                "hf_config": {
                    "model_type": "ernie4_5_vl_moe_text",
                    "rope_parameters": {"mrope_section": [20, 24, 20]},
                },
                "positions": [0],
            },
            ("hf_config", "rope_parameters", "mrope_section"),
        ),
        (
            {
                "hf_config": {
                    "model_type": "ernie4_5_vl_moe_text",
                    "rope_parameters": {"mrope_section": [22, "x", 20]},
                },
                "positions": [0],
            },
            ("hf_config", "rope_parameters", "mrope_section", 1),
        ),
        # Beam's full-attention layers have no rotary embedding (null rope parameters)
        (
            {"hf_config": {"model_type": "beam"}, "layer_type": "full_attention", "positions": [0]},
            ("layer_type",),
        ),
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
