"""The engine's socket (engine/process/socket.py) against a real engine process: a crowd of 500
askers at once all answered (a listen backlog for everyone, and clients that wait for room in it
rather than fail on EAGAIN), lines that are not JSON objects or are too long refused with the
engine unaffected, and a bounded number of threads however many connections are held."""

from __future__ import annotations

import json
import os
import socket
import threading

import pytest

from posenc.engine.process import socket as engine_socket
from posenc.engine.reader.client import Client
from posenc.engine.store import segments as store
from tests.integration.engine_cases import SMALL_CONFIG
from tests.procs import wait_for
from tests.shm import SHM_DIR

pytestmark = pytest.mark.slow
MIB = 2**20


def _status(pid: int) -> dict:
    with open(f"/proc/{pid}/status") as f:
        return {k: (v.split() or [""])[0] for k, v in (line.split(":", 1) for line in f)}


def _ask(path: str, raw: bytes, sock: socket.socket | None = None) -> dict:
    s = sock or socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if sock is None:
            s.settimeout(10)
            s.connect(path)
        s.sendall(raw)
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(1 << 16)
            if not chunk:
                raise EOFError(data)
            data += chunk
        return json.loads(data)
    finally:
        if sock is None:
            s.close()


@pytest.fixture
def engine(procs, ns):
    return procs.engine(SMALL_CONFIG, ns)


def test_500_concurrent_asks_all_answered(engine, ns):
    n, start = 500, threading.Barrier(500, timeout=60)
    results, errors = [], []

    def one():
        c = Client(SHM_DIR, ns)
        start.wait()
        try:
            results.append(c.call({"op": "ping"}, timeout=30)["ok"])
        except Exception as e:  # (EngineUnavailable: the failure this test is about)
            errors.append(repr(e))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "askers still waiting after 120 s"
    print(
        f"{n} concurrent pings: {len(results)} answered, {len(errors)} failed; backlog {engine_socket.BACKLOG}"
    )
    assert not errors, errors[:5]
    assert results == [True] * n


@pytest.mark.parametrize(
    "line", [b"[]\n", b"5\n", b"null\n", b'"ping"\n', b"garbage\n", b"\xff\xfe\n", b"{\n"]
)
def test_a_line_that_is_not_a_json_object_is_a_400(engine, ns, line):
    path = store.socket_path(SHM_DIR, ns)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(path)
        reply = _ask(path, line, s)
        assert reply["ok"] is False and reply["status"] == 400, reply
        assert _ask(path, b'{"op": "ping"}\n', s)["ok"] is True  # the same connection goes on
    assert engine.alive()


def test_an_oversized_line_is_refused_without_buffering_it(engine, ns):
    path = store.socket_path(SHM_DIR, ns)
    before = int(_status(engine.pid)["VmHWM"]) * 1024
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(path)
        sent, chunk = 0, b"x" * MIB
        try:
            while sent < 256 * MIB:  # 256 MiB without a newline: the old engine buffered all of it
                s.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused and closed after MAX_LINE
        data = b""
        try:
            while not data.endswith(b"\n"):
                got = s.recv(1 << 16)
                if not got:
                    break
                data += got
        except (TimeoutError, ConnectionResetError):
            pass
    grew = int(_status(engine.pid)["VmHWM"]) * 1024 - before
    print(
        f"oversized line: {sent / MIB:.0f} MiB sent before the engine closed; engine peak RSS +{grew / MIB:.1f} MiB; "
        f"reply {data[:120]!r}"
    )
    assert sent < 256 * MIB
    if data:
        reply = json.loads(data)
        assert reply["ok"] is False and reply["status"] == 413, reply
    assert grew < 16 * MIB, grew
    assert _ask(path, b'{"op": "ping"}\n')["ok"] is True
    assert engine.alive()


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_threads_bounded_while_1200_connections_are_held(engine, ns):
    path = store.socket_path(SHM_DIR, ns)
    base = int(_status(engine.pid)["Threads"])
    base_fds = _fds(engine.pid)
    held = []
    try:
        for i in range(1200):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            held.append(s)
            s.settimeout(10)
            s.connect(path)
            if i % 3 == 0:
                s.sendall(b'{"op": "pi')  # half a line: the engine waits for the rest
        # the engine holds every connection (accepted: a descriptor each), not the backlog
        fds = wait_for(
            lambda: (n := _fds(engine.pid)) >= base_fds + 1200 and n,
            60,
            0.01,
            "the engine to accept the 1200 connections",
            seen=lambda: _fds(engine.pid) - base_fds,
        )
        threads = int(_status(engine.pid)["Threads"])
        assert _ask(path, b'{"op": "ping"}\n')["ok"] is True  # a new asker is answered meanwhile
        for s in held[:50:3]:  # and the half lines, once finished
            assert _ask(path, b'ng"}\n', s)["ok"] is True
        print(f"1200 held connections: engine threads {base} -> {threads}, descriptors {fds}")
        assert threads <= base + engine_socket.FAST_THREADS + engine_socket.SLOW_THREADS + 2, (base, threads)
    finally:
        for s in held:
            s.close()
    assert engine.alive()
