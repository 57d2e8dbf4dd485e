"""Every C template is one kind (service/shortcut/hot.h, struct hot_ops): its ``kind`` names what it
answers, the Python side branches on that (templates.py KIND_*), and every kind's type derives from
_hot.Template, which holds what all of them share (set_header, header_for, kind)."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.engine.tables.base import RowPlan
from posenc.service.shortcut import templates as replay

pytestmark = pytest.mark.skipif(not replay.NATIVE, reason="service._hot is not built")
_hot = replay._hot
ACC = ([(b"accept", b"x")], {b"x": 0})  # 0: safetensors


def test_kinds_and_their_shared_base():
    table = np.zeros((8, 4), dtype=np.float32)
    rows = _hot.RowsTemplate(
        plan=RowPlan(arrays=(table,), colmap=[0, 1, 2, 3], offset=0),
        max_rows=8,
        lists_only=False,
        header_for=lambda n: b"",
        tail=b"",
    )
    m = np.array([0.5])
    alibi = _hot.AlibiTemplate(
        slopes=m,
        symmetric=False,
        mask_future=False,
        header_for=lambda nq, nk: b"",
        tail=m.astype(np.float32).tobytes(),
        max_n=10,
        max_bytes=1 << 20,
    )
    grid = _hot.GridTemplate(
        arrays=(table,), steps=((1, 8),), extra=0, rows=8, max_rows=8, header_for=lambda n: b"", tail=b""
    )
    assert (rows.kind, alibi.kind, grid.kind) == (replay.KIND_ROWS, replay.KIND_ALIBI, replay.KIND_GRID)
    assert _hot.T5Template.__base__ is _hot.Template
    for t in (rows, alibi, grid):
        assert isinstance(t, _hot.Template)
        assert callable(t.header_for) and callable(t.set_header)
    assert _hot.RowsTemplate.__new__(_hot.RowsTemplate).kind == "rows"  # set before __init__
    with pytest.raises(TypeError):
        _hot.Template()  # no template of no kind


def test_a_route_refuses_what_is_not_a_template():
    with pytest.raises(TypeError, match="RowsTemplate"):
        _hot.answer(
            b'{"positions":[1]}',
            ACC[0],
            accepts=ACC[1],
            templates={b'{"positions":\0}': object()},
            family="rope",
        )
    with pytest.raises(TypeError):
        _hot.fill(object(), b"\0\0\0\0", 4, parts=(b"", b""))
    with pytest.raises(TypeError):
        _hot.fill_block(object(), b"", b"", itemsizes=(4, 4), key_first=False, parts=(b"", b""))


def test_the_named_results_are_those_c_names():
    """What Python branches on, named by C (hot.h HOT_SERVE_STATES, HOT_FORMATS, HOT_MISSES)."""
    # each state Python branches on is C's of that name (a state C renamed or dropped reads -1 here)
    states = (
        replay.SERVE_DONE,
        replay.SERVE_PAUSED,
        replay.SERVE_NOT_REQUEST,
        replay.SERVE_DECLINED,
        replay.SERVE_AGAIN,
        replay.SERVE_CLOSED,
        replay.SERVE_FAILED,
    )
    assert [_hot.SERVE_STATES[i] if i >= 0 else None for i in states] == [
        "done",
        "paused",
        "not a request",
        "declined",
        "again",
        "closed",
        "failed",
    ]
    assert _hot.FORMATS == replay.FORMATS
    assert _hot.MISSES == replay.MISSES
    assert (replay.MISSES[replay.MISS_HEADER], replay.MISSES[replay.MISS_TEXTS]) == ("header", "texts")


def test_constructors_take_keywords_only():
    """Every kind's constructor names its arguments (hot_keywords_only): a positional list of
    seven or ten values is where an offset and a max_rows trade places unseen."""
    table = np.zeros((8, 4), dtype=np.float32)
    with pytest.raises(TypeError, match=r"RowsTemplate\(\) takes keyword arguments only"):
        _hot.RowsTemplate(RowPlan(arrays=(table,), colmap=(0, 1, 2, 3)), 8, False, lambda n: b"", b"")
    m = np.array([0.5])
    with pytest.raises(TypeError, match=r"AlibiTemplate\(\) takes keyword arguments only"):
        _hot.AlibiTemplate(
            m, symmetric=False, mask_future=False, header_for=lambda q, k: b"", tail=b"", max_n=1, max_bytes=1
        )
    with pytest.raises(TypeError, match=r"GridTemplate\(\) takes keyword arguments only"):
        _hot.GridTemplate((table,), ((1, 8),), 0, 8, 8, lambda n: b"", b"")
    with pytest.raises(TypeError, match=r"T5Template\(\) takes keyword arguments only"):
        _hot.T5Template(np.zeros(3, np.int32), 1, lambda q, k: b"", b"", 1, 1)
