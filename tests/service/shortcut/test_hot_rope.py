"""The C shortcut (service/shortcut/hot_answer.c) for RoPE rows against the full path and the library's bytes,
driven in-process.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from posenc.engine.tables.base import RowPlan
from posenc.service.shortcut import _hot
from posenc.service.shortcut import templates as replay
from tests.independent import assert_c_answer
from tests.service.hot_helpers import HOT_SPECS, ODD, needs_native
from tests.service_cases import ACCEPT_HDRS, BIN, orjson_dumps, reference_safetensors


@needs_native
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    spec=st.sampled_from(HOT_SPECS),
    rows=st.lists(st.integers(0, 2050), min_size=0, max_size=70),
    odd=st.one_of(st.just(None), ODD),
    at=st.integers(0, 70),
    seps=st.sampled_from([","] * 4 + [", ", " ,", ",\n", ",,"]),
    open_=st.sampled_from(["["] * 4 + ["[ ", "[\n"]),
    close=st.sampled_from(["]"] * 4 + [" ]", ",]"]),
    colon=st.sampled_from([":"] * 4 + [" : ", "::", ": ", ":\t"]),
    first=st.booleans(),
)
def test_native_shortcut_answers_like_the_full_path(
    learnt, spec, rows, odd, at, seps, open_, close, colon, first
):
    """Whatever the list's text, the C shortcut answers exactly as the full path does, or leaves
    the body to the full path."""
    tokens = [str(r) for r in rows]
    if odd is not None:
        tokens.insert(min(at, len(tokens)), odd)
    spec_text = orjson_dumps(spec)[1:-1]

    def text(lst: bytes) -> bytes:
        if first:
            return b'{"positions"' + colon.encode() + lst + b"," + spec_text + b"}"
        return b"{" + spec_text + b',"positions"' + colon.encode() + lst + b"}"

    if colon != "::":  # let the full path learn this body's template
        for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
            learnt.execute(learnt.prepare("rope", text(b"[5]"), BIN["accept"]))
    lst = (open_ + seps.join(tokens) + close).encode()
    body = text(lst)
    c = learnt.hot("rope", body, ACCEPT_HDRS)
    event(f"C: {'answered' if c is not None else 'full path'}")
    try:
        parsed = json.loads(body)["positions"]
    except ValueError:
        parsed = None
    # A valid list of 1 to MAX_ROWS positions (templates.py), inside the table or past it: the
    # shortcut must answer it.
    plain = (
        colon != "::"
        and isinstance(parsed, list)
        and 0 < len(parsed) <= replay.MAX_ROWS
        and all(type(v) is int and 0 <= v < 2**31 for v in parsed)
        and b"-" not in lst
    )
    if plain:
        assert c is not None, body
    if c is not None:
        assert c == learnt.execute(learnt.prepare("rope", body, BIN["accept"]))[0]
        assert c == reference_safetensors("rope", json.loads(body))
        assert_c_answer("rope", json.loads(body), c)  # and the float64 reference


@needs_native
def test_native_shortcut_needs_a_learnt_accept_and_a_small_body(learnt):
    body = orjson_dumps({**HOT_SPECS[0], "positions": [1, 2]})
    assert learnt.hot("rope", body, ACCEPT_HDRS) is not None
    assert learnt.hot("rope", body, ACCEPT_HDRS[:2]) is None  # no Accept: JSON
    assert learnt.hot("rope", body, [(b"accept", b"application/json")]) is None
    odd = b"application/x-safetensors;q=0.9, application/json;q=0.1"
    assert learnt.hot("rope", body, [(b"accept", odd)]) is None  # not negotiated yet
    learnt.prepare("rope", body, odd.decode())
    assert learnt.hot("rope", body, [(b"accept", odd)]) == learnt.hot("rope", body, ACCEPT_HDRS)
    spaced = body.replace(b"[1,2]", b"[1," + b" " * learnt.settings.max_body_bytes + b"2]")
    assert learnt.hot("rope", spaced, ACCEPT_HDRS) is None  # over the body limit
    past = orjson_dumps({**HOT_SPECS[0], "positions": [1, 2048, 1 << 30]})  # past the table:
    assert (
        learnt.hot("rope", past, ACCEPT_HDRS)
        == learnt.execute(learnt.prepare("rope", past, BIN["accept"]))[0]
    )
    assert learnt.hot("rope", past, ACCEPT_HDRS) == reference_safetensors(
        "rope", json.loads(past)
    )  # computed
    assert_c_answer("rope", json.loads(past), learnt.hot("rope", past, ACCEPT_HDRS))


@needs_native
def test_native_template_checks_its_arrays():
    a = np.zeros((4, 8), np.float32)
    cols = list(range(8))

    def rows(arrays, colmap=cols, hf=lambda n: b"", offset=0, **kw):
        args = dict(max_rows=64, lists_only=True) | kw
        plan = RowPlan(arrays=arrays, colmap=colmap, offset=offset)
        return _hot.RowsTemplate(plan=plan, header_for=hf, tail=b"", **args)

    with pytest.raises(ValueError, match="2-d"):
        rows((np.zeros(8, np.float32),))
    with pytest.raises(ValueError, match="2-d"):
        rows((np.zeros((4, 8), np.float64),))
    with pytest.raises(ValueError, match="differ"):
        rows((a, np.zeros((4, 8), np.float16)))
    with pytest.raises(ValueError, match="outside"):
        rows((a,), [0, 8])
    with pytest.raises(ValueError, match="max_rows"):
        rows((a,), max_rows=65)
    with pytest.raises(TypeError, match="callable"):
        rows((a,), hf=None)
    m = np.ones(3)
    with pytest.raises(ValueError, match="float64"):
        _hot.AlibiTemplate(
            slopes=m.astype(np.float32),
            symmetric=False,
            mask_future=False,
            header_for=lambda q, k: b"",
            tail=b"\0" * 12,
            max_n=10,
            max_bytes=100,
        )
    with pytest.raises(ValueError, match="float32 slopes"):
        _hot.AlibiTemplate(
            slopes=m,
            symmetric=False,
            mask_future=False,
            header_for=lambda q, k: b"",
            tail=b"",
            max_n=10,
            max_bytes=100,
        )
    with pytest.raises(ValueError, match="causal"):
        _hot.AlibiTemplate(
            slopes=m,
            symmetric=True,
            mask_future=True,
            header_for=lambda q, k: b"",
            tail=b"\0" * 12,
            max_n=10,
            max_bytes=100,
        )
    t = rows((a, a), hf=lambda n: 7)  # a header_for that returns no bytes
    acc = ([(b"accept", b"x")], {b"x": 0})  # 0: safetensors
    with pytest.raises(TypeError, match="bytes"):
        replay.answer(b'{"positions":[1]}', *acc, {b'{"positions":\0}': t}, "rope")
    with pytest.raises(TypeError, match="AlibiTemplate"):  # a template of another family
        replay.answer(b'{"query":[1],"key":[1]}', *acc, {b'{"query":\0,"key":\0}': t}, "alibi")


@needs_native
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    spec=st.sampled_from(HOT_SPECS),
    start=st.integers(0, 2100),
    n=st.integers(-2, 70),
    step=st.sampled_from(["", ',"step":1', ',"step":3', ',"step":null', ',"step":0', ',"step":-1']),
    first=st.booleans(),
)
def test_native_shortcut_answers_rope_ranges_like_the_full_path(learnt, spec, start, n, step, first):
    """A range of positions (``{"start", "stop"[, "step"]}``, the README's form), inside the
    table and past it: C answers every valid range of at most MAX_ROWS rows, learnt from a list
    body of the same spec, bit for bit the full path's and held to the float64 reference; the
    rest (empty, a bad step, too many rows) takes the full path."""
    spec_text = orjson_dumps(spec)[1:-1]
    sel = b'{"start":%d,"stop":%d%s}' % (start, start + n, step.encode())

    def text(s: bytes) -> bytes:
        if first:
            return b'{"positions":' + s + b"," + spec_text + b"}"
        return b"{" + spec_text + b',"positions":' + s + b"}"

    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py); learnt from a list
        learnt.execute(learnt.prepare("rope", text(b"[5]"), BIN["accept"]))
    body = text(sel)
    c = learnt.hot("rope", body, ACCEPT_HDRS)
    # the step as the pipeline reads it (None: one it refuses, 0 or negative)
    stride = {"": 1, ',"step":1': 1, ',"step":3': 3, ',"step":null': 1}.get(step)
    rows = range(start, start + n, stride) if stride else range(0)
    if 0 < len(rows) <= replay.MAX_ROWS:
        assert c is not None, body
    if c is not None:
        assert c == learnt.execute(learnt.prepare("rope", body, BIN["accept"]))[0]
        assert_c_answer("rope", json.loads(body), c)  # and the float64 reference
