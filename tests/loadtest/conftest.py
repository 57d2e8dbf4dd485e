"""Fixtures of the load test's tests: the integration tests' own (a namespace and a process
registry per test, /dev/shm checked empty after each, the shared ``posenc serve``), one set of
definitions in tests/integration/conftest.py."""

from tests.integration.conftest import no_leftovers, ns, procs, server  # noqa: F401
