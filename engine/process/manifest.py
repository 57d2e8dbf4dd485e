"""What the engine publishes of its tables (docs/shm-format.md): the manifest's head file, the
table log (one line per change, rewritten whole once it holds twice the lines it needs), the
sequence number of every change, and the socket's ``manifest`` and ``changes`` replies built from
them. ``ManifestLog`` is a part of core.Engine: it reads the engine's tables, options and
lock, and the engine calls ``_note`` on every table it publishes, replaces or drops.
"""

from __future__ import annotations

import collections
import logging
import os

import orjson

from .. import kernels
from ..store import segments as store
from . import built_by, logs, upkeep

_log = logging.getLogger("posenc.engine")
CHANGES_KEPT = 4096  # changes remembered past one per table (``changes``: older asks get a reset)
MAX_CHANGES = 250  # entries one ``changes`` reply carries at most (more: a reset, then ``manifest``)
NOT_WRITTEN_LOG_S = 60.0  # "manifest not rewritten" (a full shm_dir) is logged once per this at most


def write_log(
    shm_dir: str, namespace: str, generation, seq: int, tables: dict, stats=None, *, mode=0o600, gid=None
) -> int:
    """Write a new table log holding ``tables`` at ``seq`` (replacing any by rename): its descriptor,
    open for appending (the engine's ``_note`` appends to it), the caller's to close."""
    return store.write_file(
        store.log_path(shm_dir, namespace),
        store.log_snapshot(generation, seq, tables, stats),
        mode,
        gid,
        keep_open=True,
    )


def write_head(shm_dir: str, namespace: str, head: dict, *, mode=0o600, gid=None) -> None:
    """Write the manifest's head file (replacing any by rename); after its table log, whose
    generation it names."""
    store.write_file(store.manifest_path(shm_dir, namespace), orjson.dumps(head), mode, gid)


class ManifestLog:
    """The manifest part of core.Engine (its attributes are the engine's own)."""

    def _init_manifest(self, tables) -> None:
        # the manifest's sequence number: one more per table published, replaced or dropped
        # (docs/shm-format.md); digest -> the number of its last change, oldest first (dropped
        # tables too, until CHANGES_KEPT past one per table); asks older than floor get a reset
        self.seq, self.floor, self.named_seq = 0, 0, 0
        self.changes: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._configured_digests = {c.table.digest for c in tables}
        self._log_fd: int | None = None  # the table log, appended to (O_APPEND)
        self._log_lines = 0
        self.published = False  # no manifest until every configured table is built
        # every change and every tick retries a manifest that could not be written: one line a minute
        self._not_written_log = logs.Throttled(_log.info, NOT_WRITTEN_LOG_S)

    def publish(self) -> None:
        """The first manifest, written last: after every configured table is built and the socket
        is up, so a reader never sees a half-ready engine nor asks it to build a configured table.
        With no room for the file, readers take the manifest from the socket (engine/reader/client.py)
        and the file is written once there is room."""
        with self.lock:
            self.published = True
            self._write_manifest()

    def head(self) -> dict:
        """The manifest less its tables (the caller holds the lock): the head file's content.
        ``named`` lists every configured table by name, stored or not (a table that did not fit is
        still answered by name: computed)."""
        return {
            "format": store.MANIFEST_FORMAT,
            "namespace": self.opts.namespace,
            "pid": os.getpid(),
            "generation": self.generation,
            "socket": os.path.basename(self._p(store.socket_path)),
            "log": os.path.basename(self._p(store.log_path)),
            "backend": kernels.info(),
            "budget": self.opts.memory_budget_bytes,
            "on_demand_length": self.opts.length,
            "built_by": built_by.current(),
            "stats": self.stats.last,
            "named": [
                {
                    "name": c.name,
                    "family": c.table.family,
                    "spec": c.spec,
                    "digest": c.table.digest,
                    "stored": c.table.digest in self.tables,
                }
                for c in self.configured
            ],
        }

    def manifest(self) -> dict:
        """The whole manifest (the caller holds the lock): what the socket's ``manifest`` answers,
        at sequence number ``seq``."""
        return {**self.head(), "tables": self.tables, "seq": self.seq}

    def changes_since(self, since, generation) -> dict:
        """The reply to ``changes`` (the caller holds the lock): every table changed after sequence
        number ``since`` of ``generation`` ({digest: entry, or None: dropped}), and ``named`` when
        it changed; a reset (ask ``manifest``) when the asker's manifest is of another engine,
        older than what is remembered, or more than MAX_CHANGES behind. Costs the changes, not
        the tables."""
        out = {"ok": True, "generation": self.generation, "seq": self.seq}
        if type(since) is not int or generation != self.generation or not self.floor <= since <= self.seq:
            return {**out, "reset": True}
        got = {}
        for digest in reversed(self.changes):
            if self.changes[digest] <= since:
                break
            if len(got) == MAX_CHANGES:
                return {**out, "reset": True}
            got[digest] = self.tables.get(digest)
        out["tables"] = got
        if self.named_seq > since:
            out["named"] = self.head()["named"]
        return out

    def _note(self, digest: str) -> None:
        """Record a change of ``digest``'s table (published, replaced or dropped; the caller holds
        the lock): a sequence number, its build or eviction counted, one line appended to the table
        log, and the head rewritten only when a configured table's ``stored`` changed. Whatever the
        number of tables, this costs the same (the log is written anew, by rename, once it holds
        twice the lines it needs: amortized one line per change)."""
        self.seq += 1
        self.changes[digest] = self.seq
        self.changes.move_to_end(digest)
        while len(self.changes) > len(self.tables) + CHANGES_KEPT:
            _, s = self.changes.popitem(last=False)
            self.floor = max(self.floor, s)
        entry = self.tables.get(digest)
        self.stats.noted(digest, entry)
        named = digest in self._configured_digests
        if named:
            self.named_seq = self.seq
        if not self.published:
            return
        if self._manifest_pending or self._log_fd is None or self._log_lines > 2 * len(self.tables) + 1024:
            return self._write_manifest()
        try:
            if os.fstat(self._log_fd).st_nlink == 0:  # unlinked (or replaced) by someone else: write it anew
                return self._write_manifest()
            store.write_all(self._log_fd, store.log_line(self.seq, digest, entry, self.stats.last))
            self._log_lines += 1
            if named:
                write_head(self.opts.shm_dir, self.opts.namespace, self.head(), mode=self.mode, gid=self.gid)
        except OSError as e:
            self._not_written(e)

    def _write_manifest(self) -> None:
        """Write the head and a new table log holding every table (the caller holds the lock): at
        publish, and when the log has grown to twice its tables. With no room for them, the change
        is kept and written by the main loop once there is."""
        self.stats.update(self.tables)
        try:
            self._manifest_pending = False
            shm_dir, namespace = self.opts.shm_dir, self.opts.namespace
            fd = write_log(
                shm_dir,
                namespace,
                self.generation,
                self.seq,
                self.tables,
                self.stats.last,
                mode=self.mode,
                gid=self.gid,
            )
            if self._log_fd is not None:
                os.close(self._log_fd)
            self._log_fd, self._log_lines = fd, len(self.tables) + 2
            write_head(shm_dir, namespace, self.head(), mode=self.mode, gid=self.gid)
        except OSError as e:
            self._not_written(e)

    def _not_written(self, e: OSError) -> None:
        if not upkeep.is_resource_error(e):
            raise e
        self._not_written_log(f"manifest not rewritten ({e}); retried while the engine runs")
        self._manifest_pending = True

    _manifest_pending = False
