"""Rows past a stored table, answered by the C shortcut (service/shortcut/hot_answer.c,
hot_fill.c) with the engine's own sincos kernel: byte for byte the pipeline's answer from the same
mapped arrays and its exact compute (no table), for every rope type whose table does not follow the
positions, every sinusoidal layout, every dtype, positions on both sides of the table's end and up
to the position limit. In memory (the tables as the engine builds them), no process."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from posenc.engine import kernels
from posenc.engine.answer import pipeline
from posenc.engine.core.selection import POSITION_LIMIT
from posenc.engine.tables.sinusoidal import ROW_LIMIT
from posenc.service.shortcut import templates as replay
from tests.service.shortcut.test_templates_in_memory import HEADERS, LENGTH, answer_both, view_of
from tests.service_cases import reference_safetensors

pytestmark = pytest.mark.skipif(
    not replay.NATIVE or kernels.c_api() is None, reason="service._hot or the simd kernels are not built"
)

ROPE_SCALINGS = [
    None,
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 512},
    {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 256,
    },
    {"rope_type": "proportional", "factor": 2.0},
]
DTYPES = st.sampled_from(["float32", "float16", "bfloat16"])
# both sides of the table's end, far past it, and the last position there is
POSITIONS = st.lists(
    st.one_of(
        st.integers(0, LENGTH - 1),
        st.integers(LENGTH - 3, LENGTH + 3),
        st.integers(LENGTH, 1 << 20),
        st.integers(POSITION_LIMIT - 2, POSITION_LIMIT - 1),
    ),
    min_size=1,
    max_size=replay.MAX_ROWS,
)


def _answered(c, served, computed):
    event("past the table" if c is not None else "declined")
    assert c is not None  # a valid list of at most MAX_ROWS positions: C answers it
    assert c == served == computed


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    head_dim=st.sampled_from([8, 36, 64, 128]),
    prf=st.sampled_from([1.0, 0.5]),
    scaling=st.sampled_from(ROPE_SCALINGS),
    layout=st.sampled_from(["half_split", "interleaved"]),
    dtype=DTYPES,
    rows=POSITIONS,
)
def test_rope_rows_past_the_table(head_dim, prf, scaling, layout, dtype, rows):
    spec = {
        "head_dim": head_dim,
        "partial_rotary_factor": prf,
        "layout": layout,
        "dtype": dtype,
        "max_position_embeddings": 1024,
        **({"rope_scaling": scaling} if scaling else {}),
    }
    if int(head_dim * prf) % 2:
        return
    _answered(*answer_both("rope", {**spec, "positions": [1]}, {**spec, "positions": rows}))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    d_model=st.sampled_from([7, 8, 33, 768]),
    layout=st.sampled_from(["interleaved", "concat", "fairseq", "fairseq_cos_first"]),
    offset=st.sampled_from([0, 2, LENGTH - 1, 1 << 40]),
    dtype=DTYPES,
    rows=POSITIONS,
    ranged=st.booleans(),
)
def test_sinusoidal_rows_past_the_table(d_model, layout, offset, dtype, rows, ranged):
    spec = {"d_model": d_model, "layout": layout, "offset": offset, "dtype": dtype}
    start = min(rows[0], POSITION_LIMIT - len(rows))
    sel = {"start": start, "stop": start + len(rows)} if ranged else rows
    _answered(*answer_both("sinusoidal", {**spec, "positions": [1]}, {**spec, "positions": sel}))


def test_position_plus_offset_past_its_limit_takes_the_full_path():
    """sinusoidal's position + offset < 2**53 (its ROW_LIMIT): C declines what the pipeline refuses."""
    spec = {"d_model": 8, "offset": ROW_LIMIT - 10}
    c, served, computed = answer_both("sinusoidal", {**spec, "positions": [1]}, {**spec, "positions": [9]})
    assert c is not None and c == served == computed
    templates = replay.Templates()
    req = pipeline.parse("sinusoidal", {**spec, "positions": [1]}, LENGTH)
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        templates.learn("safetensors", orjson.dumps({**spec, "positions": [1]}), req, view_of(req.table))
    over = orjson.dumps({**spec, "positions": [10]})
    assert (
        replay.answer(over, HEADERS, {HEADERS[1][1]: 0}, templates.native["sinusoidal"], "sinusoidal") is None
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=st.sampled_from(
        [
            {"head_dim": 64},
            {"head_dim": 36, "layout": "interleaved", "dtype": "float16"},
            {"d_model": 33, "layout": "fairseq", "offset": 3, "dtype": "bfloat16"},
            {"d_model": 8, "layout": "interleaved"},
        ]
    ),
    rows=st.lists(st.integers(0, LENGTH + 100), min_size=1, max_size=300),
    itemsize=st.sampled_from([4, 8]),
)
def test_v2_fills_past_the_table(spec, rows, itemsize):
    """fill / fill_into (the v2 shortcut, service/v2/hot.py): rows past the table are the
    pipeline's rows, any number of positions."""
    family = "rope" if "head_dim" in spec else "sinusoidal"
    req = pipeline.parse(family, {**spec, "positions": [0]}, LENGTH)
    t = replay.rows_template(req, view_of(req.table))
    later = pipeline.parse(family, {**spec, "positions": rows}, LENGTH)
    arrays = pipeline.arrays(later, view_of(later.table))
    want = [np.ascontiguousarray(arrays[k]).tobytes() for k in ("cos", "sin") if k in arrays] or [
        np.ascontiguousarray(arrays["encoding"]).tobytes()
    ]
    raw = np.asarray(rows, np.int64 if itemsize == 8 else np.int32).tobytes()
    assert replay.fill(t, raw, itemsize, (b"<",) + (b"|",) * len(want)) == b"<" + b"|".join(want) + b"|"
    views = tuple(bytearray(len(w)) for w in want)
    assert replay.fill_into(t, raw, itemsize, views) is True and [bytes(v) for v in views] == want
    for bad in (-1, POSITION_LIMIT):  # what the pipeline refuses, C declines
        raw = np.asarray([0, bad], np.int64).tobytes()
        assert replay.fill(t, raw, 8, (b"",) * (len(want) + 1)) is None


def test_every_dispatch_level_computes_the_pipelines_rows():
    """The shortcut borrows the kernel at the level in use, as the pipeline does."""
    native = pytest.importorskip("posenc.engine.kernels._native")
    first = native._set_level(native.levels()[0])
    try:
        for level in native.levels():
            native._set_level(level)
            for family, spec in (
                ("rope", {"head_dim": 64, "dtype": "float16"}),
                ("sinusoidal", {"d_model": 33, "dtype": "bfloat16"}),
            ):
                later = {**spec, "positions": [LENGTH + 5, 3, 123456789]}
                c, served, computed = answer_both(family, {**spec, "positions": [1]}, later)
                assert c is not None and c == served == computed == reference_safetensors(family, later), (
                    level
                )
    finally:
        native._set_level(first)


def test_without_the_simd_kernels_rows_past_the_table_take_the_full_path():
    """Configured without kernels (the numpy backend, whose sincos may differ by an ulp): rows past
    the table are declined; rows inside it are still answered."""
    replay._hot.configure(**(replay.native_rules(replay.current()) | {"kernels": None}))
    try:
        spec = {"head_dim": 64}
        c, _, _ = answer_both("rope", {**spec, "positions": [1]}, {**spec, "positions": [3, LENGTH]})
        assert c is None
        c, served, _ = answer_both("rope", {**spec, "positions": [1]}, {**spec, "positions": [3, LENGTH - 1]})
        assert c == served
    finally:
        replay.configure(replay.current())


def test_rows_past_the_table_are_kept_within_the_budget():
    """A row past the table, once computed, is kept (the worker's table grows) and read again with
    the same bytes; over keep_bytes everything kept is dropped and computed again as asked."""
    spec = {"head_dim": 64, "dtype": "float16"}
    later = {**spec, "positions": [LENGTH + 1, 3, LENGTH + 70000, LENGTH + 1]}
    c1, served, computed = answer_both("rope", {**spec, "positions": [1]}, later)
    assert c1 == served == computed
    rules = replay.native_rules(replay.current())
    budget = replay._hot.GROWN_ROWS * 8 + 3 * 64  # the kept rows' pointer table and ~1 row
    replay._hot.configure(**(rules | {"keep_bytes": budget}))
    try:
        templates = replay.Templates()
        req = pipeline.parse("rope", {**spec, "positions": [1]}, LENGTH)
        for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
            templates.learn("safetensors", orjson.dumps({**spec, "positions": [1]}), req, view_of(req.table))

        def ask():
            return replay.answer(
                orjson.dumps(later), HEADERS, {HEADERS[1][1]: 0}, templates.native["rope"], "rope"
            )

        assert ask() == c1 and ask() == c1  # computed, kept (and dropped over the budget), read
        assert replay._hot.kept() <= budget
    finally:
        replay.configure(replay.current())
