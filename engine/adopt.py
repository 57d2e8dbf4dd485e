"""A restarting engine adopts the tables its dead predecessor left with the keeper, instead of
building them again.

When an engine dies (kill -9, OOM), workers keep answering from their mappings, and ``posenc
serve``'s keeper (engine/keeper.py) still holds a descriptor of every table it had published. The
next engine takes them over (``KeeperLink.take``) and keeps each one that is provably the table its
entry names:

- the tables were built by engine code whose table-building source is byte-for-byte this
  process's (engine/built_by.py: a digest of the registered families' modules and every engine
  module they import, kernels and dtype rounding among them, so an upgrade never serves a
  predecessor's tables);
- the entry's key re-validates (``TableDef.from_key``; a configured table's is the config's, already
  validated) to the same digest, length and dtype (the same code lays a table out the same way);
- the descriptor is a sealed segment of the recorded size (store.check_sealed). Sealed, its bytes
  cannot have changed since the dead engine checksummed and sealed them, so nothing is read
  again: adoption costs the same for 2 GiB of tables as for 2 MiB.

What fails a check is closed (the keeper is told to drop it); every file the namespace left in
``shm_dir`` (the old manifest, socket, temporaries) is removed; the old manifest stays until the new
engine publishes its own (a new generation). Configured tables that were adopted take the new
config's name, spec and pin; adopted on-demand tables stay unpinned, most recently used first,
within the memory budget. ``posenc engine`` run alone has no keeper: nothing to adopt.
"""

from __future__ import annotations

import os
import time

from . import built_by, fdpass, store
from .errors import SpecError
from .tables import TableDef


def workers() -> int:
    """Threads for builds and checks: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:   # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def why_not(digest: str, e: dict, fd: int, t: TableDef | None = None) -> tuple[str | None, TableDef | None]:
    """(why this held table cannot be adopted or None, its TableDef); ``t``: the configured table
    of that digest, already validated (its key is not parsed again)."""
    try:
        if t is None or t.length != e["length"] or t.key != e["key"]:
            t = TableDef.from_key(e["key"], int(e["length"]))
        if t.digest != digest or t.length != e["length"] or t.dtype != e.get("dtype"):
            return "its key does not match its entry", None
    except (SpecError, KeyError, TypeError, ValueError) as exc:
        return f"its entry is not valid ({exc})", None
    why = store.check_sealed(fd, e["nbytes"])
    return (f"its segment is {why}", None) if why else (None, t)


def adopt(eng, log) -> dict:
    """Take over the intact tables the keeper held into ``eng.tables``/``eng.fds``, and remove every
    file of the namespace (but the lock, and the old manifest until publish). Returns {adopted,
    bytes, dropped: {segment: why}, seconds}."""
    t0 = time.perf_counter()
    shm_dir, ns = eng.opts.shm_dir, eng.opts.namespace
    try:
        old = store.read_manifest(shm_dir, ns) or {}
    except (ValueError, OSError, RuntimeError):
        old = {}
    old_code, held = eng.keeper.take(built_by.current())
    configured = {ct.table.digest: ct for ct in eng.configured}
    keep, dropped = [], {}
    for digest, e, fd in sorted(held, key=lambda h: -h[1].get("last_used", 0) if isinstance(h[1], dict) else 0):
        ct = configured.get(digest)
        why, t = (why_not(digest, e, fd, ct and ct.table) if old_code == built_by.current() and isinstance(e, dict)
                  else ("other table code built it", None))
        if why is None and ct is not None and ct.table.length != t.length:
            why = f"the config now sizes it {ct.table.length}"
        if why is None and ct is None and e["nbytes"] > eng.opts.memory_budget_bytes - sum(
                k[1]["nbytes"] for k in keep if k[3] is None):
            why = "the memory budget is full"
        if why is not None:
            dropped[str(e.get("file") if isinstance(e, dict) else digest)] = why
            fdpass.close_all([fd])
            eng.keeper.drop(digest)
            continue
        keep.append((digest, e, t, ct, fd))
    for digest, e, t, ct, fd in keep:
        entry = {**e, "pinned": ct is not None, "adopted": True}
        entry.pop("spec", None)
        if ct is not None:
            entry.update(name=ct.name, spec=ct.spec)
        elif e.get("pinned"):   # configured before, not now: an on-demand table from here on
            entry["name"] = t.family
        eng.tables[digest], eng.fds[digest], eng.defs[digest] = entry, fd, t
    removed = [p for p in store.our_files(shm_dir, ns)
               if p not in (store.lock_path(shm_dir, ns), store.manifest_path(shm_dir, ns))]
    for p in removed:
        store.unlink(p)
    report = {"adopted": len(eng.tables), "bytes": sum(e["nbytes"] for e in eng.tables.values()),
              "dropped": dropped, "seconds": time.perf_counter() - t0}
    if held or removed:
        log(f"adopted {report['adopted']} table(s), {report['bytes'] / 2**20:.1f} MiB, left by a dead engine "
            f"(pid {old.get('pid', '?')}) in {report['seconds']:.3f}s; removed {len(removed)} other file(s)"
            + "".join(f"; {f}: {w}" for f, w in sorted(report["dropped"].items())[:8]))
    return report
