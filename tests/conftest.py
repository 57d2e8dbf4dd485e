"""Suite-wide hooks: the seed and the kernel backend in the report header, the seed beside every
failure, one seeded ``rng`` fixture, and hypothesis seeded from the same POSENC_TEST_SEED; and at
the session's end, no file in /dev/shm of any namespace this session handed out (tests/shm.py
``unique_namespace``) once its engine has exited: the run fails, naming the files and the test.

References used by the tests are transformers' own functions or float64 formulas written in the
tests from docs/reference.md, never the engine's code (numeric helpers: tests/numeric.py).
"""

from __future__ import annotations

import hypothesis
import numpy as np
import pytest

from tests.numeric import SEED
from tests.shm import ISSUED, SHM_DIR, leftovers, pid_alive

# No example database: a failure must replay from the printed seed alone, not from a local file,
# and a run must not depend on what an earlier run saved.
hypothesis.settings.register_profile("posenc", database=None, print_blob=True)
hypothesis.settings.load_profile("posenc")


def pytest_report_header(config):
    try:
        from posenc.engine.kernels import BACKEND
    except Exception as exc:  # the header must never break collection
        BACKEND = f"unavailable ({exc.__class__.__name__})"
    return f"posenc test seed: POSENC_TEST_SEED={SEED}; kernel backend: {BACKEND}"


def pytest_collection_modifyitems(config, items):
    """Every hypothesis test draws from POSENC_TEST_SEED (hypothesis.seed), so the seed printed
    in the header and beside a failure replays it; a test may not pick its own randomness."""
    for item in items:
        fn = getattr(item, "function", None)
        if fn is not None and getattr(fn, "is_hypothesis_test", False):
            hypothesis.seed(SEED)(fn)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        report.sections.append(("posenc seed", f"POSENC_TEST_SEED={SEED}"))


@pytest.fixture
def rng():
    return np.random.default_rng(SEED)


# -- /dev/shm at the end of the session --------------------------------------------------------
# Only namespaces handed out by this process are looked at: another pytest session's engines on
# the same machine (live or not) are never this run's business.

LEFT_KEY = pytest.StashKey[dict]()


def pytest_sessionfinish(session, exitstatus):
    left = leftovers(list(ISSUED))
    session.config.stash[LEFT_KEY] = left
    if left and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    left = config.stash.get(LEFT_KEY, {})
    if not left:
        return
    terminalreporter.section(f"files left in {SHM_DIR}", sep="=", red=True, bold=True)
    for ns, (files, pid) in sorted(left.items()):
        owner = "no pid in a lock" if pid is None else f"lock pid {pid} {'still running' if pid_alive(pid) else 'dead'}"
        terminalreporter.line(f"{ns} ({owner}), namespace of {ISSUED[ns]}: {' '.join(files)}", red=True)
    terminalreporter.line(f"{len(left)} namespace(s) left files: the run fails", red=True, bold=True)
