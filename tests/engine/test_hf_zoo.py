"""The zoo: every rotary model type of the pinned transformers that posenc reads from
engine/models/zoo.json, against the model's own rotary embedding class.

For each row, the config class's defaults (``CONFIG_MAPPING[model_type]()``) are built, the text
model's rotary class (the row's ``source``, on the sub-config at ``text_path``) is run for positions
up to and past the model's context, and posenc must give the same cos/sin within docs/reference.md's
tolerance (transformers' own float32 error): through ``compute`` with the config as transformers
saves it (``to_dict()``) and with nothing but its ``model_type`` (every other key from the class
defaults the row holds), and through ``posenc.torch.RotaryEmbedding`` in the form the class hands
its attention. tests/integration/test_hf_zoo_http.py asks a real server for the same.

The model types posenc does not read are listed here (``NOT_READ``) with the reason the generator
gave, so the list changes only on purpose.
"""

from __future__ import annotations

import copy
import importlib
import re

import numpy as np
import pytest
import torch

from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from posenc.engine.models import registry
from tests.engine.hf_published import ZOO as ZOO_PUBLISHED
from tests.numeric import assert_close
from tests.tools import hf_zoo

transformers = hf_zoo._quiet()
from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES  # noqa: E402

ROWS = registry.ZOO["models"]

# Rotary model types of transformers 5.25 that posenc does not read, and why (engine/models/zoo.json's
# "unread", from tests/tools/hf_zoo.py). A type whose text rotary class does not run on its own
# config's defaults (a vision or audio sub-model, a class that needs more than position_ids) is not
# a text rotary model; the rest would be what posenc's RoPE cannot say yet.
# Every rotary model type whose text class runs on its defaults is read: odd rotary widths (GLM-4
# MoE's 21, Qwen3-Omni's 73) as transformers computes them, the dealings of ERNIE-4.5-VL, NeoMME,
# Qwen4-Exp and the Qwen3-Omni talker as mrope_axes, and Beam's and Ergo's NoPE layer types left out.
NOT_READ_RUNNABLE: dict = {}


def _runnable_unread():
    return {mt for mt, why in registry.UNREAD.items() if not why.startswith("no text rotary class runs")}


def _rope_types():
    """Every model type of the pinned transformers whose modeling module has a text rotary class."""
    classes = hf_zoo.rotary_classes()
    return {mt for mt in CONFIG_MAPPING_NAMES if CONFIG_MAPPING[mt].__module__.split(".")[2] in classes}


def test_the_table_covers_the_pinned_transformers():
    assert registry.ZOO["transformers"] == transformers.__version__
    hand = {mt for mt, by in registry.MODELS.items() if "rope" in by and mt in registry.HAND_WRITTEN}
    missing = _rope_types() - set(ROWS) - set(registry.UNREAD) - hand
    assert not missing, (
        f"rotary model types in neither engine/models/zoo.json nor the records: {sorted(missing)}"
    )


@pytest.mark.slow
def test_the_table_is_what_the_generator_writes():
    """engine/models/zoo.json is tests/tools/hf_zoo.py's output on the pinned transformers: every row
    can be regenerated and checked (``python -m tests.tools.hf_zoo --check``)."""
    assert hf_zoo.TABLE.read_text() == hf_zoo.dumps(hf_zoo.build()), (
        "engine/models/zoo.json is stale: .venv/bin/python -m tests.tools.hf_zoo"
    )


def test_what_is_not_read_changes_only_on_purpose():
    assert _runnable_unread() == set(NOT_READ_RUNNABLE), {
        mt: registry.UNREAD.get(mt) for mt in _runnable_unread() ^ set(NOT_READ_RUNNABLE)
    }


def test_share_of_the_zoo_read():
    """Of the rotary model types whose own class runs on their defaults, posenc reads >= 99%."""
    hand = {mt for mt in _rope_types() if mt in registry.HAND_WRITTEN and "rope" in registry.MODELS[mt]}
    read = len(set(ROWS) | hand)
    share = read / (read + len(_runnable_unread()))
    print(f"zoo: {read} rotary model types read, {len(_runnable_unread())} not read, {share:.1%}")
    assert share >= 0.99


def _class_and_conf(mt):
    row = ROWS[mt]
    m = re.fullmatch(r"models/(\w+)/(modeling_\w+)\.py \((\w+)\)", row["source"])
    klass = getattr(importlib.import_module(f"transformers.models.{m[1]}.{m[2]}"), m[3])
    cfg = CONFIG_MAPPING[mt]()
    conf = cfg
    for key in row["text_path"]:
        conf = getattr(conf, key)
    return klass, cfg, conf


def _cases():
    for mt in sorted(ROWS):
        _, _, conf = _class_and_conf(mt)
        # sorted: a config may build its rope_parameters from a set (dory), whose order changes from
        # process to process, and pytest-xdist's workers must collect the same tests in the same order
        for lt in sorted(hf_zoo.layer_types(conf), key=lambda lt: lt or ""):
            yield pytest.param(mt, lt, id=f"{mt}-{lt}" if lt else mt)


CASES = list(_cases())


def want(klass, conf, positions, layer_type):
    """The class's cos/sin as posenc's full-width arrays (a half-width class: its half-split
    layout's first half, repeated), and its attention scaling."""
    cos, sin, form, scaling = hf_zoo.run_class(klass(conf), positions, layer_type)
    return cos, sin, form, scaling


def _widen(cos, sin, width):
    if cos.shape[1] * 2 == width:
        return np.concatenate([cos, cos], axis=1), np.concatenate([sin, sin], axis=1)
    return cos, sin


def _check(got, cos, sin, scaling, positions, what):
    cos, sin = _widen(cos, sin, got["cos"].shape[1])
    assert got["attention_scaling"] == pytest.approx(scaling, rel=1e-6), what
    tol = hf_zoo.tolerance(positions, got["attention_scaling"])
    assert_close(got["cos"], cos, atol=tol, what=f"{what} cos")
    assert_close(got["sin"], sin, atol=tol, what=f"{what} sin")


def _body(raw, positions, layer_type):
    body = {"hf_config": raw, ("position_ids" if isinstance(positions[0], list) else "positions"): positions}
    if layer_type is not None:
        body["layer_type"] = layer_type
    return body


@pytest.mark.parametrize("mt,layer_type", CASES)
def test_zoo_model_vs_its_rotary_class(mt, layer_type):
    klass, cfg, conf = _class_and_conf(mt)
    positions = hf_zoo._positions(klass, conf)
    cos, sin, _, scaling = want(klass, conf, positions, layer_type)
    full = compute("rope", _body(cfg.to_dict(), positions, layer_type))
    _check(full, cos, sin, scaling, positions, f"{mt} (to_dict)")
    # nothing but the model type: every key from the class defaults the row holds
    refused = (
        "text_config"
        if ROWS[mt]["text_path"]
        else "per_layer_config"
        if ROWS[mt].get("per_layer") and layer_type is not None
        else "head_dim"
        if ROWS[mt].get("head_dim_saved")
        else None
    )
    if refused:  # what its config class computes by a rule of its own is in the saved config only
        with pytest.raises(SpecError) as e:
            compute("rope", _body({"model_type": mt}, positions, layer_type))
        assert e.value.loc[0] == "hf_config" and e.value.msg.startswith("field required"), e.value
    else:
        bare = compute("rope", _body({"model_type": mt}, positions, layer_type))
        _check(bare, cos, sin, scaling, positions, f"{mt} (model_type alone)")
        assert bare["spec"] == full["spec"]
    # the text config sent by itself reads the same, under its own model type
    if ROWS[mt]["text_path"] and conf.model_type in ROWS:
        alone = compute("rope", _body(conf.to_dict(), positions, layer_type))
        assert alone["spec"] == full["spec"]
    if ROWS[mt].get("mrope_interleaved") is not None or ROWS[mt].get("mrope_dealing"):  # axes differ
        axes = hf_zoo.three_axes(positions, hf_zoo._n_axes(klass) or 3)
        c3, s3, _, sc3 = want(klass, conf, axes, layer_type)
        _check(compute("rope", _body(cfg.to_dict(), axes, layer_type)), c3, s3, sc3, axes, f"{mt} (3 axes)")


LEGACY = [
    pytest.param(mt, lt, field, key, id=f"{mt}-{key}")
    for mt, row in sorted(ROWS.items())
    for lt, by in row.get("legacy", {}).items()
    for field, key in by.items()
]


@pytest.mark.parametrize("mt,layer_type,field,key", LEGACY)
def test_transformers_4_spellings_its_class_reads(mt, layer_type, field, key):
    """A top-level key the config class converts into its rope parameters (ModernBERT's
    global_rope_theta, Gemma 3n's rope_local_base_freq, ...) is read as the class reads it."""
    klass, _, conf = _class_and_conf(mt)
    name = key.split("/")[0]
    value = 54321.0 if field == "rope_theta" else conf.head_dim // 4 if key.endswith("/head_dim") else 0.25
    probe = type(conf)(**{name: value})
    lt = layer_type or None
    positions = hf_zoo._positions(klass, probe)
    cos, sin, _, scaling = want(klass, probe, positions, lt)
    raw = {"model_type": conf.model_type, name: value}
    for k in ("per_layer_config", "layer_types", "head_dim"):  # what the class computes, as it saves it
        if ROWS[mt].get("per_layer" if k != "head_dim" else "head_dim_saved") and k in probe.to_dict():
            raw[k] = probe.to_dict()[k]
    got = compute("rope", _body(raw, positions, lt))
    _check(got, cos, sin, scaling, positions, f"{mt} {key}")
    assert got["spec"]["rope_theta" if field == "rope_theta" else "head_dim"] is not None


def _pairs(a, b):
    return list(zip(a, b)) if isinstance(a, tuple) else [(a, b)]


@pytest.mark.parametrize("mt,layer_type", CASES)
def test_torch_drop_in_hands_the_attention_the_same(mt, layer_type):
    """posenc.torch.RotaryEmbedding(config) returns what the model's own class returns, in its form
    (half-width pairs, complex freqs_cis), dtype and shape."""
    from posenc.engine.reader.client import Client
    from posenc.torch import RotaryEmbedding

    klass, _, conf = _class_and_conf(mt)
    positions = [0, 1, 5, 100, 1000, 4096, 5000, 9000]
    positions = (
        [p for p in positions if p < conf.max_position_embeddings]
        if hf_zoo._positions(klass, conf) != hf_zoo.POSITIONS
        else positions
    )
    pos = torch.tensor([positions, positions[::-1]])
    stock = klass(conf)
    ours = RotaryEmbedding(copy.deepcopy(conf), client=Client(namespace="ptest-none"))
    x = torch.zeros(1, dtype=torch.float32)
    with torch.no_grad():
        w_out = stock(x, pos, layer_type) if layer_type else stock(x, pos)
    g_out = ours(x, pos, layer_type) if layer_type else ours(x, pos)
    scaling = getattr(ours, f"{layer_type}_attention_scaling" if layer_type else "attention_scaling")
    tol = torch.tensor(hf_zoo.tolerance(positions, scaling))
    for w, g in _pairs(w_out, g_out):
        assert g.shape == w.shape and g.dtype == w.dtype, (mt, g.shape, w.shape, g.dtype, w.dtype)
        w, g = (torch.view_as_real(t).flatten(-2) if t.is_complex() else t for t in (w, g))
        assert ((g[0] - w[0]).abs() <= tol).all(), (mt, (g[0] - w[0]).abs().max())


# -- swapped into small random-weight models of the zoo -------------------------------------------

TINY = dict(
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    num_hidden_layers=2,
    intermediate_size=128,
    vocab_size=128,
    max_position_embeddings=256,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    initializer_range=0.2,
)  # weights large enough that positions move the logits
MOE = dict(num_local_experts=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
# zoo model types of several readings: partial rotary honoured (glm, glm4, persimmon, nemotron),
# interleaved pairs (cohere2), half-width yarn (gpt_oss), complex freqs_cis in a composite's text
# model (llama4_text), per-layer-type and MoE models
SWAPPED = {
    "olmoe": MOE,
    "glm": {},
    "glm4": {},
    "gpt_oss": MOE,
    "cohere2": {},
    "exaone4": {},
    "ernie4_5": {},
    "smollm3": {},
    "helium": {},
    "seed_oss": {},
    "llama4_text": {},
    "persimmon": {},
    "nemotron": {},
    "granitemoe": MOE,
}


def _tiny(mt):
    torch.manual_seed(0)
    config = CONFIG_MAPPING[mt](**TINY, **SWAPPED[mt])
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()


def _swap(model, config=None):
    from posenc.engine.reader.client import Client
    from posenc.torch import RotaryEmbedding

    model.model.rotary_emb = RotaryEmbedding(config or model.config, client=Client(namespace="ptest-none"))


@pytest.mark.parametrize("mt", sorted(SWAPPED))
def test_swapped_into_a_zoo_model_logits_and_tokens_stay(mt):
    """posenc's cos/sin are exact where transformers' are float32: the logits move by that rounding
    only (float32: within 1e-4), greedy tokens are the stock model's, and another θ moves them."""
    model = _tiny(mt)
    ids = torch.randint(3, 128, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(ids).logits
        stock_tokens = model.generate(ids[:, :8], max_new_tokens=12, do_sample=False, pad_token_id=0)
        _swap(model)
        got = model(ids).logits
        tokens = model.generate(ids[:, :8], max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert got.shape == want.shape and got.dtype == torch.float32
    assert (got - want).abs().max() <= 1e-4, (mt, (got - want).abs().max())
    assert torch.equal(tokens, stock_tokens), mt
    other = copy.deepcopy(model.config.to_dict())  # the test can fail: another θ moves the logits
    rp = other["rope_parameters"]
    for block in rp.values() if all(isinstance(v, dict) for v in rp.values()) else [rp]:
        block["rope_theta"] = 50.0
    with torch.no_grad():
        _swap(model, other)
        assert (model(ids).logits - want).abs().max() > 1e-2, mt


@pytest.mark.parametrize("name", sorted(ZOO_PUBLISHED))
def test_published_configs_both_spellings(name):
    """A real config.json of each family of quirks, as published and as its class's to_dict()."""
    published = ZOO_PUBLISHED[name]
    mt = published["model_type"]
    klass, _, _ = _class_and_conf(mt)
    kw = copy.deepcopy(published)
    cfg = CONFIG_MAPPING[kw.pop("model_type")](**kw)
    conf = cfg
    for key in ROWS[mt]["text_path"]:
        conf = getattr(conf, key)
    positions = hf_zoo._positions(klass, conf)
    shown = {}
    for lt in hf_zoo.layer_types(conf):
        cos, sin, _, scaling = want(klass, conf, positions, lt)
        for spelling, raw in (("published", published), ("to_dict", cfg.to_dict())):
            got = compute("rope", _body(raw, positions, lt))
            _check(got, cos, sin, scaling, positions, f"{name} ({spelling}, {lt})")
            shown.setdefault(lt, []).append(got["spec"])
    assert all(a == b for a, b in shown.values()), shown
