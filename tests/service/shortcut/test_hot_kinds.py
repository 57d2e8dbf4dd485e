"""Every C template is one kind (service/shortcut/hot.h, struct hot_ops): its ``kind`` names what it
answers, the Python side branches on that (templates.py KIND_*), and every kind's type derives from
_hot.Template, which holds what all of them share (set_header, header_for, kind)."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.service.shortcut import templates as replay

pytestmark = pytest.mark.skipif(not replay.NATIVE, reason="service._hot is not built")
_hot = replay._hot
ACC = ([(b"accept", b"x")], {b"x": 0})  # 0: safetensors


def test_kinds_and_their_shared_base():
    table = np.zeros((8, 4), dtype=np.float32)
    rows = _hot.RowsTemplate((table,), [0, 1, 2, 3], 0, 8, False, lambda n: b"", b"")
    m = np.array([0.5])
    alibi = _hot.AlibiTemplate(
        m, False, False, lambda nq, nk: b"", m.astype(np.float32).tobytes(), 10, 1 << 20
    )
    grid = _hot.GridTemplate((table,), ((1, 8),), 0, 8, 8, lambda n: b"", b"")
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
        _hot.answer(b'{"positions":[1]}', *ACC, {b'{"positions":\0}': object()}, "rope")
    with pytest.raises(TypeError):
        _hot.fill(object(), b"\0\0\0\0", 4, (b"", b""))
    with pytest.raises(TypeError):
        _hot.fill_block(object(), b"", b"", (4, 4), False, (b"", b""))


def test_the_named_results_are_those_c_names():
    """What Python branches on, named by C (hot.h HOT_SERVE_STATES, HOT_FORMATS)."""
    assert _hot.SERVE_STATES == replay.SERVE_STATES
    assert replay.SERVE_STATES.index("failed") == replay.SERVE_FAILED
    assert _hot.FORMATS == replay.FORMATS
