"""Coverage-guided fuzz of the selection parser (service/shortcut/hot_select.c, through
``parse_selection``): an input's first byte picks lists_only and the cap; the rest is the
selection's text. Besides the sanitizers: whatever C accepts, the full path (orjson, then
engine/core/selection.py) accepts with the same positions in the same order, within the cap.

    python tests/fuzz/fuzz_select.py tests/fuzz/corpus/select
"""

from __future__ import annotations

import sys

import orjson  # noqa: E402

from posenc.engine.core.errors import SpecError  # noqa: E402
from posenc.engine.core.selection import parse_selection  # noqa: E402
from tests.fuzz import hot_targets as ht  # first: it loads the instrumented shortcut

CAPS = (1, 3, 64, 4096)


def python_positions(text: bytes) -> list | int | None:
    try:
        value = orjson.loads(text)
        sel = parse_selection(value, "positions")
    except (orjson.JSONDecodeError, SpecError):
        return None
    return sel.array().tolist() if sel.n <= 4096 else sel.n


def one_input(data: bytes) -> None:
    if not data:
        return
    lists_only, cap, text = bool(data[0] & 4), CAPS[data[0] & 3], data[1:]
    c = ht.hot.parse_selection(text, lists_only, cap)
    if c is None:
        return
    assert 1 <= len(c) <= cap, text
    assert not lists_only or type(c) is list, text
    assert python_positions(text) == list(c), text


if __name__ == "__main__":
    import atheris  # here: tests/fuzz/test_corpus.py replays one_input without it

    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
