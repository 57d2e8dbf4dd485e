"""The C shortcut's selection parser (service/shortcut/hot_select.c) against the definition,
engine/core/selection.py after orjson (the full path's reading of a body): on generated selection
texts, valid and not, whatever C accepts Python accepts with the same positions, in the same
order. C may refuse more (and leaves those bodies to the full path). ``_hot.parse_selection``
reads a text as a template answer reads a cut-out selection."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from posenc.engine.core.errors import SpecError
from posenc.engine.core.selection import POSITION_LIMIT, parse_selection
from posenc.service.shortcut import templates as replay

pytestmark = pytest.mark.skipif(not replay.NATIVE, reason="service._hot is not built")

PLAIN = {
    "ws": st.sampled_from(["", "", " ", "\t", "\n", "\r", "  "]),
    "num": st.one_of(st.integers(0, 3000), st.integers(POSITION_LIMIT - 3, POSITION_LIMIT - 1)).map(str),
}
ODD = {  # what replaces a token of each kind in a text that is not plain
    "ws": st.sampled_from(["\x0b", "\x0c", "\u00a0", "\u2028", "\x00", "/**/"]),
    "num": st.one_of(
        st.integers(0, 3000).map(lambda v: f"0{v}"),  # leading zeros
        st.one_of(st.integers(-3000, 0).map(str), st.just("-0")),  # signs
        st.builds(lambda a, b: f"{a}.{b}", st.integers(0, 30), st.sampled_from(["", "0", "5"])),  # fractions
        st.builds(
            lambda a, e, b: f"{a}{e}{b}",
            st.integers(0, 30),
            st.sampled_from("eE"),
            st.sampled_from(["0", "1", "+2", "-1", ""]),
        ),  # exponents
        st.one_of(st.integers(POSITION_LIMIT, POSITION_LIMIT + 3), st.integers(2**62, 2**70)).map(
            str
        ),  # too big
        st.sampled_from(
            [
                "+1",
                "-",
                "1_0",
                "0x1",
                "Infinity",
                "NaN",
                "null",
                "true",
                "false",
                '"3"',
                "[1]",
                "[]",
                "{}",
                '{"a":1}',
                "",
                "\\u0031",
                "\u0661",
                "\uff11",
                '"\\u0031"',
                "1 2",
            ]
        ),
    ),
    "key": st.sampled_from(
        [
            '"stap"',
            '"START"',
            '"start "',
            "start",
            '"\\u0073tart"',
            '"st\\u006fp"',
            "''",
            '""',
            '"start"',
            '"stop"',
            '"step"',
            '"step" "step"',
        ]
    ),
    "step": st.sampled_from(["0", "-1", "1.0", "1e0", "-0", "01", "null ", "nul", "true", '"1"']),
    ",": st.sampled_from([",,", ";", "", " ", ",}", ",]"]),
    ":": st.sampled_from(["::", "", ";", "=", ": :"]),
    "open": st.sampled_from(["[[", "{", "[{", "(", "["]),
    "close": st.sampled_from(["]]", "}", "", ")", ",]", ",}"]),
}


@st.composite
def plain_tokens(draw) -> list[tuple[str, str]]:
    """A selection as (kind, text) tokens, every one plain: a list of 1..8 positions, or a range
    whose step (if any) is 1, 2, 7 or null, its keys in any order."""
    ws = lambda: ("ws", draw(PLAIN["ws"]))  # noqa: E731
    if draw(st.booleans()):
        out = [("open", "["), ws()]
        for i in range(draw(st.integers(1, 8))):
            out += ([(",", ","), ws()] if i else []) + [("num", draw(PLAIN["num"])), ws()]
        return out + [("close", "]")]
    start = draw(st.one_of(st.integers(0, 3000), st.integers(POSITION_LIMIT - 5, POSITION_LIMIT - 1)))
    pairs = [
        ("start", ("num", str(start))),
        ("stop", ("num", str(start + draw(st.integers(1, 300))) if start <= 3000 else str(POSITION_LIMIT))),
    ]
    if draw(st.booleans()):
        pairs.append(("step", ("step", draw(st.sampled_from(["1", "2", "7", "null"])))))
    out = [("open", "{")]
    for i, (k, v) in enumerate(draw(st.permutations(pairs))):
        out += ([(",", ","), ws()] if i else [ws()]) + [("key", f'"{k}"'), ws(), (":", ":"), ws(), v, ws()]
    return out + [("close", "}")]


@st.composite
def selection_texts(draw) -> tuple[str, bool]:
    """(A plain selection with 0 to 3 of its tokens replaced by odd ones, or odd tokens inserted;
    whether it is still plain)."""
    tokens = draw(plain_tokens())
    changes = draw(st.sampled_from([0, 0, 1, 1, 2, 3]))
    for _ in range(changes):
        i = draw(st.integers(0, len(tokens) - 1))
        kind = tokens[i][0]
        odd = draw(ODD[kind])
        if draw(st.booleans()):
            tokens[i] = (kind, odd)
        else:
            tokens.insert(i + draw(st.integers(0, 1)), (kind, odd))
    return "".join(t for _, t in tokens), changes == 0


TEXTS = st.one_of(
    selection_texts(),
    selection_texts(),
    selection_texts(),
    st.tuples(st.text(alphabet='[]{}:,"0123456789-+.eE \t\n\rnulstarpo\\', max_size=30), st.just(False)),
)


def python_positions(text: str) -> list | int | None:
    """The positions the full path reads from ``text`` as a selection (their count, if more than
    any cap here: a range may hold 2**31); None if it refuses it."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    try:
        sel = parse_selection(value, "positions")
    except SpecError:
        return None
    return sel.array().tolist() if sel.n <= 4096 else sel.n


@settings(max_examples=3000, deadline=None)
@given(drawn=TEXTS, lists_only=st.booleans(), cap=st.sampled_from([1, 3, 64, 4096, 4096]))
@example(drawn=('{"start":0,"stop":3,"step":null}', True), lists_only=False, cap=64)
@example(drawn=("[2147483647]", True), lists_only=True, cap=1)
@example(drawn=("[01]", False), lists_only=False, cap=64)
@example(drawn=("[1,-0]", False), lists_only=False, cap=64)
@example(drawn=("[2147483648]", False), lists_only=False, cap=64)
@example(drawn=('{"start":0,"stop":3,"step":0}', False), lists_only=False, cap=64)
@example(drawn=('{"start":1,"start":0,"stop":3}', False), lists_only=False, cap=64)
@example(drawn=('{"start":0,"stop":2147483649}', False), lists_only=False, cap=2**40)
def test_whatever_c_accepts_python_accepts_alike(drawn, lists_only, cap):
    text, plain = drawn
    c = replay._hot.parse_selection(text.encode(), lists_only, cap)
    event("C accepted" if c is not None else "C refused")
    py = python_positions(text)
    if plain:  # not vacuous: C reads every plain selection within its limits
        assert type(py) is list
        if len(py) <= cap and not (lists_only and text[0] == "{"):
            assert c is not None, text
    if c is not None:
        assert 1 <= len(c) <= cap
        assert not lists_only or type(c) is list
        assert py == list(c), text


@pytest.mark.parametrize(
    "text, positions",
    [
        ("[0]", [0]),
        ("[ 3 ,\t1,\n2\r]", [3, 1, 2]),
        ("[2147483647, 0]", [2147483647, 0]),
        ('{"start": 4, "stop": 9, "step": 2}', [4, 6, 8]),
        ('{"stop":3,"start":0}', [0, 1, 2]),
        ('{"start":0,"stop":2,"step":null}', [0, 1]),
        ('{"start":2147483646,"stop":2147483648}', [2147483646, 2147483647]),
    ],
)
def test_the_plain_spellings_are_accepted(text, positions):
    """Not vacuous: C reads the usual selections, with Python's positions."""
    assert list(replay._hot.parse_selection(text.encode(), False, 64)) == positions == python_positions(text)
