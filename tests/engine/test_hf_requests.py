"""hf_config and named-table bodies through the pipeline, the engine's table config and
``posenc compute``: what is refused (422 naming the field) and what every answer carries."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from posenc.engine.answer import pipeline
from posenc.engine.answer.pipeline import compute
from posenc.engine.core.encode import encode
from posenc.engine.core.errors import SpecError
from posenc.engine.core.formats import read_safetensors
from posenc.engine.models.registry import supported
from posenc.engine.process.configured import DEFAULT_CONFIG, load_config, named_specs, parse_config
from tests.engine.hf_published import ALIBI, ROPE

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LLAMA = ROPE["llama-3.1-8b"]
NAMED = named_specs(load_config(None))


def loc_of(family, body, named=None):
    with pytest.raises(SpecError) as e:
        pipeline.parse(family, body, named=named)
    return e.value.loc, e.value.msg


@pytest.mark.parametrize(
    "family,body,loc",
    [
        # hf_config beside explicit spec fields
        ("rope", {"hf_config": LLAMA, "head_dim": 64, "positions": [1]}, ("head_dim",)),
        ("rope", {"hf_config": LLAMA, "layout": "interleaved", "positions": [1]}, ("layout",)),
        ("alibi", {"hf_config": ALIBI["mpt-7b"], "mode": "symmetric", "query": [1], "key": [1]}, ("mode",)),
        ("rope", {"table": "llama-3.1-8b", "rope_theta": 1.0, "positions": [1]}, ("rope_theta",)),
        ("rope", {"table": "llama-3.1-8b", "hf_config": LLAMA, "positions": [1]}, ("table",)),
        # layer_type: only with hf_config, required by per-layer configs, refused by flat ones
        ("rope", {"head_dim": 64, "layer_type": "full_attention", "positions": [1]}, ("layer_type",)),
        ("rope", {"hf_config": ROPE["gemma-3-4b"], "positions": [1]}, ("layer_type",)),
        (
            "rope",
            {"hf_config": ROPE["gemma-3-4b"], "layer_type": "global", "positions": [1]},
            ("layer_type",),
        ),
        ("rope", {"hf_config": LLAMA, "layer_type": "sliding_attention", "positions": [1]}, ("layer_type",)),
        ("rope", {"hf_config": LLAMA, "layer_type": 3, "positions": [1]}, ("layer_type",)),
        # model types: unknown, not of the family, missing
        ("rope", {"hf_config": {**LLAMA, "model_type": "t5"}, "positions": [1]}, ("hf_config", "model_type")),
        ("rope", {"hf_config": ALIBI["bloom-560m"], "positions": [1]}, ("hf_config", "model_type")),
        ("alibi", {"hf_config": LLAMA, "query": [1], "key": [1]}, ("hf_config", "model_type")),
        (
            "rope",
            {"hf_config": {k: v for k, v in LLAMA.items() if k != "model_type"}, "positions": [1]},
            ("hf_config", "model_type"),
        ),
        ("sinusoidal", {"hf_config": LLAMA, "positions": [1]}, ("hf_config", "model_type")),
        ("rope", {"hf_config": "config.json", "positions": [1]}, ("hf_config",)),
        # a config whose positions are not of this family
        ("rope", {"hf_config": ALIBI["falcon-rw-1b"], "positions": [1]}, ("hf_config", "alibi")),
        ("alibi", {"hf_config": ROPE["falcon-7b"], "query": [1], "key": [1]}, ("hf_config", "alibi")),
        (
            "alibi",
            {"hf_config": {**ALIBI["mpt-7b"], "attn_config": {"alibi": False}}, "query": [1], "key": [1]},
            ("hf_config", "attn_config", "alibi"),
        ),
        # invalid values are refused at the config key they came from
        (
            "rope",
            {"hf_config": {**ROPE["pythia-6.9b"], "rotary_pct": 1.5}, "positions": [1]},
            ("hf_config", "rotary_pct"),
        ),
        (
            "rope",
            {"hf_config": {**ROPE["pythia-6.9b"], "rotary_emb_base": "1e4"}, "positions": [1]},
            ("hf_config", "rotary_emb_base"),
        ),
        (
            "rope",
            {
                "hf_config": {**LLAMA, "rope_scaling": {**LLAMA["rope_scaling"], "factor": 0.5}},
                "positions": [1],
            },
            ("hf_config", "rope_scaling", "factor"),
        ),
        (
            "rope",
            {"hf_config": {**LLAMA, "rope_scaling": {"rope_type": "mrope"}}, "positions": [1]},
            ("hf_config", "rope_scaling", "rope_type"),
        ),
        (
            "rope",
            {"hf_config": {**LLAMA, "hidden_size": "4096"}, "positions": [1]},
            ("hf_config", "hidden_size"),
        ),
        ("rope", {"hf_config": {**LLAMA, "head_dim": 1}, "positions": [1]}, ("hf_config", "head_dim")),
        (
            "rope",
            {
                "hf_config": {**ROPE["gemma-3-4b"], "rope_local_base_freq": -1.0},
                "layer_type": "sliding_attention",
                "positions": [1],
            },
            ("hf_config", "rope_local_base_freq"),
        ),
        (
            "rope",
            {"hf_config": {**ROPE["gpt-j-6b"], "rotary_dim": None}, "positions": [1]},
            ("hf_config", "rotary_dim"),
        ),
        (
            "rope",
            {"hf_config": {**ROPE["gpt-j-6b"], "rotary_dim": 512}, "positions": [1]},
            ("hf_config", "rotary_dim"),
        ),
        (
            "rope",
            {
                "hf_config": {
                    **ROPE["phi-3.5-moe"],
                    "rope_scaling": {**ROPE["phi-3.5-moe"]["rope_scaling"], "long_mscale": 1.0},
                },
                "positions": [1],
            },
            ("hf_config", "rope_scaling", "long_mscale"),
        ),
        # selections and dtype keep their own names
        ("rope", {"hf_config": LLAMA, "positions": [-1]}, ("positions", 0)),
        ("rope", {"hf_config": LLAMA, "positions": [1], "dtype": "int8"}, ("dtype",)),
        # named tables
        ("rope", {"table": "no-such-table", "positions": [1]}, ("table",)),
        ("rope", {"table": "alibi-8", "positions": [1]}, ("table",)),
        ("rope", {"table": 7, "positions": [1]}, ("table",)),
        (
            "rope",
            {"table": "llama-3.1-8b", "layer_type": "full_attention", "positions": [1]},
            ("layer_type",),
        ),
    ],
)
def test_refused_naming_the_field(family, body, loc):
    got, _ = loc_of(family, body, NAMED)
    assert got == loc


def test_unknown_model_type_and_table_name_list_the_known_ones():
    _, msg = loc_of("rope", {"hf_config": {"model_type": "bloom"}, "positions": [1]})
    # over 40 readers (the zoo): the first few, the count of the rest, and where the list is
    names = supported("rope")
    assert "bloom" in msg and "GET /v1/models" in msg and "spec fields" in msg
    assert all(t in msg for t in names[:8]) and f"and {len(names) - 8} more" in msg
    _, msg = loc_of("alibi", {"hf_config": {"model_type": "llama"}, "query": [1], "key": [1]})
    assert "bloom, mpt" in msg or all(t in msg for t in supported("alibi"))
    _, msg = loc_of("rope", {"table": "llama", "positions": [1]}, NAMED)
    assert all(n in msg for n, (f, _) in NAMED.items() if f == "rope")
    assert "alibi-8" not in msg


def test_named_table_answers_its_spec_with_these_selections_and_dtype():
    body = {"table": "llama-3.1-8b", "positions": [0, 7, 4096], "dtype": "bfloat16"}
    req = pipeline.parse("rope", body, named=NAMED)
    got = pipeline.arrays(req)
    spec = next(e["spec"] for e in DEFAULT_CONFIG["tables"] if e.get("name") == "llama-3.1-8b")
    want = compute("rope", {**spec, "positions": [0, 7, 4096], "dtype": "bfloat16"})
    for k in ("cos", "sin", "inv_freq"):
        np.testing.assert_array_equal(got[k], want[k])
    assert "spec" not in want and got["spec"] == NAMED["llama-3.1-8b"][1]


def test_the_spec_travels_in_every_format():
    req = pipeline.parse("rope", {"hf_config": LLAMA, "positions": [1, 2], "dtype": "bfloat16"})
    result = pipeline.arrays(req)
    body, _ = encode(req.family, result, req.dtype, "json")
    assert json.loads(body)["spec"] == req.shown
    body, _ = encode(req.family, result, req.dtype, "safetensors")
    n = int.from_bytes(body[:8], "little")
    meta = json.loads(body[8 : 8 + n])["__metadata__"]
    assert json.loads(meta["spec"]) == req.shown and meta["family"] == "rope"
    arrays, kinds = read_safetensors(body)
    assert set(arrays) == {"cos", "sin", "inv_freq", "attention_scaling"} and kinds["cos"] == "bfloat16"
    import io

    body, _ = encode(req.family, result, req.dtype, "npz")
    z = np.load(io.BytesIO(body))  # stock numpy, no pickle
    assert json.loads(str(z["spec"])) == req.shown
    plain = pipeline.parse("rope", {**req.shown, "positions": [1, 2]})
    assert plain.shown is None and "spec" not in pipeline.arrays(plain)


def test_pipeline_cache_follows_the_named_tables():
    """The spec cache keys a table body on the named spec: a new engine config with the same
    name answers with the new spec."""
    named = {"t": ("rope", {"head_dim": 64})}
    p = pipeline.Pipeline(named=lambda: named)
    a = p.request("rope", {"table": "t", "positions": [1]})
    assert a.spec.head_dim == 64 and a.shown["head_dim"] == 64
    assert p.request("rope", {"table": "t", "positions": [2]}).spec is a.spec  # cached
    named = {"t": ("rope", {"head_dim": 32})}
    b = p.request("rope", {"table": "t", "positions": [1]})
    assert b.spec.head_dim == 32 and b.shown["head_dim"] == 32
    c = p.request("rope", {"hf_config": LLAMA, "positions": [3]})
    assert p.request("rope", {"hf_config": LLAMA, "positions": [4]}).shown == c.shown


# -- the engine's table config ---------------------------------------------------------------


def test_table_config_takes_hf_config_objects_and_paths(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "gemma.json").write_text(json.dumps(ROPE["gemma-3-4b"]))
    cfg = {
        "length": 1024,
        "tables": [
            {"name": "llama", "family": "rope", "hf_config": LLAMA},
            {
                "name": "gemma-global",
                "family": "rope",
                "hf_config": "models/gemma.json",
                "layer_type": "full_attention",
            },
            {"name": "mpt", "family": "alibi", "hf_config": ALIBI["mpt-7b"]},
        ],
    }
    path = tmp_path / "tables.json"
    path.write_text(json.dumps(cfg))
    tables = load_config(str(path))
    named = named_specs(tables)
    assert named["gemma-global"][1]["rope_scaling"] == {"rope_type": "linear", "factor": 8.0}
    assert named["gemma-global"][1]["rope_theta"] == 1e6
    assert named["mpt"] == (
        "alibi",
        {"num_heads": 32, "max_bias": 8.0, "mode": "causal", "mask_future": False},
    )
    direct = pipeline.parse("rope", {"hf_config": LLAMA, "positions": [1]})
    assert [t.table.key for t in tables if t.name == "llama"] == [direct.table.key]


@pytest.mark.parametrize(
    "entry,loc",
    [
        ({"family": "rope", "hf_config": LLAMA, "spec": {"head_dim": 64}}, ("tables", 0, "spec")),
        (
            {"family": "rope", "hf_config": {**LLAMA, "rope_scaling": {"rope_type": "linear"}}},
            ("tables", 0, "hf_config", "rope_scaling", "factor"),
        ),
        ({"family": "rope", "hf_config": ROPE["gemma-3-4b"]}, ("tables", 0, "layer_type")),
        (
            {"family": "rope", "spec": {"head_dim": 64}, "layer_type": "full_attention"},
            ("tables", 0, "layer_type"),
        ),
        ({"family": "alibi", "hf_config": LLAMA}, ("tables", 0, "hf_config", "model_type")),
        ({"family": "rope", "hf_config": "missing.json"}, ("tables", 0, "hf_config")),
    ],
)
def test_table_config_refusals(entry, loc, tmp_path):
    with pytest.raises(SpecError) as e:
        parse_config({"tables": [entry]}, str(tmp_path))
    assert e.value.loc == loc


def test_table_names_are_unique():
    with pytest.raises(SpecError) as e:
        parse_config(
            {
                "tables": [
                    {"name": "a", "family": "rope", "spec": {"head_dim": 64}},
                    {"name": "a", "family": "rope", "spec": {"head_dim": 32}},
                ]
            }
        )
    assert e.value.loc == ("tables", 1, "name")


# -- posenc compute ----------------------------------------------------------------------------


def posenc(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "posenc", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_compute_with_hf_config_file(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(ROPE["gemma-3-4b"]))
    out = tmp_path / "out.npz"
    r = posenc(
        "compute",
        "rope",
        "--hf-config",
        str(tmp_path / "config.json"),
        "--layer-type",
        "sliding_attention",
        "--spec",
        '{"positions": [0, 5, 9000]}',
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    z = np.load(out)
    want = compute(
        "rope",
        {"hf_config": ROPE["gemma-3-4b"], "layer_type": "sliding_attention", "positions": [0, 5, 9000]},
    )
    assert z["cos"].tobytes() == want["cos"].tobytes()
    assert json.loads(str(z["spec"])) == want["spec"] and '"rope_theta": 10000.0' in r.stderr


def test_compute_named_table_from_the_config_it_would_load(tmp_path):
    cfg = tmp_path / "tables.json"
    cfg.write_text(
        json.dumps({"tables": [{"name": "mine", "family": "rope", "hf_config": ROPE["pythia-6.9b"]}]})
    )
    out = tmp_path / "out.safetensors"
    spec = '{"table": "mine", "positions": [3]}'
    r = posenc("compute", "rope", "--spec", spec, "--out", str(out), env={"POSENC_TABLES": str(cfg)})
    assert r.returncode == 0, r.stderr
    arrays, _ = read_safetensors(out.read_bytes())
    assert arrays["cos"].shape == (1, 32)
    r = posenc("compute", "rope", "--spec", spec, "--out", str(out))  # the embedded default set
    assert r.returncode == 2 and "table: unknown table 'mine'" in r.stderr and "llama-3.1-8b" in r.stderr
    r = posenc(
        "compute",
        "rope",
        "--tables",
        str(cfg),
        "--spec",
        '{"table": "mine", "positions": [3]}',
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr


def test_compute_refuses_hf_config_with_spec_fields(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    r = posenc(
        "compute",
        "rope",
        "--hf-config",
        str(tmp_path / "config.json"),
        "--spec",
        '{"positions": [0], "rope_theta": 1e4}',
        "--out",
        str(tmp_path / "o.npz"),
    )
    assert r.returncode == 2 and "rope_theta" in r.stderr and "Traceback" not in r.stderr
    r = posenc(
        "compute",
        "rope",
        "--hf-config",
        str(tmp_path / "nope.json"),
        "--spec",
        '{"positions": [0]}',
        "--out",
        str(tmp_path / "o.npz"),
    )
    assert r.returncode == 2 and "hf_config" in r.stderr and "Traceback" not in r.stderr


# -- no input gets anything but a SpecError --------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)
_CONFIGS = [("rope", c) for c in ROPE.values()] + [("alibi", c) for c in ALIBI.values()]


def _keys(cfg, prefix=()):
    for k, v in cfg.items():
        yield (*prefix, k)
        if isinstance(v, dict):
            yield from _keys(v, (*prefix, k))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.integers(0, len(_CONFIGS) - 1),
    pick=st.integers(0, 10**6),
    value=_JSON,
    layer_type=st.none() | st.sampled_from(["full_attention", "sliding_attention", "x"]),
)
def test_mangled_configs_get_a_spec_error_or_an_answer(which, pick, value, layer_type):
    family, cfg = _CONFIGS[which]
    cfg = json.loads(json.dumps(cfg))
    keys = list(_keys(cfg))
    path = keys[pick % len(keys)]
    obj = cfg
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value
    body = {
        "hf_config": cfg,
        "layer_type": layer_type,
        **({"positions": [0, 9]} if family == "rope" else {"query": [3], "key": [0, 3]}),
    }
    try:
        req = pipeline.parse(family, body)
        pipeline.check(req)
        pipeline.arrays(req)
    except SpecError as e:
        assert e.loc and e.loc[0] in ("hf_config", "layer_type"), e.loc


def test_a_huge_head_dim_is_refused_before_anything_is_allocated():
    loc, _ = loc_of("rope", {"head_dim": 2**34, "positions": [0]})
    assert loc == ("head_dim",)
    loc, _ = loc_of(
        "rope", {"hf_config": {**LLAMA, "hidden_size": 2**40, "num_attention_heads": 1}, "positions": [0]}
    )
    assert loc == ("hf_config", "hidden_size")


def test_null_hf_config_table_and_layer_type_are_absent():
    body = {"head_dim": 64, "positions": [1, 2], "hf_config": None, "table": None, "layer_type": None}
    got = pipeline.arrays(pipeline.parse("rope", body))
    want = compute("rope", {"head_dim": 64, "positions": [1, 2]})
    assert "spec" not in got and got["cos"].tobytes() == want["cos"].tobytes()
