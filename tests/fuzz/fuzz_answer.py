"""Coverage-guided fuzz of the template answers (service/shortcut/hot_answer.c ``answer``): an
input is a request body, tried against the learnt templates of each family (rope, sinusoidal,
ALiBi). Besides the sanitizers: whatever C answers is the full path's answer from the same tables,
byte for byte (C may decline more, never answer differently). The same body is cut as a learnt
one is (``cut``): its spans (in field order) do not overlap and lie inside the body, and the key
is the body with each span replaced by one NUL.

    python tests/fuzz/fuzz_answer.py tests/fuzz/corpus/answer
"""

from __future__ import annotations

import sys

from tests.fuzz import hot_targets as ht  # first: it loads the instrumented shortcut

FAMILIES = sorted(ht.TEMPLATES.native)


def check_cut(data: bytes, family: str) -> None:
    got = ht.hot.cut(data, family)
    if got is None:
        return
    key, spans = got
    assert len(spans) == len(ht.replay.FIELDS[family]), (data, spans)
    at, want = 0, b""
    for a, b in sorted(spans):  # in field order; the key has them in the body's order
        assert at <= a < b <= len(data), (data, spans)
        want += data[at:a] + b"\0"
        at = b
    assert key == want + data[at:], (data, spans)


def one_input(data: bytes) -> None:
    for family in FAMILIES:
        got = ht.answer(data, family)
        ht.check_answer(data, family, got)
        check_cut(data, family)


if __name__ == "__main__":
    import atheris  # here: tests/fuzz/test_corpus.py replays one_input without it

    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
