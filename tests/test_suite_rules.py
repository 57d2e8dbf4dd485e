"""The suite's own rules, held by tests:

- no test waits by sleeping: every ``time.sleep`` / ``asyncio.sleep`` under tests/ (child programs
  and helpers included; benchmarks, which pace load, excepted) is on SLEEPS_ALLOWED with why; a wait
  for a state is tests/waits.py ``wait_for``, which fails naming what it waited for;
- every test has a timeout (pytest-timeout, pyproject's ``timeout``), and none turns it off;
- every entry of tests/backend_tests.py (what the numpy pass runs again) names a test that exists.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.backend_tests import BACKEND_TESTS

TESTS = Path(__file__).resolve().parent

# (file under tests/, enclosing function) -> why it sleeps: pacing on purpose, never waiting for a state
SLEEPS_ALLOWED: dict[tuple[str, str], str] = {
    ("waits.py", "wait_for"): "the poll interval of the one wait helper",
    ("children/reader.py", "loop"): "a reader's rounds, paced until its stop file appears",
    (
        "integration/test_engine_restart_ready.py",
        "test_an_engine_killed_again_soon_after_its_restart_is_restarted_at_once",
    ): "serve's crash loop is defined by time: each kill comes CRASH_S after the engine was seen up",
    ("integration/test_lane.py", "exchange"): "a pause so that a body arrives in two reads",
    ("integration/test_lane_fuzz.py", "exchange"): "a pause so that each split piece is its own read",
    (
        "integration/test_harden_requests.py",
        "test_slow_headers_cannot_keep_a_connection",
    ): "a slowloris sender: one byte every 50 ms",
    ("integration/test_keepalive_soak.py", "_client"): "the soak's idle gaps, to meet the keep-alive expiry",
    ("integration/test_harden_life.py", "long_one"): "a slow reader, so its answer is in flight at SIGTERM",
    (
        "loadtest/test_loadtest_probe.py",
        "_conn",
    ): "the deliberately slow server under the load test, 20 ms an answer",
}


def _sleeps(path: Path) -> list[tuple[str, int]]:
    """(enclosing function, line) of each call to a function named sleep in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, func: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = func
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = child.name
            if isinstance(child, ast.Call):
                f = child.func
                called = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if called == "sleep":
                    found.append((func, child.lineno))
            visit(child, name)

    visit(tree, "<module>")
    return found


def test_no_test_waits_by_sleeping():
    bad, used = [], set()
    for path in sorted(TESTS.rglob("*.py")):
        rel = path.relative_to(TESTS).as_posix()
        if rel.startswith("bench/"):
            continue
        for func, line in _sleeps(path):
            if (rel, func) in SLEEPS_ALLOWED:
                used.add((rel, func))
            else:
                bad.append(f"tests/{rel}:{line} in {func}()")
    assert not bad, (
        "a sleep outside tests/test_suite_rules.py SLEEPS_ALLOWED: wait for the state instead "
        "(tests/waits.py wait_for), or list it with why it paces on purpose:\n" + "\n".join(bad)
    )
    stale = set(SLEEPS_ALLOWED) - used
    assert not stale, f"SLEEPS_ALLOWED lists sleeps that are gone: {sorted(stale)}"


def test_every_test_has_a_timeout(pytestconfig):
    assert pytestconfig.pluginmanager.hasplugin("timeout"), "pytest-timeout is not loaded (the test extra)"
    assert float(pytestconfig.getini("timeout")) > 0, "pyproject sets no per-test timeout"
    off = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "timeout"
                and isinstance(node.func.value, ast.Attribute)
                and node.func.value.attr == "mark"
            ):
                first = node.args[0] if node.args else None
                if not isinstance(first, ast.Constant) or not first.value or first.value > 900:
                    off.append(f"{path.relative_to(TESTS)}:{node.lineno}")
    assert not off, f"a test's timeout is off or over 15 minutes: {off}"


def test_the_sleep_scan_finds_a_sleep(tmp_path):
    """The scan itself: a sleep in a test function, as a method, and under an alias, is found."""
    p = tmp_path / "t.py"
    p.write_text(
        "import time, asyncio\nfrom time import sleep\n"
        "def test_a():\n    time.sleep(1)\n"
        "async def test_b():\n    await asyncio.sleep(0)\n"
        "def test_c():\n    sleep(2)\n"
    )
    assert _sleeps(p) == [("test_a", 4), ("test_b", 6), ("test_c", 8)]


def test_every_backend_entry_names_a_test():
    missing = []
    for prefix, _ in BACKEND_TESTS:
        path, _, func = prefix.partition("::")
        file = TESTS.parent / path
        if not file.is_file():
            missing.append(prefix)
        elif func and not any(
            isinstance(n, ast.FunctionDef) and n.name == func for n in ast.parse(file.read_text()).body
        ):
            missing.append(prefix)
    assert not missing, f"tests/backend_tests.py names tests that do not exist: {missing}"
