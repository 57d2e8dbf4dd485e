"""The engine's Unix socket ``{ns}.sock``: readers send one JSON object a line and get one back.

    {"op": "ping"}                        -> {"ok": true, "pid", "generation"}
    {"op": "stats"}                       -> {"ok": true, "builds": {digest: n}, "generation", "tables"}
    {"op": "verify"}                      -> {"ok": true, ...the sweep's report} (a full check now)
    {"op": "ensure", "table": KEY, "reach": N}
                                          -> {"ok": true, "digest", "length", "generation"}
    {"op": "manifest"}                    -> {"ok": true, "manifest": {...}} (what readers trust,
                                             not the file, which anyone of the same user can write)
    {"op": "changes", "since": S, "generation": G}
                                          -> {"ok": true, "generation", "seq", "tables": {D: entry
                                             or null}, ["named"]}: what changed after S, or
                                             {"ok": true, "reset": true, ...}: ask "manifest"
    {"op": "open", "digests": [D, ...]}   -> {"ok": true, "tables": {D: entry, ...}, "generation"}
                                             with one descriptor per table, in that order, attached
                                             (SCM_RIGHTS; at most fdpass.MAX_FDS digests an ask)

A refusal is ``{"ok": false, "status", "error"}`` (a SpecError adds ``loc`` and ``msg``); a line
that is not JSON, or JSON but not an object, gets status 400, and one over MAX_LINE bytes status
413 (then the connection is closed: nothing more of it is buffered). The socket is the owner's
alone (0600), or its group's too (0660) when the engine has one. One selector thread holds every
connection and two bounded pools answer (``_Server``): the engine's threads do not grow with its
connections, and its listen backlog (BACKLOG) takes every worker, gRPC process and reader at once.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ..core.errors import NotStored, SpecError
from ..store import fdpass
from ..store import segments as store

# Every worker, gRPC process and reader may connect at once: the kernel caps this at
# net.core.somaxconn (4096 on current kernels)
BACKLOG = max(1024, socket.SOMAXCONN)
MAX_LINE = 1 << 20  # bytes of one ask (a table key with a longrope factor list is well under)
MAX_CONNECTIONS = 16384  # connections held at once (past it a new one is closed at once)
FAST_THREADS = 4  # ping, stats, manifest, open: answered at once
SLOW_THREADS = 16  # ensure, verify: may wait for a build or a sweep
ACCEPT_PAUSE_S = 0.05  # accepting pauses this long when the engine has no descriptor left
SEND_TIMEOUT_S = 10.0  # a reply the asker does not read within this is dropped with its connection


def answer(engine, msg: dict) -> dict:
    """The reply to one ask."""
    op = msg.get("op")
    if op == "ping":
        return {"ok": True, "pid": os.getpid(), "generation": engine.generation}
    if op == "stats":
        with engine.lock:
            return {
                "ok": True,
                "builds": dict(engine.builds),
                "generation": engine.generation,
                "tables": len(engine.tables),
                "stats": engine.stats.last,
                "pid": os.getpid(),
            }
    if op == "manifest":
        with engine.lock:
            return {"ok": True, "manifest": engine.manifest()}
    if op == "changes":  # the tables changed since the asker's manifest (docs/shm-format.md)
        with engine.lock:
            return engine.changes_since(msg.get("since"), msg.get("generation"))
    if op == "verify":  # a full check now (a reader found a checksum that does not match)
        return {"ok": True, **engine.sweep.run(checksum=True)}
    if op == "ensure":
        try:
            digest, entry = engine.ensure(msg.get("table"), msg.get("reach"))
            return {"ok": True, "digest": digest, "length": entry["length"], "generation": engine.generation}
        except SpecError as e:
            return {"ok": False, "status": 422, "error": str(e), "loc": list(e.loc), "msg": e.msg}
        except NotStored as e:
            return {"ok": False, "status": NotStored.status, "error": str(e)}
    return {"ok": False, "status": 400, "error": f"unknown op {op!r}"}


def reply_to(engine, line: bytes) -> tuple[dict, list[int]]:
    """The reply to one line and the descriptors to attach (the caller closes them): a line that
    is not JSON, or JSON but not an object, is a 400, never an exception."""
    try:
        msg = json.loads(line)
    except ValueError as e:  # (UnicodeDecodeError included)
        return {"ok": False, "status": 400, "error": f"not a JSON line: {e}"}, []
    if not isinstance(msg, dict):
        return {"ok": False, "status": 400, "error": f"an ask is a JSON object, got {type(msg).__name__}"}, []
    try:
        if msg.get("op") == "open":
            return _open(engine, msg.get("digests"))
        return answer(engine, msg), []
    except Exception as e:  # a bad message must not take the engine down
        return {"ok": False, "status": 500, "error": f"{type(e).__name__}: {e}"}, []


def _open(engine, digests) -> tuple[dict, list[int]]:
    """The reply to ``open`` and the descriptors to attach (duplicates, the caller closes them)."""
    if (
        not isinstance(digests, list)
        or len(digests) > fdpass.MAX_FDS
        or not all(isinstance(d, str) for d in digests)
    ):
        return {
            "ok": False,
            "status": 400,
            "error": f"digests must be a list of at most {fdpass.MAX_FDS} strings",
        }, []
    tables, fds = engine.segment_fds(digests)
    return {"ok": True, "tables": tables, "generation": engine.generation}, fds


class _Conn:
    __slots__ = ("sock", "buf")

    def __init__(self, sock: socket.socket):
        self.sock, self.buf = sock, b""


class _Server:
    """One selector thread accepts every connection and reads its lines (at most MAX_LINE bytes
    each); a whole line is answered by a bounded pool: ``ensure`` and ``verify`` (which may wait
    for a build or a sweep) by SLOW_THREADS, everything else by FAST_THREADS, so a crowd of
    builds never holds up a ping or a manifest. A connection is not read while its line is
    answered (one ask at a time, answers in order); its reply is sent by the pool thread."""

    def __init__(self, path: str, engine):
        self.engine = engine
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(BACKLOG)
        self.sock.setblocking(False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.sock, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._back: list[_Conn] = []  # connections answered, to be read again
        self._back_lock = threading.Lock()
        self._fast = ThreadPoolExecutor(FAST_THREADS, thread_name_prefix="posenc-socket-ask")
        self._slow = ThreadPoolExecutor(SLOW_THREADS, thread_name_prefix="posenc-socket-build")
        self._conns: set[_Conn] = set()
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._accept_at: float | None = None  # accepting paused (no descriptor left) until then

    # -- the selector thread --------------------------------------------------------------------
    def serve_forever(self, poll_interval: float = 0.2) -> None:
        try:
            while not self._stop.is_set():
                if self._accept_at is not None and time.monotonic() >= self._accept_at:
                    self._accept_at = None
                    self.sel.register(self.sock, selectors.EVENT_READ, None)
                wait = poll_interval if self._accept_at is None else min(poll_interval, ACCEPT_PAUSE_S)
                for key, _ in self.sel.select(wait):
                    if key.data is None:
                        self._accept()
                    elif key.data == "wake":
                        self._woken()
                    else:
                        self._read(key.data)
        finally:
            self._stopped.set()

    def _accept(self) -> None:
        for _ in range(256):  # a burst at once, then the others get their turn
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # EMFILE and the like: accepting pauses (the askers wait in the backlog)
                self._pause_accept()
                return
            if len(self._conns) >= MAX_CONNECTIONS:
                sock.close()
                continue
            sock.setblocking(False)
            c = _Conn(sock)
            self._conns.add(c)
            self.sel.register(sock, selectors.EVENT_READ, c)

    def _pause_accept(self) -> None:
        """No descriptor left: stop watching the listening socket for ACCEPT_PAUSE_S (else its
        pending connections would wake the loop at once, again and again)."""
        self._unwatch_sock(self.sock)
        self._accept_at = time.monotonic() + ACCEPT_PAUSE_S

    def _unwatch_sock(self, sock) -> None:
        try:
            self.sel.unregister(sock)
        except (KeyError, ValueError):
            pass

    def _read(self, c: _Conn) -> None:
        try:
            chunk = c.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:  # the asker closed (or reset) its end
            self._close(c)
            return
        c.buf += chunk
        self._next(c)

    def _next(self, c: _Conn) -> None:
        """Hand ``c``'s next whole line to a pool (then ``c`` is not read until it is answered), or
        refuse a line past MAX_LINE, or wait for more."""
        end = c.buf.find(b"\n")
        if end < 0:
            if len(c.buf) > MAX_LINE:
                self._unwatch(c)
                self._fast.submit(self._refuse, c)
            return
        if end > MAX_LINE:
            self._unwatch(c)
            self._fast.submit(self._refuse, c)
            return
        line, c.buf = c.buf[: end + 1], c.buf[end + 1 :]
        self._unwatch(c)
        slow = b'"ensure"' in line or b'"verify"' in line
        (self._slow if slow else self._fast).submit(self._answer, c, line)

    def _unwatch(self, c: _Conn) -> None:
        self._unwatch_sock(c.sock)

    def _woken(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        with self._back_lock:
            back, self._back = self._back, []
        for c in back:
            if c.sock.fileno() < 0:  # refused or dropped: closed by the pool thread
                self._conns.discard(c)
                continue
            try:
                self.sel.register(c.sock, selectors.EVENT_READ, c)
            except (KeyError, ValueError, OSError):
                self._close(c)
                continue
            self._next(c)  # a line that came with the last one

    def _close(self, c: _Conn) -> None:
        self._unwatch(c)
        self._conns.discard(c)
        try:
            c.sock.close()
        except OSError:
            pass

    # -- pool threads ---------------------------------------------------------------------------
    def _send(self, c: _Conn, reply: dict, fds) -> bool:
        try:
            c.sock.settimeout(SEND_TIMEOUT_S)  # an asker that does not read cannot hold a thread
            fdpass.send_line(c.sock, reply, fds)
            c.sock.setblocking(False)
            return True
        except OSError:  # the asker died while waiting, or stopped reading
            return False

    def _answer(self, c: _Conn, line: bytes) -> None:
        reply, fds = reply_to(self.engine, line)
        try:
            ok = self._send(c, reply, fds)
        finally:
            fdpass.close_all(fds)
        self._hand_back(c, ok)

    def _refuse(self, c: _Conn) -> None:
        self._send(c, {"ok": False, "status": 413, "error": f"a line over {MAX_LINE} bytes"}, ())
        self._hand_back(c, False)  # the rest of that line cannot be told from a next one: closed

    def _hand_back(self, c: _Conn, keep: bool) -> None:
        if not keep:
            c.buf = b""
            try:
                c.sock.close()
            except OSError:
                pass
        with self._back_lock:
            self._back.append(c)
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, OSError):  # a wake-up is pending already (or we are closing)
            pass

    # -- what the engine calls ------------------------------------------------------------------
    def shutdown(self) -> None:
        self._stop.set()
        self._stopped.wait(5.0)

    def server_close(self) -> None:
        self._fast.shutdown(wait=False, cancel_futures=True)
        self._slow.shutdown(wait=False, cancel_futures=True)
        for c in list(self._conns):
            self._close(c)
        for s in (self.sock, self._wake_r, self._wake_w):
            try:
                s.close()
            except OSError:
                pass
        self.sel.close()


def serve(engine) -> _Server:
    """Listen on the engine's socket, answering every connection from one selector thread and
    two bounded pools; the server (its ``shutdown`` and ``server_close`` stop it)."""
    path = store.socket_path(engine.opts.shm_dir, engine.opts.namespace)
    store.unlink(path)
    old = os.umask(0o177 if engine.gid is None else 0o117)
    try:
        server = _Server(path, engine)
    finally:
        os.umask(old)
    if engine.gid is not None:
        os.chown(path, -1, engine.gid)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True, name="posenc-socket"
    ).start()
    return server
