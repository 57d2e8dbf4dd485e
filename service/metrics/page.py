"""/metrics: the request metrics (service/metrics/text.py) plus the engine, shared memory and
process figures, read when scraped.

- ``posenc_engine_up``: 1 when the engine answers on its socket within 0.25 s;
- ``posenc_tables`` and ``posenc_shm_bytes`` (by kind: pinned, on_demand): from its manifest;
- ``posenc_memory_budget_bytes``: the on-demand budget (the manifest's, else this worker's setting);
- ``posenc_builds_total``, ``posenc_build_seconds`` (histogram), ``posenc_evictions_total``: asked
  of the engine at each scrape (its ``stats``, engine/process/stats.py), so every worker reports the
  one source and no counter goes back between scrapes that land on different workers (workers'
  cached manifests differ by a build or two); absent while the engine is down; they restart from
  zero with the engine process;
- ``posenc_metrics_missing{role, pid, reason}``: 1 for each worker or gRPC process that counts
  nowhere, its metrics file not made (a full shm_dir: ``ENOSPC``); it serves all the same;
- ``process_*`` (prometheus_client's ProcessCollector) for each process of the server, labelled
  ``role`` (serve, engine, worker) and ``pid``, so a scrape answered by any worker shows them all
  and no series mixes two processes (the engine's only when its pid is an engine in this pid
  namespace: a sidecar's is not).
"""

from __future__ import annotations

import os

import numpy as np
from prometheus_client import ProcessCollector
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from posenc.engine.core.errors import EngineUnavailable
from posenc.service.core.readiness import PING_TIMEOUT_S
from posenc.service.metrics.fold import collect
from posenc.service.metrics.layout import SHAPE, prefix
from posenc.service.metrics.text import request_families, to_text

SEGMENT_BYTES = int(np.prod(SHAPE)) * 8  # one process's metrics file


def _is_engine(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"engine" in f.read()
    except OSError:
        return False


def engine_families(client, budget_default: int) -> list:
    try:  # the engine's counters from the engine itself: every worker reports the same ones
        reply = client.call({"op": "stats"}, timeout=PING_TIMEOUT_S)
    except (EngineUnavailable, ValueError):
        reply = {}
    fams = [
        GaugeMetricFamily(
            "posenc_engine_up", "1 when the engine answers on its socket.", int(bool(reply.get("ok")))
        )
    ]
    m = client.manifest() or {}
    tables = GaugeMetricFamily("posenc_tables", "Tables in shared memory.", labels=["kind"])
    nbytes = GaugeMetricFamily("posenc_shm_bytes", "Bytes of tables in shared memory.", labels=["kind"])
    for kind, pinned in (("pinned", True), ("on_demand", False)):
        es = [e for e in m.get("tables", {}).values() if bool(e.get("pinned")) == pinned]
        tables.add_metric([kind], len(es))
        nbytes.add_metric([kind], sum(e.get("nbytes", 0) for e in es))
    fams += [
        tables,
        nbytes,
        GaugeMetricFamily(
            "posenc_memory_budget_bytes",
            "Bytes allowed for on-demand tables.",
            m.get("budget", budget_default),
        ),
    ]
    st = reply.get("stats")
    if st:  # (absent while the engine is down: a series that pauses, never one that goes back)
        fams.append(
            CounterMetricFamily("posenc_builds", "Tables built by this engine process.", st["builds"])
        )
        fams.append(
            CounterMetricFamily(
                "posenc_evictions", "On-demand tables evicted by this engine process.", st["evictions"]
            )
        )
        cum, buckets = 0, []
        for le, n in zip([*st["build_seconds_buckets"], "+Inf"], st["build_seconds_counts"]):
            cum += n
            buckets.append(("+Inf" if le == "+Inf" else f"{le:g}", cum))
        h = HistogramMetricFamily("posenc_build_seconds", "Time to build one table.", labels=[])
        h.add_metric([], buckets, st["build_seconds_sum"])
        fams.append(h)
    return fams


def process_families(procs: list[tuple[str, int]]) -> list:
    merged: dict[str, Metric] = {}
    for role, pid in procs:
        for fam in ProcessCollector(pid=lambda p=pid: p, registry=None).collect():
            out = merged.get(fam.name)
            if out is None:
                out = merged[fam.name] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
            for s in fam.samples:
                out.add_sample(s.name, {**s.labels, "role": role, "pid": str(pid)}, s.value)
    return list(merged.values())


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def missing_family(shm_dir: str, root: int, counting: list, own: str | None) -> GaugeMetricFamily:
    """``posenc_metrics_missing{role, pid, reason}`` = 1 for each serving process of this server
    (this worker, its sibling workers, the gRPC processes: children of ``root``, the serve process)
    that counts nowhere because its metrics file could not be made; ``own``: why not, for this one."""
    fam = GaugeMetricFamily(
        "posenc_metrics_missing",
        "A server process whose calls are not counted: its metrics "
        "file could not be made (its log says why).",
        labels=["role", "pid", "reason"],
    )
    have = {p for _, p in counting}
    if own is not None:
        fam.add_metric(["worker", str(os.getpid()), own], 1)
    try:
        st = os.statvfs(shm_dir)
        full = st.f_bavail * st.f_frsize < SEGMENT_BYTES
    except OSError:
        full = False
    for pid in _children(root):
        if pid in have or pid == os.getpid():
            continue
        cmd = _cmdline(pid)
        role = "grpc" if b"grpc_main" in cmd else "worker" if b"spawn_main" in cmd else None
        if role is not None:
            fam.add_metric(
                [role, str(pid), f"ENOSPC: no room in {shm_dir}" if full else "unknown (see its log)"], 1
            )
    return fam


def page(metrics, client, settings, serve_pid: int | None, missing: str | None = None) -> str:
    """The whole /metrics text; ``metrics`` may be None (this worker has no counts file, and
    ``missing`` says why): then the other processes' counts are still shown."""
    fams = []
    procs = []
    if metrics is not None:
        metrics.flush()  # this worker's counts up to now, for itself and any later scrape
        total, counting = collect(metrics.shm_dir, metrics.namespace, metrics.path)
    else:  # the others' counts, when there are any (no lock file is made for none)
        total, counting = np.zeros(SHAPE), []
        try:
            if any(n.startswith(prefix(settings.namespace)) for n in os.listdir(settings.shm_dir)):
                total, counting = collect(settings.shm_dir, settings.namespace, "")
        except OSError:  # not even the lock file can be made: no counts shown this time
            pass
    fams += request_families(total, counting)
    procs += [("worker" if kind == "http" else kind, p) for kind, p in counting]
    fams.append(missing_family(settings.shm_dir, serve_pid or os.getpid(), counting, missing))
    fams += engine_families(client, settings.memory_budget_bytes)
    engine_pid = (client.manifest() or {}).get("pid")
    if engine_pid and _is_engine(engine_pid):
        procs.append(("engine", engine_pid))
    if serve_pid:
        procs.append(("serve", serve_pid))
    return to_text(fams + process_families(procs))
