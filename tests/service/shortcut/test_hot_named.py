"""The contracts across the C boundary are named (service/shortcut/hot_named.c): no call of the
shortcut's module, nor a method of its templates, takes more than three arguments by position (the
rest by name, a wrong name refused naming it), and what the lane's v2 routes hold are small types
with named fields, checked when made, never tuples told apart by their length."""

from __future__ import annotations

import re

import numpy as np
import pytest

from posenc.engine.tables.base import RowPlan
from posenc.service.shortcut import templates as replay

pytestmark = pytest.mark.skipif(not replay.NATIVE, reason="service._hot is not built")
_hot = replay._hot


def _callables():
    """Every function of the module and every method of its types, with a signature (each has)."""
    for name, f in sorted(vars(_hot).items()):
        if callable(f) and not isinstance(f, type) and not name.startswith("_"):
            yield name, f
        if isinstance(f, type):
            for m, g in sorted(vars(f).items()):
                if callable(g) and not m.startswith("_"):
                    yield f"{name}.{m}", g


def _parameters(name: str, f) -> list[str]:
    """The parameters a callable's documented signature names (its text signature, or its doc's
    first line, ``name(a, b, *, c) -> ...``), the bare ``*`` included; self left out."""
    text = getattr(f, "__text_signature__", None)
    if text is None:
        m = re.match(r"\w+\((.*?)\)", (f.__doc__ or "").split("\n")[0])
        assert m, f"{name}: no signature documented: {f.__doc__!r}"
        text = "(" + m.group(1) + ")"
    params = [p.strip().split("=")[0] for p in text.strip("()").split(",") if p.strip()]
    return [p for p in params if p not in ("$self", "self", "$module", "/")]


def test_no_call_takes_more_than_three_arguments_by_position():
    seen = []
    for name, f in _callables():
        params = _parameters(name, f)
        positional = params[: params.index("*")] if "*" in params else params
        seen.append(name)
        assert len(positional) <= 3, (name, params)
    assert {
        "lane",
        "Reader.bind",
        "answer",
        "fill",
        "fill_into",
        "fill_block",
        "configure",
        "RowsTemplate.enable_json",
    } <= set(seen)


def _table_template():
    t = np.arange(40, dtype=np.float32).reshape(10, 4)
    return _hot.RowsTemplate(
        plan=RowPlan(arrays=(t,), colmap=(0, 1, 2, 3)),
        max_rows=8,
        lists_only=True,
        header_for=lambda n: b"",
        tail=b"",
    )


def test_arguments_past_the_third_are_named_and_a_wrong_name_is_refused():
    t = _table_template()
    pos = np.array([1, 2], np.int64).tobytes()
    want = b"<" + np.arange(40, dtype=np.float32).reshape(10, 4)[[1, 2]].tobytes() + b">"
    assert _hot.fill(t, pos, 8, parts=(b"<", b">")) == want
    assert _hot.fill(template=t, positions=pos, itemsize=8, parts=(b"<", b">")) == want
    with pytest.raises(TypeError, match=r"fill\(\) takes 3 positional arguments"):
        _hot.fill(t, pos, 8, (b"<", b">"))
    with pytest.raises(TypeError, match=r"fill\(\): unexpected keyword argument 'part'"):
        _hot.fill(t, pos, 8, part=(b"<", b">"))
    with pytest.raises(TypeError, match=r"fill\(\): repeated keyword argument 'itemsize'"):
        _hot.fill(t, pos, 8, itemsize=8, parts=(b"<", b">"))
    with pytest.raises(TypeError, match=r"fill\(\): missing argument parts"):
        _hot.fill(t, pos, 8)
    with pytest.raises(TypeError, match=r"lane\(\) takes 2 positional arguments"):
        _hot.lane(b"", 0, {}, {}, {}, (b"", b"", b""), b"", False)


def _route(**kw):
    fields = dict(
        metrics=3, entries={}, length_name=b"n", refused=(b"x",), json_name=b'"data"', json_entries={}
    )
    return _hot.V2Route(**(fields | kw))


def test_routes_and_entries_are_named_types_checked_when_made():
    t = _table_template()
    e = _hot.RowsEntry(template=t, itemsize=8, nbytes=16, parts=(b"<", b">"), post=b"p")
    assert (e.template, e.itemsize, e.nbytes, e.parts, e.post) == (t, 8, 16, (b"<", b">"), b"p")
    r = _route(entries={b"h": e})
    assert (r.metrics, r.entries, r.length_name, r.refused, r.json_name) == (
        3,
        {b"h": e},
        b"n",
        (b"x",),
        b'"data"',
    )
    for make in (
        lambda: _hot.V2Route(3, {}, b"n", (), b"d", {}),  # keywords only
        lambda: _hot.RowsEntry(t, 8, 16, (b"<", b">"), b"p"),
        lambda: _hot.RowsEntry(template=object(), itemsize=8, nbytes=16, parts=(b"<", b">"), post=b"p"),
        lambda: _hot.RowsEntry(template=t, itemsize=8, nbytes=16, parts=(b"<", b"", b">"), post=b"p"),
        lambda: _hot.BlockEntry(
            template=t, itemsizes=(8, 4), nbytes=(8, 4), key_first=False, parts=(b"", b""), post=b""
        ),
        lambda: _hot.JsonEntry(template=t, counts=(1, 2), swap=False, post=b""),  # rows: one list
        lambda: _route(refused=("x",)),
    ):
        with pytest.raises(TypeError):
            make()
    with pytest.raises(ValueError):
        _hot.RowsEntry(template=t, itemsize=3, nbytes=16, parts=(b"<", b">"), post=b"p")
    with pytest.raises(RuntimeError, match="once"):
        e.__init__(template=t, itemsize=8, nbytes=16, parts=(b"<", b">"), post=b"p")
    with pytest.raises(RuntimeError, match="once"):  # nothing of a route changes once it is made
        r.__init__(metrics=9, entries={}, length_name=b"n", refused=(), json_name=b"d", json_entries={})
    assert r.metrics == 3


def _post(target: bytes, body: bytes, head: bytes = b"h") -> bytes:
    return b"POST %s HTTP/1.1\r\nn: %d\r\ncontent-length: %d\r\n\r\n%s%s" % (
        target,
        len(head),
        len(head) + len(body),
        head,
        body,
    )


def _lane(data: bytes, routes: dict):
    return _hot.lane(
        data, 0, routes=routes, accepts={}, native={}, pre=(b"S", b"J", b"V"), post=b"", close=False
    )


def test_the_lane_answers_a_named_entry_and_refuses_a_tuple_with_a_clear_error():
    t = _table_template()
    pos = np.array([3], np.int64).tobytes()
    e = _hot.RowsEntry(template=t, itemsize=8, nbytes=8, parts=(b"<", b">"), post=b"|")
    got = _lane(_post(b"/v2/m", pos), {b"/v2/m": _route(entries={b"h": e})})
    rows = np.arange(40, dtype=np.float32).reshape(10, 4)[[3]].tobytes()
    assert got[2] == b"V%d|\r\n<%s>" % (len(rows) + 2, rows), got
    # the Python door's call (v2_rest): the same answer without its HTTP head, named as a V2Route's
    door = _hot.v2_rest(route=_route(entries={b"h": e}), body=b"h" + pos, headers=[(b"n", b"1")])
    assert door == (b"<%s>" % rows, False, b"|", 3), door
    # an entry C does not fill (Python's): the lane declines it, the door hands it back with its positions
    other = _route(entries={b"h": (t, 8, 8, (b"<", b">"), b"|")})
    assert _lane(_post(b"/v2/m", pos), {b"/v2/m": other}) is False
    assert _hot.v2_rest(other, b"h" + pos, [(b"n", b"1")]) == ((t, 8, 8, (b"<", b">"), b"|"), pos)
    with pytest.raises(TypeError, match="V2Route"):
        _hot.v2_rest({b"h": e}, b"h" + pos, [(b"n", b"1")])
    with pytest.raises(TypeError, match="bytes\\) pairs"):
        _hot.v2_rest(_route(entries={b"h": e}), b"h" + pos, [("n", "1")])
    with pytest.raises(TypeError, match="V2Route"):
        _lane(_post(b"/v2/m", pos), {b"/v2/m": (None, 3, {b"h": e}, b"n", (b"x",))})
