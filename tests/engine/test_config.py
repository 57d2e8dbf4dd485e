"""The engine's table config (posenc.engine.process.configured): every error names its field, and the default
config and the expansions of dtypes, variants and lengths.
"""

from __future__ import annotations

import json

import pytest

from posenc.engine.core.errors import SpecError
from posenc.engine.process.configured import DEFAULT_CONFIG, load_config, parse_config

# ---------------------------------------------------------------------------------------------
# Table config

LLAMA3_BAD_FACTOR = {
    "head_dim": 64,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 0.5,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}


def one(entry: dict, **top) -> dict:
    return {**top, "tables": [entry]}


@pytest.mark.parametrize(
    "cfg, loc",
    [
        ([], ()),
        ({"tables": [], "extra": 1}, ("extra",)),
        ({}, ("tables",)),
        ({"tables": {"family": "rope"}}, ("tables",)),
        # length: an integer in [1, 2**24]
        ({"length": 0, "tables": []}, ("length",)),
        ({"length": "4096", "tables": []}, ("length",)),
        ({"length": 4096.0, "tables": []}, ("length",)),
        ({"length": True, "tables": []}, ("length",)),
        ({"length": 2**24 + 1, "tables": []}, ("length",)),
        (one({"family": "rope", "spec": {"head_dim": 8}, "length": 0}), ("tables", 0, "length")),
        (one({"family": "rope", "spec": {"head_dim": 8}, "length": -5}), ("tables", 0, "length")),
        (one({"family": "rope", "spec": {"head_dim": 8}, "length": "10"}), ("tables", 0, "length")),
        (one({"family": "rope", "spec": {"head_dim": 8}, "length": 1.5}), ("tables", 0, "length")),
        # entries
        ({"tables": ["rope"]}, ("tables", 0)),
        (one({"family": "rope", "spec": {"head_dim": 8}, "dtype": "float16"}), ("tables", 0, "dtype")),
        (one({"family": "xpos", "spec": {}}), ("tables", 0, "family")),
        (one({"spec": {"head_dim": 8}}), ("tables", 0, "family")),
        (
            {
                "tables": [
                    {"family": "rope", "spec": {"head_dim": 8}},
                    {"family": "RoPE", "spec": {"head_dim": 8}},
                ]
            },
            ("tables", 1, "family"),
        ),
        (one({"family": "rope", "spec": {"head_dim": 8}, "name": 3}), ("tables", 0, "name")),
        (one({"family": "rope", "spec": [8]}), ("tables", 0, "spec")),
        # selections and dtype belong to requests, not to a table spec
        (
            one({"family": "rope", "spec": {"head_dim": 8, "positions": [0, 1]}}),
            ("tables", 0, "spec", "positions"),
        ),
        (
            one({"family": "sinusoidal", "spec": {"d_model": 8, "positions": {"start": 0, "stop": 4}}}),
            ("tables", 0, "spec", "positions"),
        ),
        (one({"family": "alibi", "spec": {"num_heads": 8, "query": [0]}}), ("tables", 0, "spec", "query")),
        (one({"family": "t5-buckets", "spec": {"key": [0]}}), ("tables", 0, "spec", "key")),
        (
            one({"family": "rope", "spec": {"head_dim": 8, "dtype": "float16"}}),
            ("tables", 0, "spec", "dtype"),
        ),
        # dtypes
        (one({"family": "rope", "spec": {"head_dim": 8}, "dtypes": ["float64"]}), ("tables", 0, "dtypes", 0)),
        (
            one({"family": "alibi", "spec": {"num_heads": 4}, "dtypes": ["float32", "int8"]}),
            ("tables", 0, "dtypes", 1),
        ),
        (one({"family": "sinusoidal", "spec": {"d_model": 8}, "dtypes": []}), ("tables", 0, "dtypes")),
        (one({"family": "sinusoidal", "spec": {"d_model": 8}, "dtypes": "float32"}), ("tables", 0, "dtypes")),
        # null is not a dtype here: a null in the list would build a table with no dtype at all
        (one({"family": "rope", "spec": {"head_dim": 8}, "dtypes": [None]}), ("tables", 0, "dtypes", 0)),
        (one({"family": "t5-buckets", "spec": {}, "dtypes": ["float32"]}), ("tables", 0, "dtypes")),
        # spec errors keep the spec's own path under tables.i.spec
        (one({"family": "rope", "spec": LLAMA3_BAD_FACTOR}), ("tables", 0, "spec", "rope_scaling", "factor")),
        (one({"family": "rope", "spec": {"rope_theta": 10000.0}}), ("tables", 0, "spec", "head_dim")),
        (
            one({"family": "rope", "spec": {"head_dim": 8, "rope_thetaa": 5.0}}),
            ("tables", 0, "spec", "rope_thetaa"),
        ),
        (one({"family": "alibi", "spec": {"num_heads": 0}}), ("tables", 0, "spec", "num_heads")),
        (
            one({"family": "t5-buckets", "spec": {"num_buckets": 32, "max_distance": 4}}),
            ("tables", 0, "spec", "max_distance"),
        ),
    ],
    ids=lambda v: json.dumps(v)[:60] if not isinstance(v, tuple) else ".".join(map(str, v)),
)
def test_config_errors_name_the_field(cfg, loc):
    with pytest.raises(SpecError) as ei:
        parse_config(cfg)
    assert ei.value.loc == loc, ei.value
    field = ".".join(map(str, loc)) or "body"
    assert str(ei.value).startswith(f"{field}: "), str(ei.value)


def test_load_config_errors(tmp_path):
    with pytest.raises(SpecError) as ei:
        load_config(str(tmp_path / "missing.json"))
    assert ei.value.loc == ("tables",)
    bad = tmp_path / "bad.json"
    bad.write_text('{"tables": [')
    with pytest.raises(SpecError) as ei:
        load_config(str(bad))
    assert ei.value.loc == ("tables",)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(one({"family": "rope", "spec": {"head_dim": 8}}, length=16)))
    (t,) = load_config(str(good))
    assert (t.table.family, t.table.length, t.table.dtype) == ("rope", 16, "float32")


def test_default_config_parses():
    tables = load_config(None)
    json.dumps(DEFAULT_CONFIG)  # plain JSON: what --tables takes
    assert [t.table.key for t in tables] == [t.table.key for t in parse_config(DEFAULT_CONFIG)]
    assert len(tables) == len(DEFAULT_CONFIG["tables"])  # one float32 table per entry
    fams = {t.table.family for t in tables}
    assert fams == {"rope", "sinusoidal", "sinusoidal-grid", "alibi", "t5-buckets"}
    assert len({t.table.digest for t in tables}) == len(tables)
    assert len({t.name for t in tables}) == len(tables)
    # right-sized: each model's table as long as the positions it uses, the whole
    # set a few hundred MiB, not the 1.4 GiB of one 131072-row length for all
    lengths = {t.name: t.table.length for t in tables}
    assert lengths["llama-3.1-8b"] == DEFAULT_CONFIG["length"] == 131072  # its 128k context
    assert lengths["pythia-6.9b"] >= 2048 and lengths["qwen2.5-7b"] >= 32768
    assert all(lengths[f"sinusoidal-{d}"] == 8192 for d in (512, 768, 1024))
    assert (
        lengths["flux.1"] >= 4096 and lengths["sd3-grid"] == 192 * 192
    )  # the latent grid; pos_embed_max_size²
    assert all(lengths[f"alibi-{h}"] >= 65536 for h in (8, 12, 16, 32, 64))
    total = sum(t.table.nbytes() for t in tables)
    assert 150 * 2**20 < total < 256 * 2**20, total


def test_config_expands_dtypes_variants_and_lengths():
    lr = {
        "head_dim": 16,
        "max_position_embeddings": 4096,
        "rope_scaling": {
            "rope_type": "longrope",
            "original_max_position_embeddings": 1024,
            "short_factor": [1.0] * 8,
            "long_factor": [2.0] * 8,
        },
    }
    tables = parse_config(
        {
            "length": 100,
            "tables": [
                {
                    "family": "rope",
                    "spec": {"head_dim": 8},
                    "dtypes": ["float32", "bfloat16", "float16"],
                    "length": 7,
                },
                {"family": "rope", "spec": lr},
                {"family": "sinusoidal", "spec": {"d_model": 8, "layout": "interleaved"}},
                {"family": "sinusoidal", "spec": {"d_model": 8, "layout": "concat"}},  # same stored table
                {"family": "t5-buckets", "spec": {"max_distance": 64}},
            ],
        }
    )
    got = [(t.table.family, t.table.dtype, t.table.length, t.table.variant) for t in tables]
    assert got == [
        ("rope", "float32", 7, None),
        ("rope", "bfloat16", 7, None),
        ("rope", "float16", 7, None),
        ("rope", "float32", 100, "short"),
        ("rope", "float32", 100, "long"),
        ("sinusoidal", "float32", 100, None),
        ("t5-buckets", None, 64, None),
    ]


# ---------------------------------------------------------------------------------------------
# Segments
