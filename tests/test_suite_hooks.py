"""tests/conftest.py's own hooks, run on small test files in a pytest of their own (the conftest
loaded as a plugin): with CI set a skip whose reason is not in tests/allowed_skips.py fails and
an allowed one stays a skip; without CI every skip stays one; the hypothesis seed is new each run
unless pinned, and a pinned seed draws the same examples again."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SKIPS = """
import pytest

def test_needs_root():
    pytest.skip("mounting a tmpfs needs root")

@pytest.mark.skip(reason="POSENC_BACKEND=numpy: only the numpy backend runs")
def test_simd_param():
    pass

def test_runs():
    pass
"""

WHOLE_MODULE = """
import pytest
pytest.importorskip("posenc_no_such_module")

def test_never():
    pass
"""

DRAWS = """
import os
from hypothesis import given, settings, strategies as st

@settings(max_examples=8)
@given(st.integers())
def test_draw(x):
    with open(os.environ["DRAWS"], "a") as f:
        f.write(f"{x} ")
"""


def run(tmp_path: Path, source: str, *args: str, **env: str) -> tuple[int, str]:
    test = tmp_path / "drawn_case.py"  # named on the command line: collected whatever its name
    test.write_text(source)
    base = {
        k: v for k, v in os.environ.items() if k not in ("CI", "POSENC_HYPOTHESIS_SEED", "PYTEST_ADDOPTS")
    }
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            str(tmp_path),
            str(test),
            *args,
        ],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return r.returncode, r.stdout + r.stderr


def test_with_ci_set_a_skip_not_allowed_fails_and_an_allowed_one_stays_a_skip(tmp_path):
    rc, out = run(tmp_path, SKIPS, CI="true", POSENC_BACKEND="numpy")
    assert rc == 1, out
    assert re.search(r"\b1 failed, 1 passed, 1 skipped\b", out), out
    assert "not in tests/allowed_skips.py for POSENC_BACKEND=numpy: mounting a tmpfs needs root" in out, out


def test_an_allowed_reason_is_allowed_only_in_its_own_pass(tmp_path):
    rc, out = run(tmp_path, SKIPS, CI="true", POSENC_BACKEND="simd")
    assert rc == 1, out
    # a skip mark is taken at setup, so there the refused skip is reported as an error
    assert re.search(r"\b1 failed, 1 passed, 1 error\b", out), out
    assert "for POSENC_BACKEND=simd: POSENC_BACKEND=numpy: only the numpy backend runs" in out, out


def test_without_ci_every_skip_stays_a_skip(tmp_path):
    rc, out = run(tmp_path, SKIPS, POSENC_BACKEND="numpy")
    assert rc == 0, out
    assert re.search(r"\b1 passed, 2 skipped\b", out), out


def test_with_ci_set_a_module_skipped_whole_fails_the_run(tmp_path):
    rc, out = run(tmp_path, WHOLE_MODULE, CI="true", POSENC_BACKEND="numpy")
    assert rc == 1, out
    assert "could not import 'posenc_no_such_module'" in out and "the run fails" in out, out
    assert (
        run(tmp_path, WHOLE_MODULE, POSENC_BACKEND="numpy")[0] == pytest.ExitCode.NO_TESTS_COLLECTED
    )  # not failed


def _draws(tmp_path: Path, name: str, *args: str, **env: str) -> tuple[str, str]:
    draws = tmp_path / name
    rc, out = run(tmp_path, DRAWS, *args, DRAWS=str(draws), **env)
    assert rc == 0, out
    seed = re.search(r"hypothesis seed (\d+) \(replay: --hypothesis-seed=\1\)", out)
    assert seed, out
    return seed.group(1), draws.read_text()


def test_the_hypothesis_seed_is_new_each_run_printed_and_pinned_on_request(tmp_path):
    seed_a, draws_a = _draws(tmp_path, "a")
    seed_b, draws_b = _draws(tmp_path, "b")
    assert seed_a != seed_b and draws_a != draws_b  # two runs, two seeds (2^-32 to collide)
    assert _draws(tmp_path, "c", f"--hypothesis-seed={seed_a}") == (seed_a, draws_a)
    assert _draws(tmp_path, "d", POSENC_HYPOTHESIS_SEED=seed_b) == (seed_b, draws_b)
