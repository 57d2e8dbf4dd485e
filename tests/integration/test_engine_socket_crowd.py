"""The engine's socket (engine/process/socket.py) against a real engine process: a crowd of 500
askers at once all answered (a listen backlog for everyone, and clients that wait for room in it
rather than fail on EAGAIN), lines that are not JSON objects or are too long refused with the
engine unaffected, and a bounded number of threads however many connections are held."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest

from posenc.engine.process import socket as engine_socket
from posenc.engine.reader.client import Client
from posenc.engine.store import segments as store
from tests.integration.engine_cases import SMALL_CONFIG
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
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    took = time.perf_counter() - t0
    print(
        f"{n} concurrent pings: {len(results)} answered, {len(errors)} failed, in {took:.2f} s; "
        f"backlog {engine_socket.BACKLOG}"
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


def test_threads_bounded_while_1200_connections_are_held(engine, ns):
    path = store.socket_path(SHM_DIR, ns)
    base = int(_status(engine.pid)["Threads"])
    held = []
    try:
        for i in range(1200):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            held.append(s)
            s.settimeout(10)
            s.connect(path)
            if i % 3 == 0:
                s.sendall(b'{"op": "pi')  # half a line: the engine waits for the rest
        time.sleep(0.5)
        threads = int(_status(engine.pid)["Threads"])
        fds = len(os.listdir(f"/proc/{engine.pid}/fd"))
        t0 = time.perf_counter()
        assert _ask(path, b'{"op": "ping"}\n')["ok"] is True  # a new asker is answered meanwhile
        ping = time.perf_counter() - t0
        for s in held[:50:3]:  # and the half lines, once finished
            assert _ask(path, b'ng"}\n', s)["ok"] is True
        print(
            f"1200 held connections: engine threads {base} -> {threads}, descriptors {fds}, "
            f"a ping meanwhile {ping * 1e3:.1f} ms"
        )
        assert threads <= base + engine_socket.FAST_THREADS + engine_socket.SLOW_THREADS + 2, (base, threads)
    finally:
        for s in held:
            s.close()
    assert engine.alive()
