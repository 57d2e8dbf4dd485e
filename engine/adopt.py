"""A restarting engine adopts what its dead predecessor left intact, instead of building it again.

When an engine dies (kill -9, OOM), its segments and manifest stay in ``shm_dir``; workers keep
answering from their mappings. The next engine to take the namespace's lock reads the dead one's
manifest and keeps every segment that is provably the table its entry names:

- the manifest has this format, and was written by engine code whose table-building source is
  byte-for-byte this process's (engine/built_by.py: a digest of the registered families' modules
  and every engine module they import, kernels and dtype rounding among them, so an upgrade never
  serves a predecessor's tables);
- the entry's key re-validates (``TableDef.from_key``) to the same digest and length, and the
  layout it records is the one this code would write;
- the file is there, the same inode, a regular read-only file of ours, of the recorded size, and
  its crc32 matches (every byte read: the checks run in parallel threads; zlib releases the GIL).

Everything else the namespace holds (temporaries, segments that fail a check or that the new
config sizes differently, the dead engine's socket) is removed. The old manifest stays until the
new engine publishes its own (a new generation), so readers keep finding the adopted tables
meanwhile. Configured tables that were adopted take the new config's name, spec and pin; adopted
on-demand tables stay unpinned, most recently used first, within the memory budget.
"""

from __future__ import annotations

import os
import stat
import time
from concurrent.futures import ThreadPoolExecutor

from . import built_by, store
from .errors import SpecError
from .tables import TableDef


def workers() -> int:
    """Threads for builds and checks: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:   # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def why_not(shm_dir: str, digest: str, e: dict) -> tuple[str | None, TableDef | None]:
    """(why this manifest entry's segment cannot be adopted or None, its TableDef)."""
    try:
        t = TableDef.from_key(e["key"], int(e["length"]))
        if t.digest != digest or t.length != e["length"] or t.dtype != e.get("dtype"):
            return "its key does not match its entry", None
        arrays, size = store.plan(t.layout())
        if arrays != e["arrays"] or size != e["nbytes"]:
            return "its layout is not this version's", None
        st = os.stat(os.path.join(shm_dir, e["file"]), follow_symlinks=False)
    except FileNotFoundError:
        return "its file is gone", None
    except (SpecError, KeyError, TypeError, ValueError, OSError) as exc:
        return f"its entry is not valid ({exc})", None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o222:
        return "its file is not a read-only file of ours", None
    if st.st_ino != e.get("inode") or st.st_size != e["nbytes"]:
        return "its file was replaced", None
    return None, t


def _crc_ok(shm_dir: str, e: dict) -> bool:
    fd = os.open(os.path.join(shm_dir, e["file"]), os.O_RDONLY)
    try:
        return store.crc32(store.map_readonly(fd, e["nbytes"])) == e["crc32"]
    finally:
        os.close(fd)


def adopt(eng, log) -> dict:
    """Take over the intact tables of a dead engine's manifest into ``eng.tables``, and remove
    every other file of the namespace (but the lock, and the old manifest until publish).
    Returns {adopted, bytes, dropped: {file: why}, seconds}."""
    t0 = time.perf_counter()
    shm_dir, ns = eng.opts.shm_dir, eng.opts.namespace
    try:
        old = store.read_manifest(shm_dir, ns) or {}
    except (ValueError, OSError, RuntimeError):
        old = {}
    entries = old.get("tables") if isinstance(old.get("tables"), dict) else {}
    same_code = old.get("built_by") == built_by.current()
    configured = {ct.table.digest: ct for ct in eng.configured}
    candidates, dropped = [], {}
    for digest, e in entries.items():
        if not isinstance(e, dict):
            continue
        why, t = why_not(shm_dir, digest, e) if same_code else ("other table code built it", None)
        ct = configured.get(digest)
        if why is None and ct is not None and ct.table.length != t.length:
            why = f"the config now sizes it {ct.table.length}"
        if why is None:
            candidates.append((digest, e, t))
        else:
            dropped[e.get("file")] = why
    with ThreadPoolExecutor(workers()) as pool:
        intact = list(pool.map(lambda c: _crc_ok(shm_dir, c[1]), candidates))
    room = eng.opts.memory_budget_bytes
    for (digest, e, t), ok in sorted(zip(candidates, intact), key=lambda c: -c[0][1].get("last_used", 0)):
        ct = configured.get(digest)
        if not ok:
            dropped[e["file"]] = "its checksum does not match"
            continue
        if ct is None and e["nbytes"] > room:
            dropped[e["file"]] = "the memory budget is full"
            continue
        room -= e["nbytes"] if ct is None else 0
        entry = {**e, "pinned": ct is not None, "adopted": True}
        entry.pop("spec", None)
        if ct is not None:
            entry.update(name=ct.name, spec=ct.spec)
        elif e.get("pinned"):   # configured before, not now: an on-demand table from here on
            entry["name"] = t.family
        eng.tables[digest] = entry
        eng.defs[digest] = t
    keep = {os.path.join(shm_dir, e["file"]) for e in eng.tables.values()}
    keep |= {store.lock_path(shm_dir, ns), store.manifest_path(shm_dir, ns)}
    removed = [p for p in store.our_files(shm_dir, ns) if p not in keep]
    for p in removed:
        store.unlink(p)
    report = {"adopted": len(eng.tables), "bytes": sum(e["nbytes"] for e in eng.tables.values()),
              "dropped": {f: w for f, w in dropped.items() if f}, "seconds": time.perf_counter() - t0}
    if eng.tables or removed:
        log(f"adopted {report['adopted']} table(s), {report['bytes'] / 2**20:.1f} MiB, left by a dead engine "
            f"(pid {old.get('pid', '?')}) in {report['seconds']:.3f}s; removed {len(removed)} other file(s)"
            + "".join(f"; {f}: {w}" for f, w in sorted(report["dropped"].items())[:8]))
    return report
