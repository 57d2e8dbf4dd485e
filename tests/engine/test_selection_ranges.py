"""Range selections ({"start", "stop", "step"}) as parse_selection reads them, against the contract
written out here independently: keys among start, stop and step; start and stop integers (not
booleans) with 0 <= start < stop <= 2**31; step absent or null (1) or an integer above 0. Drawn
over every kind of value a JSON body can hold, so that the one-expression check for a well-formed
range (the common case) and the field-by-field checks after it hold to the same rule."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from posenc.engine.core.errors import SpecError
from posenc.engine.core.selection import POSITION_LIMIT, parse_selection

VALUES = st.one_of(
    st.integers(-3, 40),
    st.integers(POSITION_LIMIT - 3, POSITION_LIMIT + 3),
    st.integers(-(2**70), 2**70),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-5, max_value=50),
    st.sampled_from(["1", "", "start"]),
    st.lists(st.integers(0, 3), max_size=2),
)
RANGES = st.dictionaries(st.sampled_from(["start", "stop", "step", "stride"]), VALUES, max_size=4)


def contract(value: dict):
    """(start, stop, step) of an accepted range, or None."""
    if set(value) - {"start", "stop", "step"}:
        return None

    def whole(v):
        return isinstance(v, int) and not isinstance(v, bool)

    start, stop, step = value.get("start"), value.get("stop"), value.get("step")
    step = 1 if step is None else step
    if not (whole(start) and whole(stop) and whole(step)):
        return None
    if not (0 <= start < stop <= POSITION_LIMIT and step > 0):
        return None
    return start, stop, step


@settings(max_examples=1500, deadline=None)
@given(value=RANGES)
def test_a_range_is_accepted_exactly_as_the_contract_says(value):
    want = contract(value)
    try:
        sel = parse_selection(value, ("positions",))
    except SpecError as e:
        assert want is None, (value, e)
        assert e.loc[0] == "positions"
        return
    assert want is not None, value
    assert (sel.start, sel.stop, sel.step, sel.values) == (*want, None)
    if sel.n <= 1000:
        assert sel.array().tolist() == list(range(*want))
