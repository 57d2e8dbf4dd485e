"""The keeper: a process that holds the engine's sealed segments so that an engine that dies
(kill -9, OOM) is followed by one that adopts them instead of building them again.

A sealed segment lives while a descriptor or a mapping of it does (engine/store/segments.py). The engine
holds one descriptor per table; when it dies they close, and only readers' mappings keep the
memory (serving on, but no new engine can reach it). ``posenc serve`` therefore keeps a second
descriptor of each table in its own process, which outlives the engine it restarts:

- ``Keeper`` (in ``posenc serve``): ``channel()`` makes a ``SOCK_SEQPACKET`` socket pair for each
  engine it starts (the engine gets one end, ``--keeper-fd``); on it the keeper first hands over
  every table it holds (``held`` packets of up to HELD_BATCH tables, their manifest entries and
  descriptors: 2,000 tables in 32 packets, not 2,000, since a restart waits for them; then
  ``end``), then holds what the engine reports: ``keep`` (a published table and its descriptor)
  and ``drop`` (an evicted or replaced one: its descriptor closes).
- ``KeeperLink`` (in the engine): ``take()`` receives what the keeper holds (for adopt.py), then
  ``keep``/``drop`` report each change. A keeper that went away is noticed once and ignored.

``posenc engine`` run alone has no keeper: its tables die with it (readers keep what they mapped),
and the next engine builds them.
"""

from __future__ import annotations

import socket
import threading

import orjson

from ..store import fdpass
from . import proclife

HELD_BATCH = 64  # tables per ``held`` packet at most (their entries, ~1 KB each, and descriptors)
HELD_BYTES = 64 << 10  # and entries' bytes (a packet stays well inside the socket's send buffer)
DRAIN_S = 5.0  # a new channel waits this long at most for a dead engine's reports to be taken


class Keeper:
    def __init__(self):
        # one descriptor per table, in a process that also serves (with one worker, uvicorn's
        # worker is this process): at most half of what it may open; a table past that is not
        # kept (after a crash, its engine builds it again)
        self.max_held = max(0, proclife.descriptors() // 2 - 64)
        self.lock = threading.Lock()
        self.held: dict[str, tuple[dict, int]] = {}  # digest -> (manifest entry, descriptor)
        self.built_by: str | None = None
        self._serving: list[threading.Thread] = []  # the channels' threads, the dead engines' too

    def channel(self) -> socket.socket:
        """A channel for a new engine: returns the engine's end (inheritable; the caller passes
        it and closes it once the engine started). The keeper's end is served in a thread.

        The engines before it are dead (the caller starts one only then), but their last
        ``keep`` and ``drop`` packets may still wait in their channels, unread: what the new
        engine is handed is taken only once each earlier channel's thread has read its channel
        to the end (at most DRAIN_S each), else the tables a dying engine published last would
        be missing from the handover (not adopted: built again)."""
        for t in self._serving:
            t.join(DRAIN_S)
        self._serving = []  # (one still reading, its channel's end held elsewhere, is waited for once)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        theirs.set_inheritable(True)
        t = threading.Thread(target=self._serve, args=(ours,), daemon=True, name="posenc-keeper")
        t.start()
        self._serving.append(t)
        return theirs

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            try:
                with self.lock:
                    held = list(self.held.items())
                    built_by = self.built_by
                batch, size = [], 0
                for k, (digest, (entry, fd)) in enumerate(held):
                    batch.append((digest, entry, fd))
                    size += len(orjson.dumps(entry))
                    if len(batch) == HELD_BATCH or size > HELD_BYTES or k == len(held) - 1:
                        socket.send_fds(
                            sock,
                            [orjson.dumps({"op": "held", "tables": [[d, e] for d, e, _ in batch]})],
                            [fd for _, _, fd in batch],
                        )
                        batch, size = [], 0
                fdpass.send_packet(sock, {"op": "end", "built_by": built_by})
                while True:
                    msg, fd = fdpass.recv_packet(sock)
                    if msg is None:
                        return
                    self._take(msg, fd)
            except OSError:  # the engine died: what it reported stays held for the next one
                return

    def _take(self, msg: dict, fd: int | None) -> None:
        op, digest = msg.get("op"), msg.get("digest")
        with self.lock:
            if op == "built_by":
                self.built_by = msg.get("value")
            elif op == "keep" and fd is not None and (digest in self.held or len(self.held) < self.max_held):
                old = self.held.pop(digest, None)
                self.held[digest] = (msg.get("entry") or {}, fd)
                fd = None
                if old is not None:
                    fdpass.close_all([old[1]])
            elif op == "drop":
                old = self.held.pop(digest, None)
                if old is not None:
                    fdpass.close_all([old[1]])
        if fd is not None:
            fdpass.close_all([fd])

    def tables(self) -> int:
        with self.lock:
            return len(self.held)

    def close(self) -> None:
        with self.lock:
            fdpass.close_all(fd for _, fd in self.held.values())
            self.held.clear()


class KeeperLink:
    """The engine's end of its keeper's channel (or none: every call does nothing)."""

    def __init__(self, fd: int | None):
        self.sock = socket.socket(fileno=fd) if fd is not None else None

    def take(self, built_by: str) -> tuple[str | None, list[tuple[str, dict, int]]]:
        """What the keeper holds: (the code digest that built it, [(digest, entry, descriptor)]);
        the descriptors are the caller's. Then tells the keeper which code builds from now on."""
        got: list[tuple[str, dict, int]] = []
        if self.sock is None:
            return None, got
        try:
            while True:
                data, fds, _, _ = socket.recv_fds(self.sock, fdpass.MAX_PACKET, HELD_BATCH)
                fds = fdpass._private(fds)
                msg = orjson.loads(data) if data else None
                if msg is None or msg.get("op") == "end":
                    fdpass.close_all(fds)
                    old = msg and msg.get("built_by")
                    break
                tables = msg.get("tables") if msg.get("op") == "held" else None
                if not isinstance(tables, list) or len(tables) != len(fds):
                    fdpass.close_all(fds)  # not what the keeper sends: nothing of it is adopted
                    continue
                got += [(d, e, fd) for (d, e), fd in zip(tables, fds)]
            self._send({"op": "built_by", "value": built_by})
            return old, got
        except (OSError, ValueError, KeyError, TypeError):
            fdpass.close_all(fd for _, _, fd in got)
            self._lost()
            return None, []

    def keep(self, digest: str, entry: dict, fd: int) -> None:
        self._send({"op": "keep", "digest": digest, "entry": entry}, fd)

    def drop(self, digest: str) -> None:
        self._send({"op": "drop", "digest": digest})

    def _send(self, msg: dict, fd: int | None = None) -> None:
        if self.sock is None:
            return
        try:
            fdpass.send_packet(self.sock, msg, fd)
        except OSError:
            self._lost()

    def _lost(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def close(self) -> None:
        self._lost()
