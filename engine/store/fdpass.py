"""JSON messages with descriptors attached (``SCM_RIGHTS``) over Unix sockets: how the engine hands
its sealed segments to readers (engine/process/socket.py) and to ``posenc serve``'s keeper
(engine/process/keeper.py). Python's ``socket.send_fds``/``recv_fds`` do the passing; this module frames
them: on a stream socket a message is one JSON line whose descriptors ride on its first byte; on a
``SOCK_SEQPACKET`` socket it is one packet.
"""

from __future__ import annotations

import json
import os
import socket

MAX_FDS = 250  # descriptors in one message (the kernel's SCM_MAX_FD is 253)
MAX_PACKET = 1 << 20  # the largest keeper message (one manifest entry and its descriptor)


def close_all(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _private(fds: list[int]) -> list[int]:
    """Received descriptors are not handed on to child processes (recvmsg sets no close-on-exec)."""
    for fd in fds:
        os.set_inheritable(fd, False)
    return fds


def send_line(sock: socket.socket, msg: dict, fds=()) -> None:
    """One JSON line on a stream socket, ``fds`` attached to its first byte."""
    data = json.dumps(msg).encode() + b"\n"
    if fds:
        sent = socket.send_fds(sock, [data], list(fds))
        data = data[sent:]
    if data:
        sock.sendall(data)


def recv_line(sock: socket.socket) -> tuple[dict, list[int]]:
    """One JSON line from a stream socket and every descriptor that came with it (the caller
    closes them). EOFError when the peer closed before a whole line."""
    data, fds = b"", []
    while not data.endswith(b"\n"):
        chunk, got, flags, _ = socket.recv_fds(sock, 1 << 16, MAX_FDS)
        fds += _private(got)
        if flags & socket.MSG_CTRUNC:  # (never with MAX_FDS a message: the sender is not ours)
            close_all(fds)
            raise EOFError("descriptors were cut off")
        if not chunk:
            close_all(fds)
            raise EOFError("the connection closed mid-message")
        data += chunk
    return json.loads(data), fds


def send_packet(sock: socket.socket, msg: dict, fd: int | None = None) -> None:
    """One JSON packet on a SOCK_SEQPACKET socket, with at most one descriptor."""
    data = json.dumps(msg).encode()
    if fd is None:
        sock.sendall(data)
    else:
        socket.send_fds(sock, [data], [fd])


def recv_packet(sock: socket.socket) -> tuple[dict | None, int | None]:
    """One packet: (its JSON, its descriptor or None); (None, None) at end of stream."""
    data, fds, _, _ = socket.recv_fds(sock, MAX_PACKET, 1)
    fds = _private(fds)
    if not data:
        close_all(fds)
        return None, None
    return json.loads(data), (fds[0] if fds else None)
