"""The load test's commands as a user meets them: without the ``loadtest`` extra both ways in
(``posenc loadtest`` and ``python -m posenc.loadtest``) say what to install instead of a
traceback; the report names the posenc that ran (its version, and its commit only where it ran
from a checkout, never the commit of whatever repository the current directory is in)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from posenc.loadtest import runner
from posenc.loadtest.reports import summary as report

ROOT = Path(__file__).resolve().parents[2]

# the extra's modules made unimportable in a fresh interpreter (an import of a name that maps to
# None in sys.modules raises ImportError, as a module that is not installed does)
WITHOUT = (
    "import runpy, sys; sys.modules[{mod!r}] = None; sys.argv = {argv!r}; "
    "runpy.run_module({run!r}, run_name='__main__')"
)


@pytest.mark.parametrize("mod", ["hdrh", "locust", "matplotlib"])
@pytest.mark.parametrize(
    "run, argv",
    [
        ("posenc.loadtest", ["python -m posenc.loadtest", "--help"]),
        ("posenc.loadtest", ["python -m posenc.loadtest", "report"]),
        ("posenc", ["posenc", "loadtest", "--seconds", "1"]),
        ("posenc", ["posenc", "loadtest", "--help"]),
    ],
)
def test_without_the_extra_both_commands_say_what_to_install(mod, run, argv):
    """Any one of the extra's modules missing: a line naming it and the pip command, status 1,
    before anything starts (no server, no traceback)."""
    code = WITHOUT.format(mod=mod, argv=argv, run=run)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert (
        r.stderr.strip()
        == f"{argv[0]}: needs the 'loadtest' extra ({mod} is not installed): pip install 'posenc[loadtest]'"
        or (run == "posenc" and f"({mod} is not installed)" in r.stderr and "Traceback" not in r.stderr)
    ), r.stderr[-2000:]


def test_the_report_names_the_version_and_the_checkouts_commit():
    m = runner.machine_info()
    from importlib.metadata import version

    assert m["version"] == version("posenc")
    want = subprocess.run(
        ["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--abbrev=12"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert m["commit"] == want  # the suite runs from an editable install of this checkout
    assert f"posenc {m['version']} (commit {want})" in report._build(m)
    assert report._build({}) == "posenc version unknown"  # a results.json from before: no "commit ?"


def test_a_copy_outside_a_checkout_names_no_commit_even_from_inside_another_repository(tmp_path):
    """As from a wheel: the package's files are not a checkout's, and the current directory being
    a git repository (this one) must not lend its commit."""
    shutil.copytree(
        ROOT / "loadtest", tmp_path / "loadtest", ignore=shutil.ignore_patterns("*.so", "__pycache__")
    )
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import loadtest.runner as r; "
        "print(repr(r._commit()), repr(r._version()))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    commit, version = r.stdout.split()
    assert commit == "''" and version != "''", r.stdout
