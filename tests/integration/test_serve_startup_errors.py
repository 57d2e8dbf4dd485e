"""``posenc serve`` refusing to start: each failure exits non-zero with one line on stderr that
says what to change (a flag), and no traceback. The real command, as a user runs it."""

from __future__ import annotations

import socket

import pytest

from tests.procs import Procs, free_port, unique_namespace


@pytest.fixture
def run(tmp_path):
    procs = Procs(tmp_path)

    def serve(*args, timeout=90.0):
        return procs.posenc(
            "serve",
            "--workers",
            "1",
            "--log-level",
            "warning",
            "--namespace",
            unique_namespace(),
            *args,
            timeout=timeout,
        )

    yield serve
    procs.cleanup()


def refused(p, *words: str) -> str:
    """The one line it printed last, checked: non-zero exit, no traceback, ``words`` in it."""
    assert p.returncode not in (0, None), (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    line = p.stderr.strip().splitlines()[-1]
    for w in words:
        assert w in line, (w, line)
    return line


@pytest.fixture
def taken():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_a_grpc_port_in_use_exits_non_zero_naming_grpc_port(run, taken):
    p = run("--port", str(free_port()), "--grpc-port", str(taken))
    refused(p, "gRPC", str(taken), "in use", "--grpc-port")


def test_an_http_port_in_use_exits_non_zero_naming_port(run, taken):
    p = run("--port", str(taken), "--grpc-port", "0")
    refused(p, str(taken), "in use", "--port")


def test_a_namespace_with_a_dot_is_a_config_error_not_a_traceback(run):
    p = run("--port", str(free_port()), "--grpc-port", "0", "--namespace", "team.a")
    refused(p, "--namespace", "'team.a'")


@pytest.mark.parametrize("content", [None, '{"x":', '{"rope": 5}'])
def test_bad_tables_exit_non_zero_naming_the_file(run, tmp_path, content):
    path = tmp_path / "tables.json"
    if content is not None:
        path.write_text(content)
    p = run("--port", str(free_port()), "--grpc-port", "0", "--tables", str(path))
    refused(p, "--tables", str(path))


def test_tls_files_that_do_not_load_exit_non_zero_naming_the_flags(run, tmp_path):
    bad = tmp_path / "cert.pem"
    bad.write_text("not a certificate\n")
    p = run("--port", str(free_port()), "--grpc-port", "0", "--tls-cert", str(bad), "--tls-key", str(bad))
    refused(p, "--tls-cert", str(bad), "cannot load")


def test_an_unusable_shm_dir_exits_non_zero_naming_shm_dir(run, tmp_path):
    f = tmp_path / "a-file"
    f.write_text("")
    p = run("--port", str(free_port()), "--grpc-port", "0", "--shm-dir", str(f / "shm"))
    refused(p, "--shm-dir", str(f / "shm"))


def test_a_host_that_cannot_be_bound_exits_non_zero_naming_host(run):
    p = run("--port", str(free_port()), "--grpc-port", "0", "--host", "192.0.2.1")
    refused(p, "192.0.2.1", "--host")
