"""The skips a CI run may have: each a pattern of the skip's reason and the POSENC_BACKEND pass it
is allowed in. tests/conftest.py turns every other skip into a failure when ``CI`` is set.

A skip is allowed only when the same CI run tests the skipped thing in its other pass (.ci/run
runs the suite once with POSENC_BACKEND=numpy, once with =simd): the kernel tests' numpy param is
run by the numpy pass, what needs the C kernels by the simd pass. Whatever depends on the machine
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
        r"T5 blocks, half-precision ALiBi cells and rows past a table need the engine's C kernels "
        r"\(the simd backend\)",
        "tests/service/hot_helpers.py needs_kernels: kernels.c_api() is None with the numpy backend",
    ),
    (
        "numpy",
        r"rows past a table are libm's, as the simd kernels compute them; .*",
        "tests/engine/test_c_reader.py: the expected rows are the simd kernels' (libm) ones",
    ),
    # the reason says 'not built', but in the numpy pass the module-level condition is
    # kernels.c_api() is None (the numpy backend); _hot's build is asserted by tests/test_build.py
    (
        "numpy",
        r"service\._hot or the simd kernels are not built",
        "tests/service/shortcut/test_past_table.py, test_hot_t5.py: rows past a table and T5 in C",
    ),
    ("numpy", r"the C plan needs the simd backend", "tests/integration/test_client_handle.py"),
    (
        "numpy",
        r"the C (template )?shortcut runs with service\._hot built and the simd backend",
        "shortcut_in_use('auto') is 'c' only with the simd backend (tests/service/hot_helpers.py, test_hf_http.py)",
    ),
    (
        "numpy",
        r"the budget's arithmetic counts the rows past the table \(simd\)",
        "tests/service/shortcut/test_json_answers.py",
    ),
    (
        "numpy",
        r"(T5|float16 ALiBi) blocks come from the simd backend's kernel",
        "tests/service/v2/test_v2_json_lane.py: kernels.c_api() is None with the numpy backend",
    ),
]


def allowed(reason: str, backend: str) -> bool:
    """Whether a skip with this reason is allowed in the pass of POSENC_BACKEND ``backend``."""
    return any(pass_ == backend and re.fullmatch(pattern, reason) for pass_, pattern, _ in ALLOWED)
