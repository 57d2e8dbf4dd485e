"""What the installed package puts on sys.path: one top-level package, ``posenc``. The generic
folder names of the checkout (engine/, service/, loadtest/) must not be importable from anywhere
else, or a user's own ``service`` module would silently collide with ours."""

from __future__ import annotations

import pytest

from tests.procs import PYTHON, child_env


def _python(procs, tmp_path, code: str):
    """The suite's interpreter (the venv's), started in an empty directory outside the checkout,
    without PYTHONPATH: only what is installed can be imported."""
    env = {k: v for k, v in child_env().items() if k != "PYTHONPATH"}
    return procs.run([PYTHON, "-c", code], env=env, cwd=tmp_path)


@pytest.mark.parametrize("name", ["engine", "service", "loadtest"])
def test_generic_top_level_names_are_not_installed(procs, tmp_path, name):
    p = _python(procs, tmp_path, f"import {name}")
    assert p.returncode != 0 and f"No module named '{name}'" in p.stderr, (p.returncode, p.stderr)


def test_the_posenc_namespace_is_installed(procs, tmp_path):
    p = _python(
        procs,
        tmp_path,
        "import posenc.engine, posenc.service, posenc.loadtest, posenc.cli; "
        "print(posenc.engine.__name__, posenc.service.__name__)",
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["posenc.engine", "posenc.service"]
