"""service/shortcut/_hot.c takes its rules and limits from Python (service/shortcut/templates.py
configures it with the settings in use): the position limit, the row limit, each family's
selection names, a range's keys, the request head and body limits and the headers that keep a
request off the lane. Its own compile-time bounds refuse a Python value they cannot hold, with a
message naming it."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.engine.tables.base import RowPlan
from posenc.service.core.settings import LANE_OFF_HEADERS, Settings, current
from posenc.service.shortcut import templates as replay

_hot = pytest.importorskip("posenc.service.shortcut._hot", reason="service._hot is not built")
GOOD = replay.native_rules(current())


@pytest.mark.parametrize(
    "change, says",
    [
        ({"position_limit": 2**31 + 1}, "position_limit: want 1 .. 2\\*\\*31"),
        ({"position_limit": 0}, "position_limit"),
        ({"max_rows": 0}, "max_rows, max_head, max_body: want >= 1"),
        ({"max_head": 0}, "max_rows, max_head, max_body: want >= 1"),
        ({"max_body": 0}, "max_rows, max_head, max_body: want >= 1"),
        ({"fields": {"rope": (b'"a"', b'"b"', b'"c"')}}, "1 to 2 selection names"),
        ({"fields": {"rope": ()}}, "1 to 2 selection names"),
        ({"fields": {"rope": ("positions",)}}, "fields: want a name"),
        ({"fields": {"rope": (b'"pos\0"',)}}, "fields: want a name"),
        ({"range_keys": (b'"start"', b'"stop"')}, "range_keys: want \\(start, stop, step\\)"),
        ({"range_keys": (b'"start"', b'"stop"', b"")}, "range_keys: want a name"),
        ({"off_headers": ("Expect",)}, "off_headers: want lower-case header names"),
        ({"off_headers": (b"expect",)}, "off_headers: want lower-case header names"),
        ({"off_headers": ("",)}, "off_headers: want lower-case header names"),
        ({"off_headers": ("x y",)}, "off_headers: want lower-case header names"),
        ({"off_headers": ("caf\u00e9",)}, "off_headers: want lower-case header names"),
    ],
)
def test_configure_refuses_what_the_c_side_cannot_hold(change, says):
    with pytest.raises(ValueError, match=says):
        _hot.configure(**(GOOD | change))
    _hot.configure(**GOOD)  # (a refused call changes nothing; this one restores the same values)


def test_the_limits_are_the_settings_in_use():
    rules = replay.native_rules(Settings(max_body_bytes=1234, max_header_bytes=567))
    assert (rules["max_body"], rules["max_head"], rules["off_headers"]) == (1234, 567, LANE_OFF_HEADERS)


def _rows_template(max_rows: int):
    table = np.arange(32, dtype=np.float32).reshape(4, 8)
    return _hot.RowsTemplate(
        plan=RowPlan(arrays=(table,), colmap=list(range(8)), offset=0),
        max_rows=max_rows,
        lists_only=False,
        header_for=lambda n: b"H",
        tail=b"",
    )


def test_the_configured_rules_are_the_ones_applied():
    """The row limit, the position limit, the range keys and the body limit come from
    configure(): answers follow them (the template here is a bare 4 x 8 float32 table, header
    b'H', no tail)."""
    acc = ([(b"accept", b"x")], {b"x": 0})  # 0: safetensors
    key = b'{"positions":\0}'
    try:
        _hot.configure(
            **(GOOD | {"max_rows": 3, "position_limit": 3, "range_keys": (b'"from"', b'"to"', b'"by"')})
        )
        with pytest.raises(ValueError, match="max_rows <= 3"):
            _rows_template(4)
        t = {key: _rows_template(3)}

        def answer(sel: bytes):
            return replay.answer(b'{"positions":' + sel + b"}", *acc, t, "rope")

        assert (
            answer(b"[2,0]")
            == b"H" + np.float32([[16, 17, 18, 19, 20, 21, 22, 23], [0, 1, 2, 3, 4, 5, 6, 7]]).tobytes()
        )
        assert answer(b"[3]") is None  # past the configured position limit
        assert answer(b"[0,1,2,0]") is None  # more rows than the configured limit
        assert answer(b'{"from":1,"to":3}') == b"H" + np.arange(8, 24, dtype=np.float32).tobytes()
        assert answer(b'{"start":1,"stop":3}') is None  # not the configured range keys
        with pytest.raises(KeyError, match="no-such-family"):  # a family configured without fields
            replay.answer(b"{}", *acc, t, "no-such-family")
        at = b'{"positions":[2, 0]}'
        replay.configure(Settings(max_body_bytes=len(at)))
        assert answer(b"[2, 0]") == answer(b"[2,0]") is not None
        assert answer(b"[2,  0]") is None  # one byte over the body limit
    finally:
        replay.configure(current())
