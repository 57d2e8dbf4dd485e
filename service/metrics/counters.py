"""Prometheus metrics shared by every worker.

Each uvicorn worker counts in its own memory and writes the counts to its own small file in shm_dir
(``{ns}.metrics.{pid}``, a float64 array [route, status, bucket + seconds + bytes]) every
``FLUSH_S`` and before each scrape it answers; the file is written (``pwrite``), never mapped, so
whatever another process does to it (truncate it, fill the file system) costs at most counts, never
the worker. ``/metrics`` on any worker sums all workers' files, so a scrape sees the whole server whichever
worker answers. Buckets are fine enough for 10–1000 µs. A worker that dies (or exits) has its counts folded,
once, into a persistent total (service/metrics/fold.py), so no counter goes backwards when uvicorn replaces a
worker. Requests answered by a C path (the hot lane's whole-request C call, service/protocol/uvicorn_api.py;
the C template shortcut in the lane, the raw front or the gRPC server) count into rows of their own
(layout.py ``PATH_ROW``), which ``/metrics`` adds to their route and reports as
``posenc_answer_path_total{route, path}``: choosing the row is the whole cost of telling the paths apart.
"""

from __future__ import annotations

import bisect
import errno
import mmap
import os
import random
import threading

import numpy as np

from posenc.engine.store.segments import reserve
from posenc.service.metrics.fold import retire
from posenc.service.metrics.layout import (
    BUCKETS_F64,
    BUCKETS_S,
    CELLS,
    KINDS,
    NB,
    PATH_ROW,
    ROUTE_INDEX,
    ROUTES,
    SHAPE,
    STATUS_INDEX,
    STATUSES,
    prefix,
)
from posenc.service.metrics.text import render

FLUSH_S = 0.1  # how often a worker writes its counts to its file


class Metrics:
    def __init__(self, shm_dir: str, namespace: str, kind: str = "http"):
        """``kind``: the server counting here (layout.KINDS: an HTTP worker, or a gRPC server process)."""
        self.shm_dir, self.namespace = shm_dir, namespace
        self.path = os.path.join(shm_dir, f"{prefix(namespace)}{os.getpid()}")
        size = int(np.prod(SHAPE)) * 8
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(self._fd, size)
            reserve(self._fd, size)  # ENOSPC here: the worker runs without metrics
        except OSError:
            os.unlink(self.path)
            os.close(self._fd)
            raise
        self._mm = mmap.mmap(-1, size)  # the counts themselves: this process's memory
        self.counts = np.frombuffer(self._mm, dtype=np.float64).reshape(SHAPE)
        self.counts[-1, 0, 0] = random.getrandbits(48) + 1  # folded once by this token
        self.counts[-1, 0, 1] = KINDS.index(kind)
        self._flat = memoryview(self._mm).cast("d")  # item access ~3x cheaper than numpy's
        # (the counts, the bounds): what the lane's C loop (service/shortcut/hot_serve.c) counts in,
        # as observe_at does
        self.native = (self._mm, BUCKETS_F64)
        self.flush()
        self._stop = threading.Event()
        threading.Thread(target=self._flusher, daemon=True, name="posenc-metrics-flush").start()

    def flush(self) -> None:
        """Write the counts to this worker's file (what other workers' scrapes read)."""
        try:
            os.pwrite(self._fd, self._mm, 0)
        except (OSError, ValueError):  # no room, or closed: the counts stay here, written next time
            pass

    def _flusher(self) -> None:
        while not self._stop.wait(FLUSH_S):
            self.flush()

    @staticmethod
    def index(route: str, status: int) -> int:
        """The offset of a (route, status) histogram, for observe_at."""
        r = ROUTE_INDEX.get(route, len(ROUTES) - 1)
        s = STATUS_INDEX.get(status, len(STATUSES) - 1)
        return (r * len(STATUSES) + s) * CELLS

    @staticmethod
    def path_index(route: str, path: str) -> int:
        """The offset of a route's 200s answered by a C path ("c" or "shortcut": layout.PATHS),
        for observe_at; a route's "shortcut" offset is its "c" offset + layout.TO_SHORTCUT."""
        return (PATH_ROW[route, path] * len(STATUSES) + STATUS_INDEX[200]) * CELLS

    def observe(self, route: str, status: int, seconds: float, nbytes: int = 0) -> None:
        self.observe_at(self.index(route, status), seconds, nbytes)

    def observe_path(self, route: str, path: str, seconds: float, nbytes: int = 0) -> None:
        """A 200 of ``route`` made by ``path`` (layout.PATHS)."""
        self.observe_at(self.path_at(route, path), seconds, nbytes)

    @staticmethod
    def path_at(route: str, path: str) -> int:
        """The offset of ``route``'s 200s made by ``path``; a route no C path answers counts as python."""
        return Metrics.path_index(route, path) if (route, path) in PATH_ROW else Metrics.index(route, 200)

    def observe_at(self, base: int, seconds: float, nbytes: int = 0) -> None:
        flat = self._flat
        flat[base + bisect.bisect_left(BUCKETS_S, seconds)] += 1
        flat[base + NB] += seconds
        flat[base + NB + 1] += nbytes

    def close(self) -> None:
        """This worker's counts go into the persistent total (they stay counted), then its file."""
        self._stop.set()
        self._flat.release()
        os.close(self._fd)
        retire(self.shm_dir, self.namespace, self.path, self.counts)

    def render(self, extra: str = "") -> str:
        """Every worker's counts (live ones and the folded total) in the text format."""
        self.flush()
        return render(self, extra)


def open_metrics(
    shm_dir: str, namespace: str, kind: str = "http", log=None
) -> tuple[Metrics | None, str | None]:
    """(this process's Metrics, None), or (None, why) when its file cannot be made (a full shared
    memory: ENOSPC; no descriptor left): the process serves all the same, without its counts,
    says why in its log, and /metrics lists it (``posenc_metrics_missing``, service/metrics/page.py)."""
    try:
        return Metrics(shm_dir, namespace, kind), None
    except OSError as e:
        why = f"{errno.errorcode.get(e.errno, 'error')}: {e.strerror or e}"
        if log is not None:
            log.warning(
                "%s process %d runs without metrics: its metrics file in %s cannot be made (%s)",
                "gRPC" if kind == "grpc" else "worker",
                os.getpid(),
                shm_dir,
                why,
            )
        return None, why


def remove_all(shm_dir: str, namespace: str) -> None:
    try:
        names = os.listdir(shm_dir)
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith(prefix(namespace)):
            try:
                os.unlink(os.path.join(shm_dir, name))
            except FileNotFoundError:
                pass
