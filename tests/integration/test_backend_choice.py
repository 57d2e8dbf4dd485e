"""The kernel backend is chosen once, at import, by POSENC_BACKEND (auto|numpy|simd): checked in
fresh interpreters (tests/children/backend_info.py), since a process keeps its first choice."""

from __future__ import annotations

from tests.engine.kernel_helpers import _native
from tests.procs import CHILDREN, PYTHON, child_env


def _import_in_subprocess(procs, backend: str):
    return procs.run([PYTHON, CHILDREN / "backend_info.py"], env=child_env({"POSENC_BACKEND": backend}))


def test_backend_bogus_is_refused_at_import(procs):
    p = _import_in_subprocess(procs, "bogus")
    assert p.returncode != 0
    assert "ConfigError" in p.stderr and "POSENC_BACKEND" in p.stderr and "bogus" in p.stderr


def test_backend_numpy_forced(procs):
    p = _import_in_subprocess(procs, "numpy")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[0] == "numpy"


def test_backend_simd_forced(procs):
    p = _import_in_subprocess(procs, "simd")
    if _native is None:
        assert p.returncode != 0 and "not built" in p.stderr, p.stderr
    else:
        assert p.returncode == 0, p.stderr
        backend, feats = p.stdout.split()[:2]
        assert backend == "simd" and feats  # x86-64: avx2,f16c or sse2; aarch64: neon
