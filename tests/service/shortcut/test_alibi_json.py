"""ALiBi blocks in JSON from the C shortcut (service/shortcut/hot_alibi_json.c), through the lane's
entry point: byte for byte the full path's JSON (engine/encode.py) from the same mapped table and
its exact compute, and every cell the float64 value rounded once (tests/independent.py), over
generated specs (1 to 64 heads, powers of two and not, head subsets, every mode and dtype, several
max_bias) and selections on both sides of the stored table's end (LENGTH distances here) and far
past it. A block whose cells overflow the dtype is declined (the full path's 422). In memory, no
process; test_alibi_json_served.py runs a real server."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from posenc.engine import pipeline
from posenc.engine.encode import encode
from posenc.engine.errors import SpecError
from posenc.service.shortcut import templates as replay
from tests.independent import assert_answer
from tests.service.shortcut.test_json_answers import lane_json
from tests.service.shortcut.test_templates_in_memory import LENGTH, view_of

pytestmark = pytest.mark.skipif(not replay.NATIVE, reason="service._hot is not built")

# positions near 0, around the table's end, a chunk of cell texts past it, and far out
POSITION = st.one_of(st.integers(0, 8), st.integers(LENGTH - 3, LENGTH + 3),
                     st.integers(LENGTH + replay.ALIBI_CHUNK - 2, LENGTH + replay.ALIBI_CHUNK + 2),
                     st.integers(0, 3 * LENGTH), st.integers(60000, 70000), st.integers(2**31 - 300, 2**31 - 1))
SELECTION = st.one_of(st.lists(POSITION, min_size=1, max_size=6),
                      st.builds(lambda a, n, s: {"start": a, "stop": a + n, "step": s},
                                POSITION, st.integers(1, 40), st.integers(1, 3)))


@st.composite
def specs(draw) -> dict:
    h = draw(st.one_of(st.integers(1, 64), st.sampled_from([1, 2, 8, 12, 32, 64])))
    spec = {"num_heads": h, "dtype": draw(st.sampled_from(["float32", "float16", "bfloat16"]))}
    mode = draw(st.sampled_from(["causal", "masked", "symmetric"]))
    if mode == "symmetric":
        spec["mode"] = "symmetric"
    elif mode == "masked":
        spec["mask_future"] = True
    if draw(st.booleans()):
        spec["heads"] = draw(st.lists(st.integers(0, h - 1), min_size=1, max_size=5))
    bias = draw(st.sampled_from([None, 0.5, 1.0, 16.0]))   # 0.5: float16 overflows ~65k out
    if bias is not None:
        spec["max_bias"] = bias
    return spec


def positions(sel) -> list[int]:
    return list(range(sel["start"], sel["stop"], sel["step"])) if isinstance(sel, dict) else sel


def cells(query, key) -> int:
    return len(positions(query)) * len(positions(key))


def chunks_of(spec: dict, query, key) -> int:
    """How many chunks of cell texts a block reads (a fresh template renders each)."""
    side = {(d < 0 and spec.get("mode") != "symmetric", abs(d) // replay.ALIBI_CHUNK)
            for q in positions(query) for k in positions(key) for d in [q - k]
            if not (d < 0 and spec.get("mask_future"))}
    return len(side)


def full_path(spec: dict, query, key) -> bool:
    """Whether the full path answers the block (an overflow of the dtype: its 422)."""
    try:
        req = pipeline.parse("alibi", {**spec, "query": query, "key": key}, LENGTH)
        pipeline.check(req)
        pipeline.arrays(req)   # (mask_future's blocks find an overflow as they are filled)
    except SpecError:
        return False
    return True


def lane_only(first: dict, later: dict):
    """The lane's JSON body of ``later`` once ``first`` taught the template, or False (declined)."""
    templates = replay.Templates()
    req = pipeline.parse("alibi", first, LENGTH)
    templates.learn("json", orjson.dumps(first), req, view_of(req.table))
    raw = orjson.dumps(later)
    got = replay.answer_request(b"POST / HTTP/1.1\r\ncontent-length: %d\r\n\r\n%s" % (len(raw), raw), 0,
                                {b"/": ("alibi", 0)}, {None: 1}, templates.native, (b"", b"", b""), b"", False)
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
    if got is False:   # only a block whose distances spread over more chunks than one miss renders
        event("declined: its distances spread over many chunks")
        assert chunks_of(spec, query, key) > replay._hot.ALIBI_MISS_CHUNKS + cells(query, key) // replay._hot.ALIBI_MISS_CELLS
        return
    assert got == served    # every other block the full path answers, C answers: the same bytes
    assert_answer("alibi", later, orjson.loads(got))


@pytest.mark.parametrize("spec", [{"num_heads": 32}, {"num_heads": 12, "mask_future": True, "dtype": "float16"},
                                  {"num_heads": 5, "mode": "symmetric", "dtype": "bfloat16"}])
def test_decode_blocks_across_the_table_end(spec):
    """Decode rows (one query against every key so far) at queries around the table's end and a
    cell-text chunk's edges: the full path's bytes."""
    for q in (0, 1, replay.ALIBI_CHUNK - 1, replay.ALIBI_CHUNK, LENGTH - 1, LENGTH, LENGTH + 1, 5000):
        for key in ({"start": 0, "stop": q + 1}, {"start": max(0, q - 300), "stop": q + 2}):
            got, served, _ = lane_json("alibi", {**spec, "query": [1], "key": [0]}, {**spec, "query": [q], "key": key})
            assert got == served, (spec, q, key)


def test_float16_overflow_is_declined_not_written():
    """A float16 block reaching a distance whose cell overflows: the full path refuses it (422),
    and C declines it, though the chunk holding that distance has finite cells too; a masked
    cell never overflows."""
    spec = {"num_heads": 2, "max_bias": 0.5, "dtype": "float16"}
    first = {**spec, "query": [1], "key": [0]}
    outcomes = []
    for far in (77000, 77900, 78000, 100000):   # the first head's cells overflow from ~77,920 on
        later = {**spec, "query": [far], "key": [0, 1]}
        outcomes.append(full_path(spec, later["query"], later["key"]))
        if outcomes[-1]:
            got, served, _ = lane_json("alibi", first, later)
            assert got == served
        else:
            assert lane_only(first, later) is False
    assert outcomes == [True, True, False, False]
    masked = {**spec, "mask_future": True}
    got, served, _ = lane_json("alibi", {**masked, "query": [1], "key": [0]}, {**masked, "query": [0], "key": [90000]})
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
    templates.learn("json", orjson.dumps({**spec, "query": [1], "key": [0]}), req, view)

    def ask(query, key):
        raw = orjson.dumps({**spec, "query": query, "key": key})
        got = replay.answer_request(b"POST / HTTP/1.1\r\ncontent-length: %d\r\n\r\n%s" % (len(raw), raw), 0,
                                    {b"/": ("alibi", 0)}, {None: 1}, templates.native, (b"", b"", b""), b"", False)
        return got[2].partition(b"\r\n")[2] if got else False

    def full(query, key):
        r = pipeline.parse("alibi", {**spec, "query": query, "key": key}, LENGTH)
        return encode(r.family, pipeline.arrays(r, view), r.dtype, "json")[0]
    return ask, full


def test_cell_texts_are_rendered_once_and_kept_within_the_templates_budget(monkeypatch):
    """A chunk of cell texts is rendered at its first answer only; over the template's budget its
    texts are dropped and rendered again as asked, the answers the full path's throughout."""
    rendered = []
    real = replay.json_text
    monkeypatch.setattr(replay, "json_text", lambda obj: rendered.append(1) or real(obj))
    # room for the side's directory (2**31 / ALIBI_CHUNK chunks in pages of 1024), one page and one
    # chunk of 4 heads' slots (16 bytes), not two chunks
    one = (2**31 // replay.ALIBI_CHUNK) * 8 // 1024 + 1024 * 8 + 4 * replay.ALIBI_CHUNK * 16
    monkeypatch.setattr(replay, "TEXT_BUDGET", one + 1000)
    ask, full = asker({"num_heads": 4})
    rendered.clear()
    for query, key, renders in (([3], [1, 2], 0), ([3, 2], [0, 1], 0), ([1000], [0], 1), ([1001], [1], 0),
                                ([3], [1, 2], 1)):
        assert ask(query, key) == full(query, key)
        assert len(rendered) == renders, (query, key, rendered)
        rendered.clear()


def test_over_the_workers_keep_budget_json_is_declined_or_exact():
    """With room for fewer texts than answers need (all templates' keep_bytes), everything kept is
    dropped as texts are set: the lane declines (False) rather than answering other bytes."""
    rules = replay.native_rules(replay.current())
    one = (2**31 // replay.ALIBI_CHUNK) * 8 // 1024 + 1024 * 8 + 4 * replay.ALIBI_CHUNK * 16
    outcomes = set()
    try:
        for keep in (one - 1, one + 100, 1 << 24):
            replay._hot.configure(**(rules | {"keep_bytes": keep}))
            before = replay._hot.kept()   # (other tests' templates may keep texts until a keep drops them)
            asks = [asker({"num_heads": 4}), asker({"num_heads": 4, "mode": "symmetric"})]
            for query, key in (([3], [1, 2]), ([1000], [0, 999]), ([5], [600])):
                for ask, full in asks:
                    got = ask(query, key)
                    outcomes.add(got is False)
                    assert got is False or got == full(query, key)
            assert replay._hot.kept() <= keep or (keep < one and replay._hot.kept() == before)   # none kept
    finally:
        replay.configure(replay.current())
    assert outcomes == {True, False}


def test_a_block_spread_over_many_chunks_is_declined_unrendered(monkeypatch):
    """A miss renders a few chunks per block (what formatting its cells would cost the full path),
    never thousands: a block over more distinct chunks than that is the full path's, nothing rendered."""
    rendered = []
    real = replay.json_text
    monkeypatch.setattr(replay, "json_text", lambda obj: rendered.append(1) or real(obj))
    ask, full = asker({"num_heads": 4})
    rendered.clear()
    far = [i * 10 * replay.ALIBI_CHUNK for i in range(20)]   # 20 cells in 20 chunks: 16 rendered at most
    assert chunks_of({}, far, [0]) == 20
    assert ask(far, [0]) is False and not rendered
    near = [i * replay.ALIBI_CHUNK for i in range(4)]
    assert ask(near, [0]) == full(near, [0]) and len(rendered) == 3   # (chunk 0 kept since it was learnt)
