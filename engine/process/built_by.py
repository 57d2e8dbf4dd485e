"""Which code built a table: a digest of the source that decides a table's bytes, written into
the manifest (``built_by``) so that a restarting engine adopts only tables its own code would
have built byte for byte (engine/process/adopt.py).

The source is derived from the registry, not listed by hand: a family added to ``FAMILIES``
counts from its first line, and so does every engine module it imports.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util

from .. import kernels, tables

ENGINE_PACKAGE = __name__.rsplit(".", 2)[0]  # posenc.engine (this is posenc.engine.process.built_by)


def _spec(name: str):
    """The import spec of module ``name``; None when it is no module (a name defined in one)."""
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _ours(name: str) -> bool:
    return name == ENGINE_PACKAGE or name.startswith(ENGINE_PACKAGE + ".")


def _statements(body: list):
    """Every statement in ``body``, nested ones (in functions, classes, branches) too."""
    for node in body:
        yield node
        for field in ("body", "orelse", "handlers", "finalbody", "cases"):
            yield from _statements(getattr(node, field, ()))


def _engine_imports(path: str, package: str) -> set[str]:
    """The posenc.engine modules that the source at ``path`` (of a module in ``package``) imports,
    wherever the import statement stands. ``from pkg import name`` is ``pkg.name`` when that is a
    module, else ``pkg``."""
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), path)
    found = set()
    for node in _statements(tree.body):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if _ours(alias.name)}
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            if _ours(base):
                found |= {
                    f"{base}.{alias.name}" if _spec(f"{base}.{alias.name}") else base for alias in node.names
                }
    return found


def sources() -> list[str]:
    """The files whose bytes decide a table's bytes: the module of every registered family's class
    (and of its base classes), and every posenc.engine module those import, all the way down (the
    registry, each family's helpers, the kernels, the dtype rounding, the selections, the spec
    parsing), plus the C kernels' binary where it is built."""
    todo = {tables.__name__} | {
        cls.__module__ for fam in tables.FAMILIES.values() for cls in type(fam).__mro__
    }
    files: dict[str, str] = {}
    while todo:
        name = todo.pop()
        spec = _spec(name)
        if spec is None or not spec.has_location:  # builtins (object)
            continue
        files[name] = spec.origin
        if spec.origin.endswith(".py"):
            todo |= _engine_imports(spec.origin, spec.parent) - files.keys()
    native = _spec(f"{kernels.__name__}._native")
    if native is not None and native.origin:
        files[native.name] = native.origin
    return [files[name] for name in sorted(files)]


def digest() -> str:
    """A digest of ``sources()`` as they are now: two engines whose digests match build every
    table to the same bytes."""
    h = hashlib.sha1()
    for path in sources():
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:20]


@functools.cache
def current() -> str:
    """This process's ``digest``, computed once, when the engine first needs it (the registry does
    not change while it runs; the CLI and readers never pay for it)."""
    return digest()
