"""Coverage-guided fuzz of the template answers (service/shortcut/hot_answer.c ``answer``): an
input is a request body, tried against the learnt templates of each family (rope, sinusoidal,
ALiBi). Besides the sanitizers: whatever C answers is the full path's answer from the same tables,
byte for byte (C may decline more, never answer differently).

    python tests/fuzz/fuzz_answer.py tests/fuzz/corpus/answer
"""

from __future__ import annotations

import sys

from tests.fuzz import hot_targets as ht   # first: it loads the instrumented shortcut


FAMILIES = sorted(ht.TEMPLATES.native)


def one_input(data: bytes) -> None:
    for family in FAMILIES:
        got = ht.answer(data, family)
        ht.check_answer(data, family, got)


if __name__ == "__main__":
    import atheris   # here: tests/fuzz/test_corpus.py replays one_input without it

    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
