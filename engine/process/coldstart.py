"""Building the configured tables: in parallel, one thread per core, with each table's progress
in the log. The fills spend their time in numpy's loops and the C kernels, which release the GIL,
so two cores build the default set in about half the time of one. A table that does not fit
(not enough memory) waits in ``engine.missing`` and is retried
while the engine runs; it is still known by name (the manifest's ``named``) and its requests
are computed meanwhile."""

from __future__ import annotations

import errno
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

from ..core.errors import NotStored
from . import upkeep
from .adopt import workers
from .configured import ConfiguredTable


def _have(eng, ct: ConfiguredTable) -> bool:
    """True when ``ct`` is stored already (adopted, or built on demand meanwhile at a length that
    holds it); it is configured, so it becomes pinned and named."""
    with eng.lock:
        have = eng.tables.get(ct.table.digest)
        if have is None or (not have["pinned"] and have["length"] < ct.table.length):
            return False
        have.update(pinned=True, name=ct.name, spec=ct.spec)
        eng._note(ct.table.digest)  # (its entry changed: readers are told as of a build)
        return True


def _build(eng, ct: ConfiguredTable):
    """Build one configured table; the resource error that kept it out, or None."""
    try:
        if upkeep.available_bytes() < ct.table.nbytes() + upkeep.SLACK:
            raise OSError(errno.ENOMEM, "not enough memory available")
        eng._build_once(ct.table, pinned=True, name=ct.name, spec=ct.spec)
        return None
    except Exception as e:
        if not (upkeep.is_resource_error(e) or isinstance(e, NotStored)):
            raise
        return e


def build_configured(eng, tables: list[ConfiguredTable] | None = None) -> None:
    """Build the configured tables that are not stored yet (all of ``eng.configured``, or a retry
    of ``tables``), in parallel; the ones that do not fit go to ``eng.missing``."""
    t0 = time.perf_counter()
    todo, eng.missing = (eng.configured if tables is None else tables), []
    todo = [ct for ct in todo if not _have(eng, ct)]
    if todo:
        with ThreadPoolExecutor(min(workers(), len(todo)), thread_name_prefix="posenc-build") as pool:
            # largest first: the longest build starts at once instead of ending the start alone
            futures = {
                pool.submit(_build, eng, ct): ct for ct in sorted(todo, key=lambda c: -c.table.nbytes())
            }
            for i, fut in enumerate(as_completed(futures), 1):
                ct, err = futures[fut], fut.result()  # (a table that cannot be built stops the engine)
                mib = ct.table.nbytes() / 2**20
                if err is None:
                    built = eng.tables.get(ct.table.digest, {}).get("built_s", 0.0)
                    eng.log(
                        f"built {ct.name} ({ct.table.family}, {ct.table.length} rows, {mib:.1f} MiB) "
                        f"in {built:.2f}s [{i}/{len(todo)}]"
                    )
                else:
                    eng.missing.append(ct)
                    eng.log(
                        f"configured table {ct.name} ({mib:.1f} MiB) not built: {err}; retried while the "
                        f"engine runs; its requests are computed meanwhile [{i}/{len(todo)}]"
                    )
    with eng.lock:  # the manifest lists configured tables in the config's order (a name's first
        order = {ct.table.digest: i for i, ct in enumerate(eng.configured)}  # dtype is its default)
        eng.tables = dict(sorted(eng.tables.items(), key=lambda kv: order.get(kv[0], len(order))))
        if eng.published:
            eng._write_manifest()
    if tables is None:
        total = sum(e["nbytes"] for e in eng.tables.values())
        adopted = sum(1 for e in eng.tables.values() if e.get("adopted"))
        eng.log(
            f"generation {eng.generation}: {len(eng.tables)} tables ({adopted} adopted), "
            f"{total / 2**20:.1f} MiB in {time.perf_counter() - t0:.2f}s on {workers()} thread(s)"
        )
