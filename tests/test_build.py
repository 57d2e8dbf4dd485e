"""The C extensions setup.py builds are there and current: in the simd pass and whenever
``CI`` is set, a missing or stale _native, _hot, _sender or (where libnghttp2's header is) _h2
fails here, rather than quietly turning
hundreds of tests into skips. A plain build swallows a compile error (the extensions are
optional, so that an install without a compiler still works); .ci/run builds with
POSENC_WERROR=1, where an extension that fails to build, or warns, fails the install.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# each extension -> the files its build reads (setup.py's sources and depends, by folder)
EXTENSIONS = {
    "posenc.engine.kernels._native": ("engine/kernels/*.c", "engine/kernels/*.h"),
    "posenc.service.shortcut._hot": (
        "service/shortcut/*.c",
        "service/shortcut/*.h",
        "service/shortcut/vendor/**/*.c",
        "service/shortcut/vendor/**/*.h",
        "engine/kernels/alibi_cell.h",
        "engine/kernels/native_api.h",
        "engine/kernels/row_gather.h",
    ),
    "posenc.loadtest._sender": ("loadtest/_sender.c",),
}
# built where libnghttp2's header is (setup.py): .ci/run installs it, so CI requires it like the rest
if Path("/usr/include/nghttp2/nghttp2.h").exists():
    EXTENSIONS["posenc.service.grpclane._h2"] = ("service/grpclane/*.c", "service/grpclane/*.h")
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
REQUIRED = IN_CI or os.environ.get("POSENC_BACKEND") == "simd"


@pytest.mark.skipif(not REQUIRED, reason="the build is checked in the simd pass and when CI is set")
@pytest.mark.parametrize("name", sorted(EXTENSIONS))
def test_extension_is_built_from_the_current_sources(name):
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        pytest.fail(
            f"{name} is not built ({exc}); a plain build hides why: POSENC_WERROR=1 pip install -e . shows it"
        )
    built = Path(module.__file__)
    assert built.suffix in (".so", ".pyd"), f"{name} is not a compiled extension: {built}"
    sources = sorted({p for pattern in EXTENSIONS[name] for p in ROOT.glob(pattern)})
    assert sources, f"no sources of {name} under {ROOT}: the patterns above are stale"
    if not built.is_relative_to(ROOT):
        return  # a regular install: its sources are not beside it to compare with
    newer = [str(p.relative_to(ROOT)) for p in sources if p.stat().st_mtime > built.stat().st_mtime]
    assert not newer, (
        f"{built.relative_to(ROOT)} is older than {', '.join(newer)}: rebuild it "
        "(pip install -e . or python setup.py build_ext --inplace)"
    )


def test_every_package_folder_is_installed():
    """A plain ``pip install .`` installs every package of the checkout: pyproject.toml lists its
    packages by name (the editable install maps whole folders and would not notice one missing,
    while an installed posenc would fail to import it)."""
    import tomllib

    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(tool["packages"])
    found = set()
    for name, folder in tool["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *rel.parts]))
    missing = sorted(found - listed)
    assert not missing, f"folders with an __init__.py that pyproject.toml's packages lacks: {missing}"
    stale = sorted(listed - found)
    assert not stale, f"pyproject.toml lists packages with no folder: {stale}"
