"""The probe's Python sender: the same open loop as loadtest/_sender.c, for where the C extension
is not built (no compiler, not Linux). One thread, one epoll loop; it holds a few thousand
requests/s from one core (the C sender tens of thousands), and a rate it cannot hold shows as
lateness at the send (``lag``) and, past that, as a step that fell behind.

``run`` returns what the C sender returns: (scheduled, queued, resets, latency, lag, rx, status),
latency/lag/rx int64 nanoseconds per request, status uint16 (0 unanswered, 1 reset/malformed).
"""

from __future__ import annotations

import collections
import select
import socket
import time
from array import array

if hasattr(select, "epoll"):
    _epoll = select.epoll
else:  # gevent (imported by locust) monkey-patched select and hid epoll: take the real one
    from gevent import monkey as _monkey

    _epoll = _monkey.get_original("select", "epoll")

SPIN_NS = 1_200_000  # spin (epoll timeout 0) when the next send is closer than this, else
# sleep in epoll for the whole milliseconds before it (never past it)


class _Conn:
    __slots__ = ("buf", "close_after", "fd", "k", "remaining", "sock", "status")

    def __init__(self, addr):
        self.sock = socket.create_connection(addr)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.fd = self.sock.fileno()
        self.buf = b""
        self.remaining = -1  # -1: reading the head; else body bytes still to come
        self.status = 0
        self.close_after = False
        self.k = -1  # index of the request in flight, -1 when idle

    def feed(self, rbuf: bytearray, n: int) -> int:
        """Take the ``n`` bytes just received into ``rbuf``: 1 when the response is complete, 0 when
        more is due, -1 if malformed. Only the head is copied; the body is only counted."""
        if self.remaining < 0:
            if self.buf:
                data = self.buf + rbuf[:n]
                i, n = data.find(b"\r\n\r\n"), len(data)
            else:
                data = rbuf
                i = rbuf.find(b"\r\n\r\n", 0, n)
            if i < 0:
                self.buf = bytes(data[:n])
                return 0
            head = bytes(data[:i]).lower()
            j = head.find(b"content-length:")
            if j < 0 or not head.startswith(b"http/1."):
                return -1
            e = head.find(b"\r\n", j)
            self.status = int(head[9:12])
            self.close_after = b"\nconnection: close" in head or (
                head.startswith(b"http/1.0") and b"\nconnection: keep-alive" not in head
            )
            self.remaining = int(head[j + 15 : e if e >= 0 else len(head)]) - (n - i - 4)
            self.buf = b""
        else:
            self.remaining -= n
        if self.remaining > 0:
            return 0
        ok = self.remaining == 0
        self.remaining = -1
        return 1 if ok else -1


def run(
    host: str, port: int, requests: list[bytes], rate: float, total: int, hard_stop_s: float, connections: int
):
    addr = (host, port)
    conns = [_Conn(addr) for _ in range(connections)]
    by_fd = {c.fd: c for c in conns}
    ep = _epoll()
    for c in conns:
        ep.register(c.fd, select.EPOLLIN)
    free = collections.deque(conns)
    pending: collections.deque[int] = collections.deque()
    iv = 1e9 / rate
    lat, lag, rx = (array("q", bytes(8 * total)) for _ in range(3))
    status = array("H", bytes(2 * total))
    nreq = len(requests)
    rbuf = bytearray(1 << 20)
    queued = resets = 0
    now_ns = time.perf_counter_ns

    def send(c: _Conn, k: int) -> None:
        c.k = k
        c.sock.sendall(requests[k % nreq])

    def drop(c: _Conn, k: int, failed: bool = True) -> None:
        nonlocal resets
        if failed:
            resets += 1
        if k >= 0:
            status[k] = 1
            lat[k] = now_ns() - t0 - int(k * iv)
        ep.unregister(c.fd)
        del by_fd[c.fd]
        c.sock.close()
        nc = _Conn(addr)  # reconnect (rare: resets, server-closed sockets)
        by_fd[nc.fd] = nc
        ep.register(nc.fd, select.EPOLLIN)
        if pending:
            send(nc, pending.popleft())
        else:
            free.append(nc)

    t0 = now_ns() + 5_000_000  # first send 5 ms from now
    k = done = 0
    hard_stop = t0 + int(hard_stop_s * 1e9)
    poll = ep.poll
    while done < total:
        now = now_ns()
        while k < total:
            tk = t0 + int(k * iv)
            if tk > now:
                break
            lag[k] = now - tk
            if free:
                send(free.popleft(), k)
            else:
                pending.append(k)
                queued += 1
            k += 1
        if now > hard_stop:
            break
        if k < total:
            wait = t0 + int(k * iv) - now
            timeout = (wait - 200_000) // 1_000_000 / 1000 if wait > SPIN_NS else 0
        else:
            timeout = 0.01
        events = poll(timeout)
        t_poll = now_ns()
        for fd, _ev in events:
            c = by_fd.get(fd)
            if c is None:
                continue
            try:
                n = c.sock.recv_into(rbuf)
            except OSError:
                n = 0
            got = c.feed(rbuf, n) if n and c.k >= 0 else -1
            if got == 0:
                continue
            if got < 0:
                if c.k >= 0:
                    done += 1
                drop(c, c.k)
                continue
            t_done = now_ns()
            kk = c.k
            lat[kk] = t_done - t0 - int(kk * iv)
            rx[kk] = t_done - t_poll
            status[kk] = max(1, c.status)
            done += 1
            c.k = -1
            if c.close_after:
                drop(c, -1, failed=False)
            elif pending:
                send(c, pending.popleft())
            else:
                free.append(c)
    ep.close()
    for c in by_fd.values():
        c.sock.close()
    return k, queued, resets, lat.tobytes(), lag.tobytes(), rx.tobytes(), status.tobytes()
