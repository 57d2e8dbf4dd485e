"""Prometheus metrics shared by every worker.

Each uvicorn worker counts into its own small file in shm_dir (``{ns}.metrics.{pid}``, a float64
array [route, status, bucket + seconds + bytes]); ``/metrics`` on any worker sums all workers'
files, so a scrape sees the whole server whichever worker answers. Buckets are fine enough for
10–1000 µs. A worker that dies (or exits) has its counts folded, once, into a persistent total
(service/metrics_fold.py), so no counter goes backwards when uvicorn replaces a worker. Requests
answered by the C shortcut (service/fast.py, service/lane.py) count into rows of their own, which
``/metrics`` adds to their route and reports as ``posenc_hot_path_total{path="shortcut"}``.
"""

from __future__ import annotations

import bisect
import mmap
import os
import random

import numpy as np

from posenc.engine.store import reserve
from posenc.engine.tables import FAMILIES

from .v2.errors import GRPC_CODES

ROUTES = (*(f"/v1/{name}" for name in FAMILIES), "/v1/tables", "/healthz", "/readyz", "/metrics", "/docs",
          # KServe v2 (service/v2): REST inference per family model, table models together, the
          # rest of /v2; gRPC ModelInfer and ModelStreamInfer messages the same way, other methods
          *(f"/v2/models/{name}/infer" for name in FAMILIES), "/v2/models/<table>/infer", "/v2",
          *(f"grpc ModelInfer {name}" for name in FAMILIES), "grpc ModelInfer <table>",
          *(f"grpc ModelStreamInfer {name}" for name in FAMILIES), "grpc ModelStreamInfer <table>", "grpc",
          "other")
STATUSES = (200, 400, 404, 405, 406, 413, 422, 500, 503, 0)   # 0: any other status
BUCKETS_S = (10e-6, 20e-6, 30e-6, 40e-6, 50e-6, 60e-6, 70e-6, 80e-6, 90e-6, 100e-6, 125e-6, 150e-6,
             200e-6, 250e-6, 300e-6, 400e-6, 500e-6, 750e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
             100e-3, 250e-3, 1.0)
_NB = len(BUCKETS_S) + 1          # + the +Inf bucket
_CELLS = _NB + 2                  # + the sum of seconds, the sum of response bytes
# rows: ROUTES, then each family's shortcut answers (200s), then a header (this file's token)
SHORTCUT_ROW = {name: len(ROUTES) + i for i, name in enumerate(FAMILIES)}
_SHAPE = (len(ROUTES) + len(FAMILIES) + 1, len(STATUSES), _CELLS)
ROUTE_INDEX = {r: i for i, r in enumerate(ROUTES)}
# gRPC calls are counted under the HTTP status of their code (service/v2/errors.py) and shown by name
GRPC_NAMES = {200: "OK", 500: "INTERNAL", **{s: c.name for s, c in GRPC_CODES.items()}}
STATUS_INDEX = {s: i for i, s in enumerate(STATUSES)}


def _prefix(namespace: str) -> str:
    return f"{namespace}.metrics."


class Metrics:
    def __init__(self, shm_dir: str, namespace: str):
        self.shm_dir, self.namespace = shm_dir, namespace
        self.path = os.path.join(shm_dir, f"{_prefix(namespace)}{os.getpid()}")
        size = int(np.prod(_SHAPE)) * 8
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, size)
            # Every page backed now: on a full tmpfs the first count on an untouched page would
            # otherwise kill the worker with SIGBUS. ENOSPC here: the worker runs without metrics.
            reserve(fd, size)
            self._mm = mmap.mmap(fd, size)
        except OSError:
            os.unlink(self.path)
            raise
        finally:
            os.close(fd)
        self.counts = np.frombuffer(self._mm, dtype=np.float64).reshape(_SHAPE)
        self.counts[-1, 0, 0] = random.getrandbits(48) + 1   # folded once by this token
        self._flat = memoryview(self._mm).cast("d")   # item access ~3x cheaper than numpy's

    @staticmethod
    def index(route: str, status: int) -> int:
        """The offset of a (route, status) histogram, for observe_at."""
        r = ROUTE_INDEX.get(route, len(ROUTES) - 1)
        s = STATUS_INDEX.get(status, len(STATUSES) - 1)
        return (r * len(STATUSES) + s) * _CELLS

    @staticmethod
    def shortcut_index(family: str) -> int:
        """The offset of a family's shortcut answers (200s), for observe_at."""
        return (SHORTCUT_ROW[family] * len(STATUSES) + STATUS_INDEX[200]) * _CELLS

    def observe(self, route: str, status: int, seconds: float, nbytes: int = 0) -> None:
        self.observe_at(self.index(route, status), seconds, nbytes)

    def observe_at(self, base: int, seconds: float, nbytes: int = 0) -> None:
        flat = self._flat
        flat[base + bisect.bisect_left(BUCKETS_S, seconds)] += 1
        flat[base + _NB] += seconds
        flat[base + _NB + 1] += nbytes

    def close(self) -> None:
        """This worker's counts go into the persistent total (they stay counted), then its file."""
        from .metrics_fold import retire
        self._flat.release()
        retire(self.shm_dir, self.namespace, self.path, self.counts)

    def render(self, extra: str = "") -> str:
        """Every worker's counts (live ones and the folded total) in the text format."""
        from .metrics_text import render
        return render(self, extra)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_all(shm_dir: str, namespace: str) -> None:
    try:
        names = os.listdir(shm_dir)
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith(_prefix(namespace)):
            try:
                os.unlink(os.path.join(shm_dir, name))
            except FileNotFoundError:
                pass
