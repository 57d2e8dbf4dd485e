"""The C shortcut held to the pipeline with no engine at all: each family's table is built in
memory by its own TableDef (the arrays an engine would publish), a family's ``template`` is made
from a first body exactly as the service learns it, and every later body the C code answers must
be the pipeline's answer from those arrays, byte for byte, and the pipeline's exact compute (no
table) must be the same bytes. Nothing here runs a process or maps shared memory."""

from __future__ import annotations

import types

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from posenc.engine import kernels
from posenc.engine.answer import pipeline
from posenc.engine.core.encode import encode
from posenc.engine.tables import FAMILIES
from posenc.service.shortcut import templates as replay
from tests.independent import assert_c_answer

pytestmark = pytest.mark.skipif(not replay.NATIVE, reason="service._hot is not built")

LENGTH = 512  # rows (distances) of the in-memory tables
ACCEPT = b"application/x-safetensors"
HEADERS = [(b"content-type", b"application/json"), (b"accept", ACCEPT)]
_VIEWS: dict = {}


def view_of(table):
    """What Client.attach maps for ``table``, built in this process: its arrays and metadata."""
    v = _VIEWS.get(table.key)
    if v is None:
        arrays, meta = table.build()
        for a in arrays.values():
            a.flags.writeable = False  # as read-only as the engine's mapping
        v = _VIEWS[table.key] = types.SimpleNamespace(
            family=table.family, dtype=table.dtype, meta=meta, length=table.length, arrays=arrays, **arrays
        )
        FAMILIES[table.family].attach(v)
    return v


def answer_both(family: str, first: dict, later: dict):
    """(C's bytes or None, the pipeline's bytes from the same arrays, its exact-compute bytes); C's
    bytes, when it answers, decoded and held to the float64 reference (tests/independent.py)."""
    templates = replay.Templates(max_n=1 << 20, max_bytes=4 << 20)
    req = pipeline.parse(family, first, LENGTH)
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        templates.learn("safetensors", orjson.dumps(first), req, view_of(req.table))
    raw = orjson.dumps(later)
    c = replay.answer(raw, HEADERS, {ACCEPT: 0}, templates.native[family], family)
    req2 = pipeline.parse(family, later, LENGTH)
    pipeline.check(req2)
    fam = req2.family
    served = encode(fam, pipeline.arrays(req2, view_of(req2.table)), req2.dtype, "safetensors")[0]
    computed = encode(fam, pipeline.arrays(req2), req2.dtype, "safetensors")[0]
    if c is not None:  # and C's bytes against the float64 reference, not only the pipeline's
        assert_c_answer(family, later, c)
    return c, served, computed


positions = st.lists(st.integers(0, LENGTH + 40), min_size=1, max_size=70)
ranges = st.builds(
    lambda a, n, s: {"start": a, "stop": a + n, "step": s},
    st.integers(0, LENGTH),
    st.integers(1, 70),
    st.integers(1, 3),
)
dtypes = st.sampled_from(["float32", "float16", "bfloat16"])


def check(c, served, computed):
    event("C answered" if c is not None else "C declined")
    assert served == computed
    if c is not None:
        assert c == served


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    head_dim=st.sampled_from([8, 36, 64]),
    factor=st.sampled_from([1.0, 0.5]),
    layout=st.sampled_from(["half_split", "interleaved"]),
    dtype=dtypes,
    rows=st.one_of(positions, ranges),
)
def test_rope_rows(head_dim, factor, layout, dtype, rows):
    spec = {"head_dim": head_dim, "partial_rotary_factor": factor, "layout": layout, "dtype": dtype}
    check(*answer_both("rope", {**spec, "positions": [1]}, {**spec, "positions": rows}))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    d_model=st.sampled_from([7, 8, 33]),
    layout=st.sampled_from(["interleaved", "concat", "fairseq"]),
    offset=st.sampled_from([0, 2, 100]),
    dtype=dtypes,
    rows=st.one_of(positions, ranges),
)
def test_sinusoidal_rows(d_model, layout, offset, dtype, rows):
    spec = {"d_model": d_model, "layout": layout, "offset": offset, "dtype": dtype}
    check(*answer_both("sinusoidal", {**spec, "positions": [1]}, {**spec, "positions": rows}))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_heads=st.sampled_from([1, 12, 16]),
    mode=st.sampled_from(["causal", "symmetric"]),
    mask=st.booleans(),
    heads=st.sampled_from([None, [0], [0, 0]]),
    query=st.one_of(positions, ranges),
    key=st.one_of(positions, ranges),
)
def test_alibi_blocks(num_heads, mode, mask, heads, query, key):
    spec = {"num_heads": num_heads, "mode": mode, "mask_future": mask and mode == "causal", "heads": heads}
    check(*answer_both("alibi", {**spec, "query": [1], "key": [0]}, {**spec, "query": query, "key": key}))


def test_c_answers_the_plain_bodies_of_every_family():
    """Not vacuous: the learnt spec's plain bodies are answered by C, for every family that has
    templates."""
    bodies = {
        "rope": ({"head_dim": 64}, {"positions": [3, 0, 511]}),
        "sinusoidal": ({"d_model": 33}, {"positions": {"start": 5, "stop": 9}}),
        "alibi": ({"num_heads": 12}, {"query": [300], "key": {"start": 0, "stop": 301}}),
        "sinusoidal-grid": (
            {"embed_dim": 32, "grid_size": [5, 7], "extra_tokens": 1},
            {"positions": [0, 35, 4]},
        ),
        "t5-buckets": ({"bidirectional": False}, {"query": [9, 400], "key": {"start": 0, "stop": 10}}),
    }
    assert set(bodies) == set(replay.FIELDS)
    for family, (spec, sel) in bodies.items():
        if family == "t5-buckets" and kernels.c_api() is None:  # its blocks are the engine's kernel's
            continue
        first = {**spec, **{k: [1] for k in sel}}
        c, served, computed = answer_both(family, first, {**spec, **sel})
        assert c is not None and c == served == computed, family
