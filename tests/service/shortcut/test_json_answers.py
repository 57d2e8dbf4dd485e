"""JSON answers from the C shortcut (service/shortcut/hot_json.c), through the lane's entry point:
byte for byte the full path's JSON (engine/core/encode.py) from the same mapped arrays and its exact
compute, for every rope type whose table does not follow the positions, every sinusoidal layout
and every dtype, positions on both sides of the table's end (rows past it computed by the engine's
kernel, their texts rendered as the stored rows' are; far past it, GROWN_ROWS on, declined). In
memory, no process."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from posenc.engine import kernels
from posenc.engine.answer import pipeline
from posenc.engine.core.encode import encode
from posenc.service.shortcut import templates as replay
from tests.independent import assert_answer
from tests.service.shortcut.test_past_table import ROPE_SCALINGS
from tests.service.shortcut.test_templates_in_memory import LENGTH, view_of

pytestmark = pytest.mark.skipif(not replay.NATIVE, reason="service._hot is not built")
# rows past a stored table are computed in C with the simd backend's kernels only (with the numpy
# backend the shortcut declines them: the full path answers)
PAST_IN_C = kernels.c_api() is not None

ROUTE = b"/v1/x"
ACCEPTS = {
    b"application/json": replay.FORMATS["json"],
    None: replay.FORMATS["json"],
    b"application/x-safetensors": replay.FORMATS["safetensors"],
}
POSITIONS = st.lists(
    st.one_of(st.integers(0, LENGTH - 1), st.integers(LENGTH - 3, LENGTH + 3)),
    min_size=1,
    max_size=replay.MAX_ROWS,
)


def lane_json(family: str, first: dict, later: dict, accept: bytes | None = b"application/json"):
    """(the lane's JSON body or False, the full path's JSON from the same arrays, its compute's)."""
    templates = replay.Templates()
    req = pipeline.parse(family, first, LENGTH)
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        templates.learn("json", orjson.dumps(first), req, view_of(req.table))
    raw = orjson.dumps(later)
    head = b"" if accept is None else b"accept: %s\r\n" % accept
    data = b"POST %s HTTP/1.1\r\n%scontent-length: %d\r\n\r\n%s" % (ROUTE, head, len(raw), raw)
    got = replay.answer_request(
        data, 0, {ROUTE: (family, 0)}, ACCEPTS, templates.native, (b"ST", b"JS", b"V2"), b"|", False
    )
    req2 = pipeline.parse(family, later, LENGTH)
    pipeline.check(req2)
    served = encode(req2.family, pipeline.arrays(req2, view_of(req2.table)), req2.dtype, "json")[0]
    computed = encode(req2.family, pipeline.arrays(req2), req2.dtype, "json")[0]
    if got is False:
        return False, served, computed
    assert got[2].startswith(b"JS%d|\r\n" % len(served)), got[2][:40]
    body = got[2].partition(b"\r\n")[2]
    assert_answer(
        family, later, orjson.loads(body), f"C JSON answer {family} {later}"
    )  # the float64 reference
    return body, served, computed


def _check(got, served, computed, inside: bool):
    event("answered" if got is not False else "declined")
    assert served == computed
    if inside:
        assert got is not False  # every row stored, or computed within GROWN_ROWS past the table: C answers
    if got is not False:
        assert got == served


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    head_dim=st.sampled_from([8, 36, 128]),
    prf=st.sampled_from([1.0, 0.5]),
    scaling=st.sampled_from(ROPE_SCALINGS),
    layout=st.sampled_from(["half_split", "interleaved"]),
    dtype=st.sampled_from(["float32", "float16", "bfloat16"]),
    rows=POSITIONS,
)
def test_rope_json(head_dim, prf, scaling, layout, dtype, rows):
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
    _check(
        *lane_json("rope", {**spec, "positions": [1]}, {**spec, "positions": rows}),
        PAST_IN_C or max(rows) < LENGTH,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    d_model=st.sampled_from([7, 8, 33]),
    layout=st.sampled_from(["interleaved", "concat", "fairseq"]),
    offset=st.sampled_from([0, 2, 100]),
    dtype=st.sampled_from(["float32", "float16", "bfloat16"]),
    rows=POSITIONS,
    ranged=st.booleans(),
    accept=st.sampled_from([b"application/json", None]),
)
def test_sinusoidal_json(d_model, layout, offset, dtype, rows, ranged, accept):
    spec = {"d_model": d_model, "layout": layout, "offset": offset, "dtype": dtype}
    sel = {"start": rows[0], "stop": rows[0] + len(rows)} if ranged else rows
    top = rows[0] + len(rows) - 1 if ranged else max(rows)
    _check(
        *lane_json("sinusoidal", {**spec, "positions": [1]}, {**spec, "positions": sel}, accept),
        PAST_IN_C or top + offset < LENGTH,
    )


def test_json_far_past_the_table_stays_with_the_full_path():
    spec = {"head_dim": 8}
    got, served, computed = lane_json(
        "rope", {**spec, "positions": [1]}, {**spec, "positions": [3, LENGTH + replay._hot.GROWN_ROWS]}
    )
    assert got is False and served == computed
    got, served, _ = lane_json(
        "rope", {**spec, "positions": [1]}, {**spec, "positions": [3, LENGTH + replay._hot.GROWN_ROWS - 1]}
    )
    assert got == served if PAST_IN_C else got is False


@pytest.mark.parametrize(
    "family, spec, arrays, budget, last",
    [
        (
            "rope",
            {"head_dim": 8},
            2,
            600,
            [5, 6, 7, 8],
        ),  # ~8 rows' texts of head_dim 8 (~75 bytes each), stored order
        # sinusoidal's interleaved layout: texts kept in the output's order (hot_json.c json_in_order)
        ("sinusoidal", {"d_model": 8, "layout": "interleaved"}, 1, 300, [5, 6]),
    ],
)  # ~3 texts (~95 bytes)
def test_texts_are_rendered_once_and_kept_within_the_budget(monkeypatch, family, spec, arrays, budget, last):
    """A row's text is rendered at its first JSON answer only; over the budget the oldest kept
    texts are freed and rendered again as asked, and the answers stay the full path's."""
    rendered = []
    real = replay.json_text
    monkeypatch.setattr(replay, "json_text", lambda obj: rendered.append(1) or real(obj))
    templates = replay.Templates()
    req = pipeline.parse(family, {**spec, "positions": [1]}, LENGTH)
    view = view_of(req.table)

    def ask(rows):
        raw = orjson.dumps({**spec, "positions": rows})
        data = b"POST / HTTP/1.1\r\ncontent-length: %d\r\n\r\n%s" % (len(raw), raw)
        got = replay.answer_request(
            data, 0, {b"/": (family, 0)}, {None: 1}, templates.native, (b"", b"", b""), b"", False
        )
        want = encode(
            req.family,
            pipeline.arrays(pipeline.parse(family, {**spec, "positions": rows}, LENGTH), view),
            "float32",
            "json",
        )[0]
        assert got[2].partition(b"\r\n")[2] == want

    monkeypatch.setattr(replay, "TEXT_BUDGET", budget)
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        templates.learn("json", orjson.dumps({**spec, "positions": [1]}), req, view)
    rendered.clear()
    ask([5, 6])
    assert len(rendered) == 2 * arrays  # rows 5 and 6 of each array, once each
    ask([6, 5, 6])
    assert len(rendered) == 2 * arrays  # kept: nothing rendered again
    ask([7, 8])  # over the budget: older texts freed
    assert len(rendered) == 4 * arrays
    ask(last)  # and rendered again as asked
    assert len(rendered) > 4 * arrays


@pytest.mark.skipif(not PAST_IN_C, reason="the budget's arithmetic counts the rows past the table (simd)")
def test_over_the_workers_keep_budget_json_is_declined_or_exact():
    """With room for fewer texts than an answer needs (all templates' keep_bytes), everything kept is
    dropped as texts are set: the lane declines (False) rather than answering other bytes or failing."""
    spec = {"head_dim": 8}
    rules = replay.native_rules(replay.current())
    templates = replay.Templates()
    req = pipeline.parse("rope", {**spec, "positions": [1]}, LENGTH)
    view = view_of(req.table)
    outcomes = set()
    try:
        rows_table = 2 * (LENGTH + replay._hot.GROWN_ROWS) * 8  # the texts' row pointers, cos and sin
        for keep in (rows_table + 200, rows_table + 2000, rows_table + (1 << 20)):  # and ~2, ~20, all texts
            replay._hot.configure(**(rules | {"keep_bytes": keep}))
            templates.native["rope"].clear()
            for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
                templates.learn("json", orjson.dumps({**spec, "positions": [1]}), req, view)
            for rows in ([5, 6, 7, 8], [9], list(range(10, 30))):
                raw = orjson.dumps({**spec, "positions": rows})
                data = b"POST / HTTP/1.1\r\ncontent-length: %d\r\n\r\n%s" % (len(raw), raw)
                got = replay.answer_request(
                    data, 0, {b"/": ("rope", 0)}, {None: 1}, templates.native, (b"", b"", b""), b"", False
                )
                outcomes.add(got is False)
                if got is not False:
                    want = encode(
                        req.family,
                        pipeline.arrays(pipeline.parse("rope", {**spec, "positions": rows}, LENGTH), view),
                        "float32",
                        "json",
                    )[0]
                    assert got[2].partition(b"\r\n")[2] == want
            assert replay._hot.kept() <= keep
    finally:
        replay.configure(replay.current())
    assert outcomes == {True, False}  # both happened: declined when it could not keep, exact when it could
