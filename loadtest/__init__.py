"""Load tests for posenc: locust user classes for the real traffic mix, an open-loop
microsecond latency probe, a raw ASGI floor to measure the probe against, and one command that
runs them all and writes a report. See docs/loadtest.md.

    python -m posenc.loadtest report
"""

from importlib.util import find_spec

# the modules of the ``loadtest`` extra (pyproject.toml): locust's users, the probe's histograms,
# the report's plot
EXTRA_MODULES = ("locust", "hdrh", "matplotlib")


def missing_module() -> str | None:
    """The first module of the extra that is not installed (None: all are), found without
    importing any (importing locust patches the standard library)."""
    return next((m for m in EXTRA_MODULES if find_spec(m) is None), None)


def missing_extra(prog: str, module: str) -> str:
    """What ``prog`` says when the ``loadtest`` extra is not installed (``posenc loadtest`` and
    ``python -m posenc.loadtest`` alike): the missing module and the command that installs it."""
    return f"{prog}: needs the 'loadtest' extra ({module} is not installed): pip install 'posenc[loadtest]'"
