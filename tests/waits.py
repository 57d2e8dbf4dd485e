"""The suite's one way to wait: poll a condition until a deadline, and on timeout fail naming what
was waited for and what was last seen.

    wait_for(lambda: engine.manifest(), what="engine's manifest")
    wait_for(lambda: metric() >= 3, what="3 builds counted", seen=metric)

A test never sleeps to let something happen: it waits for the state it needs. The deadline only
catches a hang; a deadline that passes on a loaded machine is not a finding about speed (that is a
benchmark's, tests/bench/). The few sleeps that pace load on purpose are listed, with why, in
tests/test_suite_hooks.py (SLEEPS_ALLOWED), which fails on any other.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def _shown(value: object, limit: int = 600) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 20] + f"... ({len(text)} chars)"


def wait_for(
    predicate: Callable[[], object],
    timeout: float = 30.0,
    interval: float = 0.01,
    what: str = "condition",
    check: Callable[[], None] | None = None,
    seen: Callable[[], object] | None = None,
):
    """Poll until ``predicate()`` is truthy and return that value.

    ``check`` may raise to stop early (the process waited on died). On timeout: TimeoutError
    naming ``what`` and the last state seen: ``seen()`` when given (a predicate that returns only
    True/False says little), else the predicate's last value.
    """
    deadline = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if check is not None:
            check()
        if time.monotonic() > deadline:
            try:
                last = seen() if seen is not None else v
            except Exception as exc:  # what we show must not hide the timeout
                last = f"<seen() raised {exc!r}>"
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}; last seen: {_shown(last)}")
        time.sleep(interval)
