"""Per-axis positions (rope's ``position_ids`` with ``mrope_section`` or ``axes_dim``) answered by
the C shortcut (service/shortcut/hot_axes.c): byte for byte the pipeline's answer from the same
mapped arrays and its exact compute (no table), for contiguous and interleaved mrope sections and
Flux-style axes, both layouts, every dtype, positions on both sides of the table's end; anything
else in the lists' text is left to the full path. In memory (the tables as the engine builds
them), no process."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from posenc.engine import kernels
from posenc.engine.answer import pipeline
from posenc.engine.core.encode import encode
from posenc.engine.core.errors import SpecError
from posenc.engine.core.selection import POSITION_LIMIT
from posenc.service.shortcut import templates as replay
from tests.service.shortcut.test_templates_in_memory import HEADERS, LENGTH, answer_both, view_of

pytestmark = pytest.mark.skipif(not replay.NATIVE, reason="service._hot is not built")
PAST_IN_C = kernels.c_api() is not None  # the numpy backend lends no sincos kernel: past rows decline

SPECS = [
    {"head_dim": 64, "mrope_section": [8, 12, 12]},  # Qwen2-VL's dealing
    {"head_dim": 128, "rope_theta": 1e6, "mrope_section": [16, 24, 24], "layout": "interleaved"},
    {"head_dim": 64, "mrope_section": [12, 10, 10], "mrope_interleaved": True},  # Qwen3-VL's
    {
        "head_dim": 32,
        "partial_rotary_factor": 0.5,
        "mrope_section": [2, 2, 4],
        "rope_scaling": {"rope_type": "linear", "factor": 2.0},
    },
    {"head_dim": 64, "axes_dim": [16, 24, 24], "layout": "interleaved"},  # Flux's axes
    {"head_dim": 48, "axes_dim": [8, 40]},
    {"head_dim": 16, "mrope_section": [2, 2, 2, 2]},  # four axes
]
DTYPES = st.sampled_from(["float32", "float16", "bfloat16"])
POSITION = st.one_of(
    st.integers(0, LENGTH - 1),
    st.integers(LENGTH - 3, LENGTH + 3),
    st.integers(LENGTH, 1 << 20),
    st.integers(POSITION_LIMIT - 2, POSITION_LIMIT - 1),
)


def k_of(spec: dict) -> int:
    return len(spec.get("mrope_section") or spec["axes_dim"])


@st.composite
def position_ids(draw, k: int):
    n = draw(st.integers(1, replay.MAX_ROWS))
    return [draw(st.lists(POSITION, min_size=n, max_size=n)) for _ in range(k)]


def _answered(ids, c, served, computed):
    past = max(map(max, ids)) >= LENGTH
    event("past the table" if past else "inside the table")
    if past and not PAST_IN_C:
        assert c is None
    else:
        assert c is not None  # valid lists of at most MAX_ROWS positions: C answers them
        assert c == served
    assert served == computed


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.sampled_from(SPECS), dtype=DTYPES, data=st.data())
def test_position_ids_rows_match_the_pipeline(spec, dtype, data):
    spec = {**spec, "dtype": dtype}
    ids = data.draw(position_ids(k_of(spec)))
    _answered(
        ids, *answer_both("rope", {**spec, "position_ids": [[1]] * k_of(spec)}, {**spec, "position_ids": ids})
    )


def _learnt(spec: dict, first: dict):
    templates = replay.Templates(max_n=1 << 20, max_bytes=4 << 20)
    req = pipeline.parse("rope", {**spec, **first}, LENGTH)
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        templates.learn("safetensors", orjson.dumps({**spec, **first}), req, view_of(req.table))
    return templates


def _answer(templates, raw: bytes):
    return replay.answer(raw, HEADERS, {b"application/x-safetensors": 0}, templates.native["rope"], "rope")


@settings(max_examples=200, deadline=None)
@given(
    spec=st.sampled_from(SPECS[:3]),
    lists=st.lists(st.lists(st.integers(0, LENGTH - 1), min_size=1, max_size=4), min_size=3, max_size=3),
    ws=st.sampled_from(["", " ", "\n", "\t "]),
    first=st.booleans(),
)
def test_any_spacing_of_the_lists_is_the_full_paths_answer_or_declined(spec, lists, ws, first):
    """Whatever the lists' text, C answers as the full path does (or declines: ragged lists)."""
    body = orjson.dumps(spec)[1:-1]

    def raw_of(lists) -> bytes:
        text = (
            "["
            + ws
            + ("," + ws).join("[" + ws + ("," + ws).join(map(str, r)) + ws + "]" for r in lists)
            + ws
            + "]"
        ).encode()
        return (
            b'{"position_ids":' + text + b"," + body + b"}"
            if first
            else b"{" + body + b',"position_ids":' + text + b"}"
        )

    templates = replay.Templates(max_n=1 << 20, max_bytes=4 << 20)  # learnt from this layout's body
    req = pipeline.parse("rope", orjson.loads(raw_of([[1]] * 3)), LENGTH)
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        templates.learn("safetensors", raw_of([[1]] * 3), req, view_of(req.table))
    raw = raw_of(lists)
    c = _answer(templates, raw)
    ragged = len({len(r) for r in lists}) > 1
    if ragged:
        assert c is None
        with pytest.raises(SpecError) as e:
            pipeline.check(pipeline.parse("rope", orjson.loads(raw), LENGTH))
        assert e.value.loc[0] == "position_ids"
        return
    assert c is not None
    req = pipeline.parse("rope", orjson.loads(raw), LENGTH)
    assert c == encode(req.family, pipeline.arrays(req, view_of(req.table)), req.dtype, "safetensors")[0]


@pytest.mark.parametrize(
    "ids",
    [
        b"[[1],[2]]",  # two lists for three axes
        b"[[1],[2],[3],[4]]",  # four
        b"[[1,2],[2],[3]]",  # ragged
        b"[[],[],[]]",  # empty
        b"[[1],[2],[-3]]",  # negative
        b"[[1],[2],[3.0]]",  # not an integer
        b"[[1],[2],[[3]]]",  # deeper
        b'[[1],[2],{"start":0,"stop":1}]',  # a range: lists only
        b"[[1],[2],[2147483648]]",  # past the position limit
        b"[[1],[2],[3],]",  # a trailing comma
        b"["
        + b",".join([b"[" + b",".join([b"1"] * (replay.MAX_ROWS + 1)) + b"]"] * 3)
        + b"]",  # too many rows
    ],
)
def test_lists_the_shortcut_does_not_take_go_to_the_full_path(ids):
    spec = SPECS[0]
    templates = _learnt(spec, {"position_ids": [[1]] * 3})
    raw = orjson.dumps(spec)[:-1] + b',"position_ids":' + ids + b"}"
    assert _answer(templates, raw) is None
    assert _answer(templates, orjson.dumps(spec)[:-1] + b',"position_ids":[[1],[2],[3]]}') is not None


def test_a_positions_template_and_a_position_ids_template_are_not_each_other():
    spec = SPECS[0]
    by_positions = _learnt(spec, {"positions": [1]})
    by_ids = _learnt(spec, {"position_ids": [[1]] * 3})
    ids = orjson.dumps({**spec, "position_ids": [[1], [2], [3]]})
    plain = orjson.dumps({**spec, "positions": [1, 2]})
    assert _answer(by_positions, ids) is None and _answer(by_ids, plain) is None
    assert _answer(by_positions, plain) is not None and _answer(by_ids, ids) is not None
    both = orjson.dumps(
        {**spec, "positions": [1], "position_ids": [[1], [2], [3]]}
    )  # the full path refuses it
    assert _answer(by_positions, both) is None and _answer(by_ids, both) is None
