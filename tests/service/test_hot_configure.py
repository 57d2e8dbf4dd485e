"""service/shortcut/_hot.c takes its rules from Python (service/shortcut/templates.py configures it at import): the
position limit, the row limit, each family's selection names and a range's keys. Its own
compile-time bounds refuse a Python value they cannot hold, with a message naming it."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from posenc.engine.selection import POSITION_LIMIT, RANGE_KEYS
from posenc.service.shortcut import templates as replay

_hot = pytest.importorskip("posenc.service.shortcut._hot", reason="service._hot is not built")
GOOD = dict(position_limit=POSITION_LIMIT, max_rows=replay.MAX_ROWS, fields=replay.FIELDS,
            range_keys=tuple(map(orjson.dumps, RANGE_KEYS)))


@pytest.mark.parametrize("change, says", [
    ({"position_limit": 2**31 + 1}, "position_limit: want 1 .. 2\\*\\*31"),
    ({"position_limit": 0}, "position_limit"),
    ({"max_rows": 0}, "max_rows: want >= 1"),
    ({"fields": {"rope": (b'"a"', b'"b"', b'"c"')}}, "1 to 2 selection names"),
    ({"fields": {"rope": ()}}, "1 to 2 selection names"),
    ({"fields": {"rope": ("positions",)}}, "fields: want a name"),
    ({"fields": {"rope": (b'"pos\0"',)}}, "fields: want a name"),
    ({"range_keys": (b'"start"', b'"stop"')}, "range_keys: want \\(start, stop, step\\)"),
    ({"range_keys": (b'"start"', b'"stop"', b"")}, "range_keys: want a name"),
])
def test_configure_refuses_what_the_c_side_cannot_hold(change, says):
    with pytest.raises(ValueError, match=says):
        _hot.configure(**(GOOD | change))
    _hot.configure(**GOOD)   # (a refused call changes nothing; this one restores the same values)


def _rows_template(max_rows: int):
    table = np.arange(32, dtype=np.float32).reshape(4, 8)
    return _hot.RowsTemplate((table,), list(range(8)), 0, max_rows, False, lambda n: b"H", b"")


def test_the_configured_rules_are_the_ones_applied():
    """The row limit, the position limit and the range keys come from configure(): answers
    follow them (the template here is a bare 4 x 8 float32 table, header b'H', no tail)."""
    acc = ([(b"accept", b"x")], {b"x": True})
    key = b'{"positions":\0}'
    try:
        _hot.configure(**(GOOD | {"max_rows": 3, "position_limit": 3,
                                  "range_keys": (b'"from"', b'"to"', b'"by"')}))
        with pytest.raises(ValueError, match="max_rows <= 3"):
            _rows_template(4)
        t = {key: _rows_template(3)}

        def answer(sel: bytes):
            return _hot.answer(b'{"positions":' + sel + b"}", *acc, t, 1000, "rope")
        assert answer(b"[2,0]") == b"H" + np.float32([[16, 17, 18, 19, 20, 21, 22, 23],
                                                      [0, 1, 2, 3, 4, 5, 6, 7]]).tobytes()
        assert answer(b"[3]") is None                      # past the configured position limit
        assert answer(b"[0,1,2,0]") is None                # more rows than the configured limit
        assert answer(b'{"from":1,"to":3}') == b"H" + np.arange(8, 24, dtype=np.float32).tobytes()
        assert answer(b'{"start":1,"stop":3}') is None     # not the configured range keys
        with pytest.raises(KeyError, match="t5-buckets"):
            _hot.answer(b"{}", *acc, t, 1000, "t5-buckets")
    finally:
        _hot.configure(**GOOD)
