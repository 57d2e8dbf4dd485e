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

A refusal is ``{"ok": false, "status", "error"}`` (a SpecError adds ``loc`` and ``msg``). The
socket is the owner's alone (0600), or its group's too (0660) when the engine has one.
"""

from __future__ import annotations

import json
import os
import socketserver
import threading

from . import fdpass, store
from .errors import NotStored, SpecError


def answer(engine, msg: dict) -> dict:
    """The reply to one ask."""
    op = msg.get("op")
    if op == "ping":
        return {"ok": True, "pid": os.getpid(), "generation": engine.generation}
    if op == "stats":
        with engine.lock:
            return {"ok": True, "builds": dict(engine.builds), "generation": engine.generation,
                    "tables": len(engine.tables), "stats": engine.stats.last, "pid": os.getpid()}
    if op == "manifest":
        with engine.lock:
            return {"ok": True, "manifest": engine.manifest()}
    if op == "changes":   # the tables changed since the asker's manifest (docs/shm-format.md)
        with engine.lock:
            return engine.changes_since(msg.get("since"), msg.get("generation"))
    if op == "verify":   # a full check now (a reader found a checksum that does not match)
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


class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        try:
            self._lines()
        except (ConnectionResetError, BrokenPipeError):   # the asker died or gave up
            return

    def _lines(self):
        for line in self.rfile:
            fds = []
            try:
                msg = json.loads(line)
                if isinstance(msg, dict) and msg.get("op") == "open":
                    reply, fds = _open(self.server.engine, msg.get("digests"))
                else:
                    reply = answer(self.server.engine, msg)
            except Exception as e:  # a bad message must not take the engine down
                reply = {"ok": False, "status": 500, "error": f"{type(e).__name__}: {e}"}
            try:
                fdpass.send_line(self.request, reply, fds)
            except (BrokenPipeError, ConnectionResetError):   # the asker died while waiting
                return
            finally:
                fdpass.close_all(fds)


def _open(engine, digests) -> tuple[dict, list[int]]:
    """The reply to ``open`` and the descriptors to attach (duplicates, the caller closes them)."""
    if (not isinstance(digests, list) or len(digests) > fdpass.MAX_FDS
            or not all(isinstance(d, str) for d in digests)):
        return {"ok": False, "status": 400, "error": f"digests must be a list of at most {fdpass.MAX_FDS} strings"}, []
    tables, fds = engine.segment_fds(digests)
    return {"ok": True, "tables": tables, "generation": engine.generation}, fds


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def serve(engine) -> socketserver.BaseServer:
    """Listen on the engine's socket, answering each connection in its own thread; the server
    (its ``shutdown`` and ``server_close`` stop it)."""
    path = store.socket_path(engine.opts.shm_dir, engine.opts.namespace)
    store.unlink(path)
    old = os.umask(0o177 if engine.gid is None else 0o117)
    try:
        server = _Server(path, _Handler)
    finally:
        os.umask(old)
    server.engine = engine
    if engine.gid is not None:
        os.chown(path, -1, engine.gid)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                     daemon=True, name="posenc-socket").start()
    return server
