"""The request-head limit (settings.max_header_bytes, 64 KiB) on real servers, lane on and off: a
head over it is answered 431 and the connection closed whether it arrives in one write or in
pieces (it used to be answered 200 when the whole head came in one read), and a 60 KiB head is
still answered."""

from __future__ import annotations

import select
import socket

import pytest

from tests.service_cases import CONFIG

BODY = b'{"head_dim": 64, "positions": [1, 2]}'


@pytest.fixture(scope="module", params=["on", "off"])
def srv(request, tmp_path_factory):
    from tests.procs import Procs

    reg = Procs(tmp_path_factory.mktemp(f"head-limit-{request.param}"))
    s = reg.serve(CONFIG, workers=1, args=["--lane", request.param])
    try:
        yield s
    finally:
        assert s.stop() == 0, s.output()
        reg.cleanup()


def request_of(head_kib: int) -> bytes:
    """A JSON rope request whose head (request line to blank line) is ``head_kib`` KiB."""
    start = (
        b"POST /v1/rope HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        % len(BODY)
    )
    pad = head_kib * 1024 - len(start) - len(b"x-pad: \r\n\r\n")
    return start + b"x-pad: " + b"a" * pad + b"\r\n\r\n" + BODY


def exchange(srv, data: bytes, pieces: int) -> bytes:
    """Send ``data`` (in one write, or ``pieces`` writes 20 ms apart); what comes back until the
    server closes (or 10 s)."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as c:
        step = -(-len(data) // pieces)
        try:
            for i in range(0, len(data), step):
                if select.select([c], [], [], 0.02 if pieces > 1 else 0)[0]:
                    break  # answered (and closed) before the rest: sending more would reset it
                c.sendall(data[i : i + step])
            c.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # closed after its 431: read what it answered
        out = b""
        try:
            while chunk := c.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass
        return out


@pytest.mark.parametrize("pieces", [1, 40])
@pytest.mark.parametrize("kib", [65, 100])
def test_a_head_over_64_kib_is_431_and_closed_in_one_write_or_many(srv, kib, pieces):
    reply = exchange(srv, request_of(kib), pieces)
    assert reply.startswith(b"HTTP/1.1 431 "), reply[:200]
    assert reply.count(b"HTTP/1.1 ") == 1 and b"connection: close" in reply, reply[:300]


@pytest.mark.parametrize("pieces", [1, 40])
def test_a_60_kib_head_is_answered(srv, pieces):
    reply = exchange(srv, request_of(60), pieces)
    assert reply.startswith(b"HTTP/1.1 200 "), reply[:200]
    assert reply.count(b"HTTP/1.1 ") == 1


def test_a_too_large_head_pipelined_behind_a_small_request_in_one_write_is_431(srv):
    # the connection is refused at the large head (the request before it may go unanswered)
    reply = exchange(srv, request_of(1) + request_of(100), 1)
    assert reply.count(b"HTTP/1.1 431 ") == 1 and reply.count(b"HTTP/1.1 ") <= 2, reply[:300]
    assert reply.endswith(b"connection: close\r\n\r\n"), reply[-200:]
