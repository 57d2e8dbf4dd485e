"""Fixtures of the engine tests: ``kern``, each kernel backend in turn (tests/engine/kernel_helpers.py)."""

from tests.engine.kernel_helpers import kern  # noqa: F401  (a fixture, registered by this import)
