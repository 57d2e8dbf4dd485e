"""Strict specs (docs/reference.md "Selections, dtypes, strictness" and each family's rules): every invalid
field is refused with a SpecError whose loc names it (for a cross-field rule, the field whose
value must change; where docs/reference.md leaves two candidates, either is accepted).
"""

from __future__ import annotations

import pytest

from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from tests.engine.specs import LLAMA3, LONG, NAN, SF, YARN, A, R, S, T, plus, rs, w, without

# (id, family, request, acceptable loc prefixes)
CASES = [
    # ---- rope: types
    ("head_dim-str", "rope", w(R, head_dim="64"), [("head_dim",)]),
    ("head_dim-float", "rope", w(R, head_dim=64.0), [("head_dim",)]),
    ("head_dim-bool", "rope", w(R, head_dim=True), [("head_dim",)]),
    ("head_dim-null", "rope", w(R, head_dim=None), [("head_dim",)]),
    ("head_dim-missing", "rope", w(R, drop=["head_dim"]), [("head_dim",)]),
    ("head_dim-1", "rope", w(R, head_dim=1), [("head_dim",)]),
    ("head_dim-0", "rope", w(R, head_dim=0), [("head_dim",)]),
    ("head_dim-neg", "rope", w(R, head_dim=-4), [("head_dim",)]),
    ("head_dim-odd-yarn", "rope", w(R, head_dim=63, rope_scaling=YARN), [("head_dim",)]),
    (  # an odd partial width is taken as transformers takes it, but not by yarn (its ramp fails on one)
        "rotary-dim-odd",
        "rope",
        w(R, head_dim=10, partial_rotary_factor=0.5, rope_scaling=YARN),
        [("head_dim",), ("partial_rotary_factor",)],
    ),
    ("rotary-dim-0", "rope", w(R, partial_rotary_factor=0.01), [("partial_rotary_factor",), ("head_dim",)]),
    ("theta-str", "rope", w(R, rope_theta="10000"), [("rope_theta",)]),
    ("theta-bool", "rope", w(R, rope_theta=True), [("rope_theta",)]),
    ("theta-0", "rope", w(R, rope_theta=0), [("rope_theta",)]),
    ("theta-neg", "rope", w(R, rope_theta=-10000.0), [("rope_theta",)]),
    ("theta-nan", "rope", w(R, rope_theta=NAN), [("rope_theta",)]),
    ("prf-0", "rope", w(R, partial_rotary_factor=0.0), [("partial_rotary_factor",)]),
    ("prf-1.5", "rope", w(R, partial_rotary_factor=1.5), [("partial_rotary_factor",)]),
    ("prf-neg", "rope", w(R, partial_rotary_factor=-0.5), [("partial_rotary_factor",)]),
    ("prf-str", "rope", w(R, partial_rotary_factor="0.5"), [("partial_rotary_factor",)]),
    ("prf-bool", "rope", w(R, partial_rotary_factor=True), [("partial_rotary_factor",)]),
    ("mpe-0", "rope", w(R, max_position_embeddings=0), [("max_position_embeddings",)]),
    ("mpe-float", "rope", w(R, max_position_embeddings=2048.0), [("max_position_embeddings",)]),
    ("mpe-str", "rope", w(R, max_position_embeddings="2048"), [("max_position_embeddings",)]),
    (
        "ompe-top-0",
        "rope",
        rs(LONG, original_max_position_embeddings=0, max_position_embeddings=8192),
        [("original_max_position_embeddings",)],
    ),
    (
        "ompe-top-float",
        "rope",
        rs(YARN, original_max_position_embeddings=4096.0),
        [("original_max_position_embeddings",)],
    ),
    ("layout-bad", "rope", w(R, layout="half-split"), [("layout",)]),
    ("layout-sinusoidal-name", "rope", w(R, layout="concat"), [("layout",)]),
    ("layout-int", "rope", w(R, layout=0), [("layout",)]),
    ("unknown-top", "rope", w(R, rope_thetaa=10000.0), [("rope_thetaa",)]),
    ("unknown-top-rotary_dim", "rope", w(R, rotary_dim=32), [("rotary_dim",)]),
    ("rope_scaling-str", "rope", rs("linear"), [("rope_scaling",)]),
    ("rope_scaling-list", "rope", rs([]), [("rope_scaling",)]),
    ("rope_type-unknown", "rope", rs({"rope_type": "ntk", "factor": 2.0}), [("rope_scaling", "rope_type")]),
    ("rope_type-axial", "rope", rs({"rope_type": "axial"}), [("rope_scaling", "rope_type")]),
    ("rope_type-int", "rope", rs({"rope_type": 1}), [("rope_scaling", "rope_type")]),
    (
        "unknown-in-rope_scaling",
        "rope",
        rs({"rope_type": "linear", "factor": 2.0, "fator": 3.0}),
        [("rope_scaling", "fator")],
    ),
    (
        "unknown-in-rope_parameters",
        "rope",
        w(R, rope_parameters={"rope_type": "linear", "factor": 2.0, "x": 1}),
        [("rope_parameters", "x")],
    ),
    # ---- rope: required keys per rope_type
    ("linear-no-factor", "rope", rs({"rope_type": "linear"}), [SF]),
    ("dynamic-no-factor", "rope", rs({"rope_type": "dynamic"}, max_position_embeddings=4096), [SF]),
    ("dynamic-no-M", "rope", rs({"rope_type": "dynamic", "factor": 2.0}), [("max_position_embeddings",)]),
    ("yarn-no-factor", "rope", rs(without(YARN, "factor")), [SF]),
    (
        "yarn-no-O-no-M",
        "rope",
        rs(without(YARN, "original_max_position_embeddings")),
        [
            ("max_position_embeddings",),
            ("rope_scaling", "original_max_position_embeddings"),
            ("original_max_position_embeddings",),
        ],
    ),
    ("llama3-no-factor", "rope", rs(without(LLAMA3, "factor")), [SF]),
    ("llama3-no-low", "rope", rs(without(LLAMA3, "low_freq_factor")), [("rope_scaling", "low_freq_factor")]),
    (
        "llama3-no-high",
        "rope",
        rs(without(LLAMA3, "high_freq_factor")),
        [("rope_scaling", "high_freq_factor")],
    ),
    (
        "llama3-no-O-no-M",
        "rope",
        rs(without(LLAMA3, "original_max_position_embeddings")),
        [
            ("max_position_embeddings",),
            ("rope_scaling", "original_max_position_embeddings"),
            ("original_max_position_embeddings",),
        ],
    ),
    (
        "longrope-no-short",
        "rope",
        rs(without(LONG, "short_factor"), max_position_embeddings=8192),
        [("rope_scaling", "short_factor")],
    ),
    (
        "longrope-no-long",
        "rope",
        rs(without(LONG, "long_factor"), max_position_embeddings=8192),
        [("rope_scaling", "long_factor")],
    ),
    ("longrope-no-factor-no-M", "rope", rs(LONG), [("max_position_embeddings",), SF]),
    # ---- rope: keys the rope_type does not use
    ("default-with-factor", "rope", rs({"rope_type": "default", "factor": 2.0}), [SF]),
    ("absent-type-with-factor", "rope", rs({"factor": 2.0}), [SF]),
    (
        "linear-with-beta_fast",
        "rope",
        rs({"rope_type": "linear", "factor": 2.0, "beta_fast": 32}),
        [("rope_scaling", "beta_fast")],
    ),
    (
        "linear-with-short_factor",
        "rope",
        rs({"rope_type": "linear", "factor": 2.0, "short_factor": [1.0] * 32}),
        [("rope_scaling", "short_factor")],
    ),
    (
        "dynamic-with-low_freq",
        "rope",
        rs({"rope_type": "dynamic", "factor": 2.0, "low_freq_factor": 1.0}, max_position_embeddings=4096),
        [("rope_scaling", "low_freq_factor")],
    ),
    (
        "yarn-with-low_freq",
        "rope",
        rs(plus(YARN, low_freq_factor=1.0)),
        [("rope_scaling", "low_freq_factor")],
    ),
    ("llama3-with-beta_fast", "rope", rs(plus(LLAMA3, beta_fast=32)), [("rope_scaling", "beta_fast")]),
    (
        "llama3-with-attention_factor",
        "rope",
        rs(plus(LLAMA3, attention_factor=1.0)),
        [("rope_scaling", "attention_factor")],
    ),
    (
        "longrope-with-mscale",
        "rope",
        rs(plus(LONG, mscale=1.0), max_position_embeddings=8192),
        [("rope_scaling", "mscale")],
    ),
    # ---- rope: cross-field rules
    (
        "type-vs-rope_type",
        "rope",
        rs({"type": "linear", "rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=4096),
        [("rope_scaling", "type"), ("rope_scaling", "rope_type")],
    ),
    (
        "scaling-and-parameters",
        "rope",
        w(
            R,
            rope_scaling={"rope_type": "linear", "factor": 2.0},
            rope_parameters={"rope_type": "linear", "factor": 2.0},
        ),
        [("rope_scaling",), ("rope_parameters",)],
    ),
    (
        "theta-conflict",
        "rope",
        w(R, rope_theta=10000.0, rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
        [("rope_theta",), ("rope_parameters", "rope_theta")],
    ),
    (
        "prf-conflict",
        "rope",
        w(R, partial_rotary_factor=1.0, rope_parameters={"partial_rotary_factor": 0.5}),
        [("partial_rotary_factor",), ("rope_parameters", "partial_rotary_factor")],
    ),
    ("seq_len-default", "rope", w(R, seq_len=4096), [("seq_len",)]),
    ("seq_len-linear", "rope", rs({"rope_type": "linear", "factor": 2.0}, seq_len=4096), [("seq_len",)]),
    ("seq_len-yarn", "rope", rs(YARN, seq_len=4096), [("seq_len",)]),
    ("seq_len-llama3", "rope", rs(LLAMA3, seq_len=4096), [("seq_len",)]),
    (
        "seq_len-0",
        "rope",
        rs({"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=4096, seq_len=0),
        [("seq_len",)],
    ),
    (
        "seq_len-float",
        "rope",
        rs({"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=4096, seq_len=4096.0),
        [("seq_len",)],
    ),
    (
        "dynamic-d2",
        "rope",
        w(R, head_dim=2, max_position_embeddings=4096, rope_scaling={"rope_type": "dynamic", "factor": 2.0}),
        [("head_dim",), ("partial_rotary_factor",), ("rope_scaling",)],
    ),
    ("linear-factor<1", "rope", rs({"rope_type": "linear", "factor": 0.5}), [SF]),
    ("linear-factor-0", "rope", rs({"rope_type": "linear", "factor": 0}), [SF]),
    ("linear-factor-str", "rope", rs({"rope_type": "linear", "factor": "2"}), [SF]),
    ("linear-factor-bool", "rope", rs({"rope_type": "linear", "factor": True}), [SF]),
    (
        "dynamic-factor<1",
        "rope",
        rs({"rope_type": "dynamic", "factor": 0.5}, max_position_embeddings=4096),
        [SF],
    ),
    ("yarn-factor<1", "rope", rs(plus(YARN, factor=0.9)), [SF]),
    ("llama3-factor<1", "rope", rs(plus(LLAMA3, factor=0.5)), [SF]),
    ("longrope-factor<1", "rope", rs(plus(LONG, factor=0.5)), [SF]),
    # low == high is a band of width 0, as Llama 4's published configs have it (tests/engine/test_hf_zoo.py)
    (
        "llama3-low>high",
        "rope",
        rs(plus(LLAMA3, low_freq_factor=4.0, high_freq_factor=1.0)),
        [("rope_scaling", "low_freq_factor"), ("rope_scaling", "high_freq_factor")],
    ),
    ("llama3-low-0", "rope", rs(plus(LLAMA3, low_freq_factor=0.0)), [("rope_scaling", "low_freq_factor")]),
    ("yarn-theta-1", "rope", rs(YARN, rope_theta=1.0), [("rope_theta",)]),
    ("yarn-theta<1", "rope", rs(YARN, rope_theta=0.5), [("rope_theta",)]),
    (
        "yarn-theta-1-in-parameters",
        "rope",
        w(R, rope_parameters=plus(YARN, rope_theta=1.0)),
        [("rope_parameters", "rope_theta")],
    ),
    ("yarn-beta_fast-neg", "rope", rs(plus(YARN, beta_fast=-1.0)), [("rope_scaling", "beta_fast")]),
    ("yarn-truncate-str", "rope", rs(plus(YARN, truncate="yes")), [("rope_scaling", "truncate")]),
    (
        "yarn-O-0",
        "rope",
        rs(plus(YARN, original_max_position_embeddings=0)),
        [("rope_scaling", "original_max_position_embeddings")],
    ),
    (
        "longrope-short-len",
        "rope",
        rs(plus(LONG, short_factor=[1.0] * 31), max_position_embeddings=8192),
        [("rope_scaling", "short_factor")],
    ),
    (
        "longrope-long-len",
        "rope",
        rs(plus(LONG, long_factor=[1.0] * 33), max_position_embeddings=8192),
        [("rope_scaling", "long_factor")],
    ),
    (
        "longrope-len-is-d/2-not-D/2",
        "rope",
        rs(LONG, partial_rotary_factor=0.5, max_position_embeddings=8192),
        [("rope_scaling", "short_factor"), ("rope_scaling", "long_factor")],
    ),
    (
        "longrope-short-not-list",
        "rope",
        rs(plus(LONG, short_factor=1.0), max_position_embeddings=8192),
        [("rope_scaling", "short_factor")],
    ),
    (
        "longrope-short-str-item",
        "rope",
        rs(plus(LONG, short_factor=[1.0] * 31 + ["1"]), max_position_embeddings=8192),
        [("rope_scaling", "short_factor")],
    ),
    (
        "longrope-short-zero",
        "rope",
        rs(plus(LONG, short_factor=[0.0] * 32), max_position_embeddings=8192),
        [("rope_scaling", "short_factor")],
    ),
    (
        "longrope-O-1",
        "rope",
        rs(plus(LONG, original_max_position_embeddings=1), max_position_embeddings=8192),
        [("rope_scaling", "original_max_position_embeddings"), SF, ("max_position_embeddings",)],
    ),
    (
        "rope_parameters-factor<1",
        "rope",
        w(R, rope_parameters={"rope_type": "linear", "factor": 0.5}),
        [("rope_parameters", "factor")],
    ),
    (
        "rope_parameters-theta-0",
        "rope",
        w(R, rope_parameters={"rope_theta": 0}),
        [("rope_parameters", "rope_theta")],
    ),
    (
        "rope_parameters-theta-str",
        "rope",
        w(R, rope_parameters={"rope_theta": "1e4"}),
        [("rope_parameters", "rope_theta")],
    ),
    (
        "rope_parameters-prf-bad",
        "rope",
        w(R, rope_parameters={"partial_rotary_factor": 2.0}),
        [("rope_parameters", "partial_rotary_factor")],
    ),
    # ---- sinusoidal
    ("d_model-1", "sinusoidal", w(S, d_model=1), [("d_model",)]),
    ("d_model-0", "sinusoidal", w(S, d_model=0), [("d_model",)]),
    ("d_model-str", "sinusoidal", w(S, d_model="16"), [("d_model",)]),
    ("d_model-float", "sinusoidal", w(S, d_model=16.0), [("d_model",)]),
    ("d_model-bool", "sinusoidal", w(S, d_model=True), [("d_model",)]),
    ("d_model-missing", "sinusoidal", w(S, drop=["d_model"]), [("d_model",)]),
    ("fairseq-d_model-3", "sinusoidal", w(S, d_model=3, layout="fairseq"), [("d_model",)]),
    ("fairseq-d_model-2", "sinusoidal", w(S, d_model=2, layout="fairseq"), [("d_model",)]),
    ("base-1", "sinusoidal", w(S, base=1.0), [("base",)]),
    ("base-0.5", "sinusoidal", w(S, base=0.5), [("base",)]),
    ("base-neg", "sinusoidal", w(S, base=-2), [("base",)]),
    ("base-str", "sinusoidal", w(S, base="10000"), [("base",)]),
    ("base-bool", "sinusoidal", w(S, base=True), [("base",)]),
    ("s-layout-bad", "sinusoidal", w(S, layout="sin"), [("layout",)]),
    ("s-layout-rope-name", "sinusoidal", w(S, layout="half_split"), [("layout",)]),
    ("offset-neg", "sinusoidal", w(S, offset=-1), [("offset",)]),
    ("offset-float", "sinusoidal", w(S, offset=1.5), [("offset",)]),
    ("offset-str", "sinusoidal", w(S, offset="1"), [("offset",)]),
    ("offset-bool", "sinusoidal", w(S, offset=True), [("offset",)]),
    ("s-unknown", "sinusoidal", w(S, head_dim=16), [("head_dim",)]),
    ("s-dtype", "sinusoidal", w(S, dtype="float64"), [("dtype",)]),
    ("s-positions-empty", "sinusoidal", w(S, positions=[]), [("positions",)]),
    # ---- alibi
    ("num_heads-0", "alibi", w(A, num_heads=0), [("num_heads",)]),
    ("num_heads-neg", "alibi", w(A, num_heads=-1), [("num_heads",)]),
    ("num_heads-str", "alibi", w(A, num_heads="8"), [("num_heads",)]),
    ("num_heads-float", "alibi", w(A, num_heads=8.0), [("num_heads",)]),
    ("num_heads-bool", "alibi", w(A, num_heads=True), [("num_heads",)]),
    ("num_heads-missing", "alibi", w(A, drop=["num_heads"]), [("num_heads",)]),
    ("heads-empty", "alibi", w(A, heads=[]), [("heads",)]),
    ("heads-out-of-range", "alibi", w(A, heads=[0, 8]), [("heads",)]),
    ("heads-neg", "alibi", w(A, heads=[-1]), [("heads",)]),
    ("heads-str-item", "alibi", w(A, heads=["0"]), [("heads",)]),
    ("heads-float-item", "alibi", w(A, heads=[0.0]), [("heads",)]),
    ("heads-bool-item", "alibi", w(A, heads=[True]), [("heads",)]),
    ("heads-not-list", "alibi", w(A, heads=3), [("heads",)]),
    ("max_bias-0", "alibi", w(A, max_bias=0), [("max_bias",)]),
    ("max_bias-neg", "alibi", w(A, max_bias=-8.0), [("max_bias",)]),
    ("max_bias-str", "alibi", w(A, max_bias="8"), [("max_bias",)]),
    ("max_bias-bool", "alibi", w(A, max_bias=True), [("max_bias",)]),
    ("max_bias-nan", "alibi", w(A, max_bias=NAN), [("max_bias",)]),
    ("mode-bad", "alibi", w(A, mode="bidirectional"), [("mode",)]),
    ("mode-int", "alibi", w(A, mode=1), [("mode",)]),
    ("mask_future-str", "alibi", w(A, mask_future="true"), [("mask_future",)]),
    ("mask_future-int", "alibi", w(A, mask_future=1), [("mask_future",)]),
    (
        "mask_future-symmetric",
        "alibi",
        w(A, mode="symmetric", mask_future=True),
        [("mask_future",), ("mode",)],
    ),
    ("query-missing", "alibi", w(A, drop=["query"]), [("query",)]),
    ("key-missing", "alibi", w(A, drop=["key"]), [("key",)]),
    ("query-empty", "alibi", w(A, query=[]), [("query",)]),
    ("key-empty-range", "alibi", w(A, key={"start": 1, "stop": 1}), [("key",)]),
    ("key-2^31", "alibi", w(A, key=[0, 2**31]), [("key",)]),
    ("a-unknown", "alibi", w(A, slopes=[0.5]), [("slopes",)]),
    ("a-dtype", "alibi", w(A, dtype="fp16"), [("dtype",)]),
    # ---- t5-buckets
    ("bidirectional-str", "t5-buckets", w(T, bidirectional="true"), [("bidirectional",)]),
    ("bidirectional-int", "t5-buckets", w(T, bidirectional=1), [("bidirectional",)]),
    ("num_buckets-3-bi", "t5-buckets", w(T, num_buckets=3), [("num_buckets",)]),
    ("num_buckets-1-uni", "t5-buckets", w(T, num_buckets=1, bidirectional=False), [("num_buckets",)]),
    ("num_buckets-0", "t5-buckets", w(T, num_buckets=0), [("num_buckets",)]),
    ("num_buckets-str", "t5-buckets", w(T, num_buckets="32"), [("num_buckets",)]),
    ("num_buckets-float", "t5-buckets", w(T, num_buckets=32.0), [("num_buckets",)]),
    (
        "max_distance-exact-bi",
        "t5-buckets",
        w(T, num_buckets=32, max_distance=8),
        [("max_distance",), ("num_buckets",)],
    ),
    (
        "max_distance-exact-uni",
        "t5-buckets",
        w(T, num_buckets=32, max_distance=16, bidirectional=False),
        [("max_distance",), ("num_buckets",)],
    ),
    ("max_distance-0", "t5-buckets", w(T, max_distance=0), [("max_distance",)]),
    ("max_distance-neg", "t5-buckets", w(T, max_distance=-128), [("max_distance",)]),
    ("max_distance-str", "t5-buckets", w(T, max_distance="128"), [("max_distance",)]),
    ("max_distance-float", "t5-buckets", w(T, max_distance=128.0), [("max_distance",)]),
    ("t5-dtype-float32", "t5-buckets", w(T, dtype="float32"), [("dtype",)]),
    ("t5-dtype-int32", "t5-buckets", w(T, dtype="int32"), [("dtype",)]),
    ("t5-unknown", "t5-buckets", w(T, num_heads=8), [("num_heads",)]),
    ("t5-query-neg", "t5-buckets", w(T, query=[-1]), [("query",)]),
    ("t5-key-missing", "t5-buckets", w(T, drop=["key"]), [("key",)]),
]

# ---- selections and dtype, for rope's positions (the same reader serves query/key)
BAD_SELECTIONS = {
    "missing": None,
    "empty": [],
    "negative": [0, -1],
    "2^31": [2**31],
    "float-item": [1.5],
    "float-int-item": [1.0],
    "str-item": ["1"],
    "bool-item": [True],
    "str": "0",
    "int": 5,
    "nested": [[0]],
    "start=stop": {"start": 3, "stop": 3},
    "start>stop": {"start": 5, "stop": 2},
    "step-0": {"start": 0, "stop": 9, "step": 0},
    "step-neg": {"start": 0, "stop": 9, "step": -1},
    "step-float": {"start": 0, "stop": 9, "step": 1.0},
    "unknown-key": {"start": 0, "stop": 10, "foo": 1},
    "no-stop": {"start": 0},
    "start-neg": {"start": -1, "stop": 3},
    "stop-past-2^31": {"start": 0, "stop": 2**31 + 1},
    "start-float": {"start": 0.0, "stop": 3},
    "start-str": {"start": "0", "stop": 3},
}
for name, sel in BAD_SELECTIONS.items():
    req = w(R, drop=["positions"]) if sel is None else w(R, positions=sel)
    CASES.append((f"positions-{name}", "rope", req, [("positions",)]))
for name, val in {
    "float64": "float64",
    "fp16": "fp16",
    "bf16": "bf16",
    "int": 32,
    "bool": True,
    "upper": "FLOAT32",
}.items():
    CASES.append((f"dtype-{name}", "rope", w(R, dtype=val), [("dtype",)]))


@pytest.mark.parametrize("family,request_,locs", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_field_is_refused_naming_it(family, request_, locs):
    with pytest.raises(SpecError) as e:
        compute(family, request_)
    loc = tuple(e.value.loc)
    assert any(loc[: len(want)] == want for want in locs), (
        f"loc {loc!r}, expected one of {locs!r}: {e.value.msg}"
    )
    assert isinstance(e.value.msg, str) and e.value.msg


def test_case_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))
