"""A restarting engine adopts the tables its dead predecessor left with the keeper, instead of
building them again.

When an engine dies (kill -9, OOM), workers keep answering from their mappings, and ``posenc
serve``'s keeper (engine/process/keeper.py) still holds a descriptor of every table it had published. The
next engine takes them over (``KeeperLink.take``) and keeps each one that is provably the table its
entry names:

- the tables were built by engine code whose table-building source is byte-for-byte this
  process's (engine/process/built_by.py: a digest of the registered families' modules and every engine
  module they import, kernels and dtype rounding among them, so an upgrade never serves a
  predecessor's tables);
- the entry's key is bound to it: its SHA-1 is the digest, it names the entry's family and dtype,
  and a configured table's key is the config's, already validated. The key itself was validated
  by the same table code when the dead engine built it (the check above), so its full
  re-validation (``TableDef.from_key``, a spec parse per table: most of adoption's time at 2,000
  tables) waits until the table must be rebuilt (``AdoptedDefs``: a repair after a checksum
  mismatch); a key that fails it then is dropped, not rebuilt;
- the descriptor is a sealed segment of the recorded size (store.check_sealed). Sealed, its bytes
  cannot have changed since the dead engine checksummed and sealed them, so nothing is read
  again: adoption costs the same for 2 GiB of tables as for 2 MiB.

What fails a check is closed (the keeper is told to drop it); every file the namespace left in
``shm_dir`` (socket, temporaries) is removed; the old manifest (head and table log) stays until the
new engine publishes its own (a new generation). Configured tables that were adopted take the new
config's name, spec and pin; adopted on-demand tables stay unpinned, most recently used first,
within the memory budget. ``posenc engine`` run alone has no keeper: nothing to adopt.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

from ..core.errors import SpecError
from ..store import fdpass
from ..store import segments as store
from ..tables import TableDef
from . import built_by


def workers() -> int:
    """Threads for builds and checks: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class AdoptedDefs(dict):
    """``Engine.defs`` (digest -> the TableDef a table was built from, for repairs) where an
    adopted on-demand table's entry is (key, length) until a repair asks for it: then re-validated
    (``TableDef.from_key``) to the same digest, length and dtype, or None (not rebuilt)."""

    def get(self, digest, default=None):
        v = super().get(digest, default)
        if isinstance(v, tuple):
            key, length, dtype = v
            try:
                t = TableDef.from_key(key, length)
                v = t if (t.digest, t.length, t.dtype) == (digest, length, dtype) else None
            except (SpecError, KeyError, TypeError, ValueError):
                v = None
            self[digest] = v
        return v


def bound(digest: str, e: dict) -> str | None:
    """Why the entry's key does not name it (None: it does): the key hashes to the digest (as
    ``TableDef.digest``) and names the entry's family and dtype; its length is a positive integer."""
    key, length = e["key"], e["length"]
    if type(key) is not str or type(length) is not int or length < 1 or type(e["nbytes"]) is not int:
        return "its entry is not valid"
    if hashlib.sha1(key.encode()).hexdigest()[:20] != digest:
        return "its key does not match its entry"
    obj = json.loads(key)
    if obj["table"]["family"] != e["family"] or obj["dtype"] != e.get("dtype"):
        return "its key does not match its entry"
    return None


def why_not(
    digest: str, e: dict, fd: int, t: TableDef | None = None
) -> tuple[str | None, TableDef | tuple | None]:
    """(why this held table cannot be adopted or None, its TableDef, or (key, length, dtype) for
    ``AdoptedDefs`` to re-validate if it is ever rebuilt); ``t``: the configured table of that
    digest, already validated."""
    try:
        why = bound(digest, e)
        if why is not None:
            return why, None
        if t is not None and (t.length != e["length"] or t.key != e["key"] or t.dtype != e.get("dtype")):
            t = None  # configured otherwise now: the caller compares lengths
        got = t if t is not None else (e["key"], e["length"], e.get("dtype"))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return f"its entry is not valid ({type(exc).__name__}: {exc})", None
    why = store.check_sealed(fd, e["nbytes"])
    return (f"its segment is {why}", None) if why else (None, got)


def adopt(eng, log) -> dict:
    """Take over the intact tables the keeper held into ``eng.tables``/``eng.fds``, and remove every
    file of the namespace (but the lock, and the old manifest's two files until publish). Returns {adopted,
    bytes, dropped: {segment: why}, seconds}."""
    t0 = time.perf_counter()
    shm_dir, ns = eng.opts.shm_dir, eng.opts.namespace
    try:
        old = store.read_head(shm_dir, ns) or {}
    except (ValueError, OSError, RuntimeError):
        old = {}
    old_code, held = eng.keeper.take(built_by.current())
    configured = {ct.table.digest: ct for ct in eng.configured}
    keep, dropped, on_demand = [], {}, 0  # on_demand: bytes of the unpinned tables kept so far
    for digest, e, fd in sorted(
        held, key=lambda h: -h[1].get("last_used", 0) if isinstance(h[1], dict) else 0
    ):
        ct = configured.get(digest)
        why, t = (
            why_not(digest, e, fd, ct and ct.table)
            if old_code == built_by.current() and isinstance(e, dict)
            else ("other table code built it", None)
        )
        if why is None and ct is not None and ct.table.length != e["length"]:
            why = f"the config now sizes it {ct.table.length}"
        if why is None and ct is None and e["nbytes"] > eng.opts.memory_budget_bytes - on_demand:
            why = "the memory budget is full"
        if why is not None:
            dropped[str(e.get("file") if isinstance(e, dict) else digest)] = why
            fdpass.close_all([fd])
            eng.keeper.drop(digest)
            continue
        keep.append((digest, e, t, ct, fd))
        on_demand += e["nbytes"] if ct is None else 0
    for digest, e, t, ct, fd in keep:
        entry = {**e, "pinned": ct is not None, "adopted": True}
        entry.pop("spec", None)
        if ct is not None:
            entry.update(name=ct.name, spec=ct.spec)
        elif e.get("pinned"):  # configured before, not now: an on-demand table from here on
            entry["name"] = e["family"]
        eng.tables[digest], eng.fds[digest], eng.defs[digest] = entry, fd, t
    removed = [
        p
        for p in store.our_files(shm_dir, ns)
        if p
        not in (store.lock_path(shm_dir, ns), store.manifest_path(shm_dir, ns), store.log_path(shm_dir, ns))
    ]
    for p in removed:
        store.unlink(p)
    report = {
        "adopted": len(eng.tables),
        "bytes": sum(e["nbytes"] for e in eng.tables.values()),
        "dropped": dropped,
        "seconds": time.perf_counter() - t0,
    }
    if held or removed:
        log(
            f"adopted {report['adopted']} table(s), {report['bytes'] / 2**20:.1f} MiB, left by a dead engine "
            f"(pid {old.get('pid', '?')}) in {report['seconds']:.3f}s; removed {len(removed)} other file(s)"
            + "".join(f"; {f}: {w}" for f, w in sorted(report["dropped"].items())[:8])
        )
    return report
