"""The skips a CI run may have: each a pattern of the skip's reason and the POSENC_BACKEND pass it
is allowed in. tests/conftest.py turns every other skip into a failure when ``CI`` is set.

A skip is allowed only when the same CI run tests the skipped thing in its other pass (.ci/run
runs the whole suite with POSENC_BACKEND=simd, then the tests of tests/backend_tests.py with
POSENC_BACKEND=numpy): the kernel tests' numpy param is run by the numpy pass, what needs the C
kernels by the simd pass. Whatever depends on the machine
(root, a tmpfs mount, a compiler, an import, a C extension that failed to build) is never here:
CI has all of it, so there such a skip hides a test that did not run. That the C extensions are
built at all is tests/test_build.py's check (simd pass and CI), not a skip.

Patterns are regular expressions matched (re.fullmatch) against the reason as pytest reports it.
"""

from __future__ import annotations

import re

# (the pass it is allowed in, pattern of the reason, why the other pass covers it)
ALLOWED: list[tuple[str, str, str]] = [
    # -- the simd pass --
    (
        "simd",
        r"POSENC_BACKEND=simd: only the simd backend runs",
        "the kernel tests' numpy param (tests/engine/kernel_helpers.py): the numpy pass runs it",
    ),
    # -- the numpy pass: what needs the simd backend, run by the simd pass --
    (
        "numpy",
        r"POSENC_BACKEND=numpy: only the numpy backend runs",
        "the kernel tests' simd-<level> params: the simd pass runs each level this CPU has",
    ),
    (
        "numpy",
        r"rows past a table are libm's, as the simd kernels compute them; .*",
        "tests/engine/test_c_reader.py: the expected rows are the simd kernels' (libm) ones",
    ),
]


def allowed(reason: str, backend: str) -> bool:
    """Whether a skip with this reason is allowed in the pass of POSENC_BACKEND ``backend``."""
    return any(pass_ == backend and re.fullmatch(pattern, reason) for pass_, pattern, _ in ALLOWED)
