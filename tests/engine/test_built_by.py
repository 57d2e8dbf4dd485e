"""The code digest a restarting engine compares before it adopts a dead engine's tables
(engine/process/built_by.py) follows the registry: a family added to ``FAMILIES`` changes it, and so does
an edit of any module a family's numbers come from."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from posenc.engine.process import built_by
from posenc.engine.tables import FAMILIES

ENGINE = Path(built_by.__file__).parents[1]  # engine/ (built_by.py is engine/process/built_by.py)


def _load(path: Path, name: str):
    """The module at ``path`` under ``name``, importable by name (its folder is on sys.path) but
    left out of sys.modules."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sources_are_the_families_and_every_engine_module_they_import():
    files = {Path(p) for p in built_by.sources()}
    for fam in FAMILIES.values():
        assert Path(sys.modules[type(fam).__module__].__file__) in files, fam.name
    # a family's helper, the kernels, the rounding and the selections come in through imports
    for rel in (
        "tables/__init__.py",
        "tables/base.py",
        "tables/rope_types.py",
        "kernels/__init__.py",
        "kernels/numpy_impl.py",
        "core/dtypes.py",
        "core/selection.py",
    ):
        assert ENGINE / rel in files, rel
    # what only stores, serves or runs tables is not part of it
    for rel in (
        "process/adopt.py",
        "store/segments.py",
        "reader/client.py",
        "process/core.py",
        "process/built_by.py",
    ):
        assert ENGINE / rel not in files, rel
    native = importlib.util.find_spec("posenc.engine.kernels._native")
    assert (native is not None) == any(p.name.startswith("_native.") for p in files)


def test_a_family_added_to_the_registry_changes_the_digest(tmp_path, monkeypatch):
    assert built_by.current() == built_by.digest()
    before = built_by.digest()
    source = tmp_path / "posenc_extra_family.py"
    source.write_text(
        "from posenc.engine.tables.rope import Rope\n\n\n"
        "class Extra(Rope):\n    name = 'rope-extra'\n\n\nFAMILY = Extra()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    extra = _load(source, "posenc_extra_family")
    monkeypatch.setitem(FAMILIES, extra.FAMILY.name, extra.FAMILY)

    added = built_by.digest()
    assert added != before
    assert str(source) in built_by.sources()
    source.write_text(source.read_text() + "# an edit of the new family's module\n")
    assert built_by.digest() not in (before, added)

    monkeypatch.delitem(FAMILIES, extra.FAMILY.name)
    assert built_by.digest() == before
