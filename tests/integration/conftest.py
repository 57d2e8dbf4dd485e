"""Fixtures of the integration tests: a namespace and a process registry per test (whatever a
test leaves running is stopped, and its namespace must be empty in /dev/shm afterwards), and one
``posenc serve`` shared by the served-HTTP tests."""

from __future__ import annotations

import contextlib
import os
import subprocess

import httpx
import pytest

from tests.procs import Procs, unique_namespace
from tests.service_cases import CONFIG
from tests.shm import SHM_DIR, remove_leftovers, shm_files


@pytest.fixture
def ns():
    return unique_namespace()


@pytest.fixture
def procs(tmp_path):
    reg = Procs(tmp_path / "procs")
    yield reg
    reg.cleanup()


@pytest.fixture(autouse=True)
def no_leftovers(ns, procs):
    """After every test: stop what it left running (by pid), then /dev/shm holds nothing of ns."""
    yield
    stray = procs.cleanup()
    left = remove_leftovers(ns)
    assert not left, f"namespace {ns} left {left} in {SHM_DIR} (stray processes stopped: {stray})"


@contextlib.contextmanager
def stopped_cleanly(reg: Procs, s):
    """Yield the server ``s``; then stop it: exit status 0 and nothing left in /dev/shm."""
    try:
        yield s
    finally:
        rc = s.stop()
        reg.cleanup()
        assert rc == 0, s.output()
        assert shm_files(s.namespace) == [], "shared memory left behind after SIGTERM"


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """``posenc serve`` with 2 workers and its engine holding CONFIG; stopped cleanly at the end."""
    reg = Procs(tmp_path_factory.mktemp("serve"))
    with stopped_cleanly(reg, reg.serve(CONFIG, workers=2)) as s:
        yield s


@pytest.fixture(scope="session")
def http(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


@pytest.fixture(scope="session")
def v2server(tmp_path_factory):
    """``posenc serve`` with its gRPC server (KServe v2), 2 HTTP workers, holding V2_CONFIG's named
    tables; ready on both ports; stopped cleanly at the end."""
    from tests.integration.kserve_cases import V2_CONFIG, wait_grpc_ready

    reg = Procs(tmp_path_factory.mktemp("v2serve"))
    with stopped_cleanly(reg, reg.serve(V2_CONFIG, workers=2, grpc=True)) as s:
        wait_grpc_ready(s)
        yield s


@pytest.fixture(scope="module")
def clients(v2server):
    """{"rest", "grpc", "http"} clients of ``v2server`` (kserve_cases.clients_of), one set per
    test module. test_kserve_shm.py and test_kserve_shortcut.py define their own: per test, with
    the shared-memory registry emptied after it; of ``server``."""
    from tests.integration.kserve_cases import clients_of

    with clients_of(v2server) as c:
        yield c


@pytest.fixture
def small_shm(tmp_path, procs):
    """A 64 MiB tmpfs of its own for the test (root only), unmounted after whatever ran on it stopped."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    d = tmp_path / "shm"
    d.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m,mode=1777", "tmpfs", str(d)], capture_output=True, text=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield str(d)
    finally:
        procs.cleanup()  # whatever runs on it stops before it goes
        subprocess.run(["umount", "-l", str(d)], check=False)
