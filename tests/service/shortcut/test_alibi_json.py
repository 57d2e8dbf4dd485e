"""ALiBi blocks in JSON from the C shortcut (service/shortcut/hot_alibi.c), through the lane's
entry point: byte for byte the full path's JSON (engine/core/encode.py) from the same mapped table and
its exact compute, and every cell the float64 value rounded once (tests/independent.py), over
generated specs (1 to 64 heads, powers of two and not, head subsets, every mode and dtype, several
max_bias) and selections on both sides of the stored table's end (LENGTH distances here) and far
past it. A block whose cells overflow the dtype is declined (the full path's 422). In memory, no
process; test_alibi_json_served.py runs a real server."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from posenc.engine import kernels
from posenc.engine.answer import pipeline
from posenc.engine.core.encode import encode
from posenc.engine.core.errors import SpecError
from posenc.service.shortcut import templates as replay
from tests.independent import assert_answer
from tests.service.hot_helpers import needs_kernels
from tests.service.shortcut.test_json_answers import lane_json
from tests.service.shortcut.test_templates_in_memory import LENGTH, view_of

pytestmark = pytest.mark.skipif(not replay.NATIVE, reason="service._hot is not built")
# float16/bfloat16 cells are the engine's C kernel's (the simd backend): with numpy only float32 ones
DTYPES = ["float32", "float16", "bfloat16"] if kernels.c_api() is not None else ["float32"]
HALF = needs_kernels

# positions near 0, around the table's end, a little past it, and far out
POSITION = st.one_of(
    st.integers(0, 8),
    st.integers(LENGTH - 3, LENGTH + 3),
    st.integers(LENGTH + 254, LENGTH + 258),
    st.integers(0, 3 * LENGTH),
    st.integers(60000, 70000),
    st.integers(2**31 - 300, 2**31 - 1),
)
SELECTION = st.one_of(
    st.lists(POSITION, min_size=1, max_size=6),
    st.builds(
        lambda a, n, s: {"start": a, "stop": a + n, "step": s},
        POSITION,
        st.integers(1, 40),
        st.integers(1, 3),
    ),
)


@st.composite
def specs(draw) -> dict:
    h = draw(st.one_of(st.integers(1, 64), st.sampled_from([1, 2, 8, 12, 32, 64])))
    spec = {"num_heads": h, "dtype": draw(st.sampled_from(DTYPES))}
    mode = draw(st.sampled_from(["causal", "masked", "symmetric"]))
    if mode == "symmetric":
        spec["mode"] = "symmetric"
    elif mode == "masked":
        spec["mask_future"] = True
    if draw(st.booleans()):
        spec["heads"] = draw(st.lists(st.integers(0, h - 1), min_size=1, max_size=5))
    bias = draw(st.sampled_from([None, 0.5, 1.0, 16.0]))  # 0.5: float16 overflows ~65k out
    if bias is not None:
        spec["max_bias"] = bias
    return spec


def positions(sel) -> list[int]:
    return list(range(sel["start"], sel["stop"], sel["step"])) if isinstance(sel, dict) else sel


def full_path(spec: dict, query, key) -> bool:
    """Whether the full path answers the block (an overflow of the dtype: its 422)."""
    try:
        req = pipeline.parse("alibi", {**spec, "query": query, "key": key}, LENGTH)
        pipeline.check(req)
        pipeline.arrays(req)  # (mask_future's blocks find an overflow as they are filled)
    except SpecError:
        return False
    return True


def lane_only(first: dict, later: dict):
    """The lane's JSON body of ``later`` once ``first`` taught the template, or False (declined)."""
    templates = replay.Templates()
    req = pipeline.parse("alibi", first, LENGTH)
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        templates.learn("json", orjson.dumps(first), req, view_of(req.table))
    raw = orjson.dumps(later)
    got = replay.answer_request(
        b"POST / HTTP/1.1\r\ncontent-length: %d\r\n\r\n%s" % (len(raw), raw),
        0,
        {b"/": ("alibi", 0)},
        {None: 1},
        templates.native,
        (b"", b"", b""),
        b"",
        False,
    )
    return got[2].partition(b"\r\n")[2] if got else False


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs(), query=SELECTION, key=SELECTION)
def test_alibi_json_is_the_full_paths_bytes(spec, query, key):
    first = {**spec, "query": [1], "key": [0]}
    later = {**spec, "query": query, "key": key}
    if not full_path(spec, query, key):
        event("refused by the full path")
        assert lane_only(first, later) is False
        return
    got, served, computed = lane_json("alibi", first, later)
    assert served == computed
    assert got == served  # every block the full path answers, C answers: the same bytes
    assert_answer("alibi", later, orjson.loads(got))


@pytest.mark.parametrize(
    "spec",
    [
        {"num_heads": 32},
        pytest.param({"num_heads": 12, "mask_future": True, "dtype": "float16"}, marks=HALF),
        pytest.param({"num_heads": 5, "mode": "symmetric", "dtype": "bfloat16"}, marks=HALF),
    ],
)
def test_decode_blocks_across_the_table_end(spec):
    """Decode rows (one query against every key so far) at queries around the table's end: the
    full path's bytes."""
    for q in (0, 1, 255, 256, LENGTH - 1, LENGTH, LENGTH + 1, 5000):
        for key in ({"start": 0, "stop": q + 1}, {"start": max(0, q - 300), "stop": q + 2}):
            got, served, _ = lane_json(
                "alibi", {**spec, "query": [1], "key": [0]}, {**spec, "query": [q], "key": key}
            )
            assert got == served, (spec, q, key)


@HALF
def test_float16_overflow_is_declined_not_written():
    """A float16 block reaching a distance whose cell overflows: the full path refuses it (422),
    and C declines it, though the block has finite cells too; a masked cell never overflows."""
    spec = {"num_heads": 2, "max_bias": 0.5, "dtype": "float16"}
    first = {**spec, "query": [1], "key": [0]}
    outcomes = []
    for far in (77000, 77900, 78000, 100000):  # the first head's cells overflow from ~77,920 on
        later = {**spec, "query": [far], "key": [0, 1]}
        outcomes.append(full_path(spec, later["query"], later["key"]))
        if outcomes[-1]:
            got, served, _ = lane_json("alibi", first, later)
            assert got == served
        else:
            assert lane_only(first, later) is False
    assert outcomes == [True, True, False, False]
    masked = {**spec, "mask_future": True}
    got, served, _ = lane_json(
        "alibi", {**masked, "query": [1], "key": [0]}, {**masked, "query": [0], "key": [90000]}
    )
    assert got == served


def test_json_stays_with_the_full_path_when_its_check_fails(monkeypatch):
    """A template whose JSON answer to the learnt body differs from the full path's answers no JSON."""
    real = replay._json_parts
    monkeypatch.setattr(replay, "_json_parts", lambda req, view: (b"other bytes", real(req, view)[1]))
    spec = {"num_heads": 1}
    assert lane_only({**spec, "query": [1], "key": [0]}, {**spec, "query": [3], "key": [1]}) is False


def asker(spec: dict):
    """(ask(query, key) -> the lane's JSON body or False, the full path's answer of it)."""
    templates = replay.Templates()
    req = pipeline.parse("alibi", {**spec, "query": [1], "key": [0]}, LENGTH)
    view = view_of(req.table)
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        templates.learn("json", orjson.dumps({**spec, "query": [1], "key": [0]}), req, view)

    def ask(query, key):
        raw = orjson.dumps({**spec, "query": query, "key": key})
        got = replay.answer_request(
            b"POST / HTTP/1.1\r\ncontent-length: %d\r\n\r\n%s" % (len(raw), raw),
            0,
            {b"/": ("alibi", 0)},
            {None: 1},
            templates.native,
            (b"", b"", b""),
            b"",
            False,
        )
        return got[2].partition(b"\r\n")[2] if got else False

    def full(query, key):
        r = pipeline.parse("alibi", {**spec, "query": query, "key": key}, LENGTH)
        return encode(r.family, pipeline.arrays(r, view), r.dtype, "json")[0]

    return ask, full


@HALF
def test_any_block_is_formatted_in_c_keeping_nothing(monkeypatch):
    """Blocks at distances spread far apart, past the table and in every dtype, are the lane's
    answers (the full path's bytes) without Python rendering a cell, and nothing is kept for them
    (the budget of kept texts stays with the RoPE rows: a load of random distances cannot thrash it)."""
    for spec in (
        {"num_heads": 4},
        {"num_heads": 12, "dtype": "float16", "mask_future": True},
        {"num_heads": 3, "dtype": "bfloat16", "mode": "symmetric"},
    ):
        ask, full = asker(spec)
        rendered = []
        real = replay.json_text
        monkeypatch.setattr(replay, "json_text", lambda obj: rendered.append(1) or real(obj))
        kept = replay._hot.kept()
        far = [i * 2560 + 7 for i in range(20)]
        for query, key in ((far, [0]), ([5], far), ([70000], list(range(0, 70000, 3001))), ([3], [1, 2])):
            got = ask(query, key)
            assert not rendered and replay._hot.kept() == kept, (spec, query, key)
            monkeypatch.setattr(replay, "json_text", real)
            assert got == full(query, key), (spec, query, key)
            monkeypatch.setattr(replay, "json_text", lambda obj: rendered.append(1) or real(obj))
        monkeypatch.setattr(replay, "json_text", real)
