"""Suite-wide hooks: the seeds and the kernel backend in the report header, the seeds beside every
failure, one seeded ``rng`` fixture (POSENC_TEST_SEED), and every hypothesis test seeded from one
seed per run; with ``CI`` set, every skip whose reason is not on tests/allowed_skips.py's list
for this pass fails; the kernel dispatch levels the run tested, in its summary; and at the
session's end, no file in /dev/shm of any namespace this session handed out (tests/shm.py
``unique_namespace``) once its engine has exited: the run fails, naming the files and the test.

The hypothesis seed changes from run to run, so that the suite explores new examples each time;
it is printed in the header, in the summary and beside each failure, and ``--hypothesis-seed=N``
(hypothesis' own option) or POSENC_HYPOTHESIS_SEED=N pins it to replay a run.

References used by the tests are transformers' own functions or float64 formulas written in the
tests from docs/reference.md, never the engine's code (numeric helpers: tests/numeric.py).
"""

from __future__ import annotations

import collections
import os
import secrets

import hypothesis
import numpy as np
import pytest

from tests import allowed_skips
from tests.backend_tests import BACKEND_TESTS
from tests.numeric import SEED
from tests.shm import ISSUED, SHM_DIR, leftovers, pid_alive

# No example database: a failure must replay from the printed seed alone, not from a local file,
# and a run must not depend on what an earlier run saved.
hypothesis.settings.register_profile("posenc", database=None, print_blob=True)
hypothesis.settings.load_profile("posenc")

BACKEND_ENV = os.environ.get("POSENC_BACKEND", "") or "auto"
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
# the dispatch levels engine/kernels/native_levels.c compiles (x86-64: all three; elsewhere
# baseline only): a level this CPU lacks is named in the header as not tested
KNOWN_LEVELS = ("avx512", "avx2", "baseline")

HYPOTHESIS_SEED_KEY = pytest.StashKey[int]()
SKIPS_KEY = pytest.StashKey[dict]()
LEVELS_KEY = pytest.StashKey[collections.Counter]()


def _hypothesis_seed(config) -> int:
    """--hypothesis-seed, else POSENC_HYPOTHESIS_SEED, else a new one for this run."""
    pinned = config.getoption("--hypothesis-seed", None) or os.environ.get("POSENC_HYPOTHESIS_SEED")
    if pinned is None or pinned == "":
        return secrets.randbelow(2**32)
    try:
        return int(pinned)
    except ValueError:
        raise pytest.UsageError(f"the hypothesis seed must be an integer, not {pinned!r}") from None


def _worker(config) -> bool:
    """Whether this process is a pytest-xdist worker (pytest -n N): its seed and its findings come
    from and go to the controller (pytest_configure_node, pytest_testnodedown)."""
    return hasattr(config, "workerinput")


def pytest_configure(config):
    config.stash[HYPOTHESIS_SEED_KEY] = (
        config.workerinput["posenc_hypothesis_seed"] if _worker(config) else _hypothesis_seed(config)
    )
    config.stash[SKIPS_KEY] = {"allowed": collections.Counter(), "refused": []}
    config.stash[LEVELS_KEY] = collections.Counter()


def _levels() -> str:
    """The simd backend's dispatch levels this CPU runs (each kernel test runs at every one) and
    the compiled ones it cannot run."""
    try:
        from posenc.engine.kernels import _native
    except ImportError as exc:
        return f"none (engine.kernels._native not built: {exc})"
    runs = list(_native.levels())
    lacks = []
    for name in KNOWN_LEVELS:
        if name in runs:
            continue
        try:
            prev = _native._set_level(name)
            _native._set_level(prev)
        except RuntimeError:  # compiled, not supported by this CPU
            lacks.append(name)
        except ValueError:  # not compiled for this architecture
            pass
    return ", ".join(runs) + (f"; NOT tested, this CPU lacks: {', '.join(lacks)}" if lacks else "")


def pytest_report_header(config):
    try:
        from posenc.engine.kernels import BACKEND
    except Exception as exc:  # the header must never break collection
        BACKEND = f"unavailable ({exc.__class__.__name__})"
    seed = config.stash[HYPOTHESIS_SEED_KEY]
    return [
        f"posenc test seed: POSENC_TEST_SEED={SEED}; kernel backend: {BACKEND}",
        f"posenc hypothesis seed: {seed} (new each run; replay: --hypothesis-seed={seed})",
        f"posenc kernel levels: {_levels()}",
        "posenc skips: "
        + (
            "CI is set: a skip not in tests/allowed_skips.py fails"
            if IN_CI
            else "CI is not set: any skip allowed"
        )
        + f" (POSENC_BACKEND={BACKEND_ENV})",
    ]


def pytest_collection_modifyitems(config, items):
    """Every hypothesis test draws from this run's hypothesis seed (hypothesis.seed), so the seed
    printed in the header and beside a failure replays it; a test may not pick its own randomness.
    The tests of tests/backend_tests.py are marked ``backend`` (the numpy pass runs -m backend)."""
    seed = config.stash[HYPOTHESIS_SEED_KEY]
    prefixes = tuple(prefix for prefix, _ in BACKEND_TESTS)
    for item in items:
        if item.nodeid.startswith(prefixes):
            item.add_marker(pytest.mark.backend)
        fn = getattr(item, "function", None)
        if fn is not None and getattr(fn, "is_hypothesis_test", False):
            hypothesis.seed(seed)(fn)


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def _account_skip(config, report) -> bool:
    """Count a skip; False when CI is set and its reason is not allowed in this pass."""
    reason = _skip_reason(report)
    skips = config.stash[SKIPS_KEY]
    if not IN_CI or allowed_skips.allowed(reason, BACKEND_ENV):
        skips["allowed"][reason] += 1
        return True
    skips["refused"].append((report.nodeid, reason))
    return False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and not _account_skip(item.config, report):
        # under CI a skip nobody allowed is a test that did not run: it fails, saying why
        report.outcome = "failed"
        report.longrepr = (
            f"skipped with CI set, and the reason is not in tests/allowed_skips.py for "
            f"POSENC_BACKEND={BACKEND_ENV}: {_skip_reason(report)}"
        )
    if report.when == "call" and report.passed:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "kern" in params:
            name, level = params["kern"]
            item.config.stash[LEVELS_KEY][name if level is None else f"{name}-{level}"] += 1
    if report.failed:
        report.sections.append(
            (
                "posenc seeds",
                f"POSENC_TEST_SEED={SEED} --hypothesis-seed={item.config.stash[HYPOTHESIS_SEED_KEY]}",
            )
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A module skipped as a whole (a module-level skip or importorskip): counted like a test's
    skip; under CI one not allowed fails the run at its end (tests still run)."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped:
        _account_skip(collector.config, report)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """(pytest-xdist, the controller) every worker draws from the run's one hypothesis seed."""
    node.workerinput["posenc_hypothesis_seed"] = node.config.stash[HYPOTHESIS_SEED_KEY]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """(pytest-xdist, the controller) a worker's skips, kernel levels and leftovers join the run's:
    the summary and the run's status are the controller's."""
    out = getattr(node, "workeroutput", {}).get("posenc")
    if not out:
        return
    config = node.config
    skips = config.stash[SKIPS_KEY]
    skips["allowed"].update(out["allowed"])
    skips["refused"].extend(tuple(r) for r in out["refused"])
    config.stash[LEVELS_KEY].update(out["levels"])
    config.stash.setdefault(WORKERS_LEFT_KEY, {}).update({ns: tuple(v) for ns, v in out["left"].items()})


@pytest.fixture
def rng():
    return np.random.default_rng(SEED)


# -- /dev/shm at the end of the session --------------------------------------------------------
# Only namespaces handed out by this process are looked at: another pytest session's engines on
# the same machine (live or not) are never this run's business.

LEFT_KEY = pytest.StashKey[dict]()
WORKERS_LEFT_KEY = pytest.StashKey[dict]()


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    # {namespace: (its files, the pid in its lock, the test that asked for it)}
    left = {ns: (files, pid, ISSUED[ns]) for ns, (files, pid) in leftovers(list(ISSUED)).items()}
    if _worker(config):  # the controller reports them (pytest_testnodedown)
        skips = config.stash[SKIPS_KEY]
        config.workeroutput["posenc"] = {
            "allowed": dict(skips["allowed"]),
            "refused": skips["refused"],
            "levels": dict(config.stash[LEVELS_KEY]),
            "left": left,
        }
        return
    left.update(config.stash.get(WORKERS_LEFT_KEY, {}))
    config.stash[LEFT_KEY] = left
    refused = config.stash[SKIPS_KEY]["refused"]
    if (left or refused) and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    _summarize_levels_and_skips(terminalreporter, config)
    left = config.stash.get(LEFT_KEY, {})
    if not left:
        return
    terminalreporter.section(f"files left in {SHM_DIR}", sep="=", red=True, bold=True)
    for ns, (files, pid, test) in sorted(left.items()):
        owner = (
            "no pid in a lock"
            if pid is None
            else f"lock pid {pid} {'still running' if pid_alive(pid) else 'dead'}"
        )
        terminalreporter.line(f"{ns} ({owner}), namespace of {test}: {' '.join(files)}", red=True)
    terminalreporter.line(f"{len(left)} namespace(s) left files: the run fails", red=True, bold=True)


def _summarize_levels_and_skips(terminalreporter, config):
    # here as well as in the header, which pytest -q (as .ci/run runs it) does not print
    seed = config.stash[HYPOTHESIS_SEED_KEY]
    terminalreporter.section("posenc seeds", sep="-")
    terminalreporter.line(
        f"hypothesis seed {seed} (replay: --hypothesis-seed={seed}); POSENC_TEST_SEED={SEED}"
    )
    levels = config.stash[LEVELS_KEY]
    if levels:  # the kernel tests (the ``kern`` fixture) ran: at which backend and dispatch level
        terminalreporter.section("posenc kernel levels tested", sep="-")
        terminalreporter.line(
            ", ".join(f"{name}: {n} passed" for name, n in sorted(levels.items()))
            + f" (this CPU: {_levels()})"
        )
    skips = config.stash[SKIPS_KEY]
    if skips["allowed"]:
        terminalreporter.section(
            "posenc skips" + (" (all on tests/allowed_skips.py)" if IN_CI else ""), sep="-"
        )
        for reason, n in skips["allowed"].most_common():
            terminalreporter.line(f"{n:5d}  {reason}")
    if skips["refused"]:
        terminalreporter.section(
            "skips not allowed with CI set (tests/allowed_skips.py)", sep="=", red=True, bold=True
        )
        for nodeid, reason in skips["refused"]:
            terminalreporter.line(f"{nodeid}: {reason}", red=True)
        terminalreporter.line(
            f"{len(skips['refused'])} skip(s) not allowed for POSENC_BACKEND={BACKEND_ENV}: the run fails",
            red=True,
            bold=True,
        )
