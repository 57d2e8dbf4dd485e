"""What a client can make `posenc serve` do through the system shared-memory extension, on real
server processes (REST and gRPC, one and two workers of each), with the real ``tritonclient``:

- shrinking and regrowing its own region in a loop while asking for outputs into it gets answers
  or a 400 / INVALID_ARGUMENT ("too small"), never a process killed by SIGBUS: every process of
  the server (uvicorn, its workers, the gRPC processes, the engine) keeps its pid.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.integration.kserve_cases import wait_grpc_ready
from tests.procs import children_of, cmdline
from tests.shm import SHM_DIR, shm_files

pytestmark = pytest.mark.slow
MODULES = {"rest": httpclient, "grpc": grpcclient}
CODE = {"rest": "400", "grpc": "StatusCode.INVALID_ARGUMENT"}
CONFIG = {"length": 4096, "tables": [{"name": "rope-128", "family": "rope", "spec": {"head_dim": 128}}]}
SPEC = '{"head_dim": 128}'
REGION = 8 << 20            # the client's region: 8 MiB, shrunk to 0 and regrown in a loop
BATCH = (32, 128)           # cos and sin: 2 MiB each, at offsets 0 and 4 MiB
REQUESTS = 60               # per transport
SECONDS = 25.0              # per transport, at most


def _tag() -> str:
    return uuid.uuid4().hex[:8]


def _serve(procs, ns, workers: int):
    s = procs.serve(CONFIG, workers=workers, namespace=ns, grpc=True, args=["--grpc-workers", str(workers)])
    wait_grpc_ready(s)
    return s


def _clients(server) -> dict:
    return {"rest": httpclient.InferenceServerClient(server.url[len("http://"):], connection_timeout=10,
                                                     network_timeout=10),
            "grpc": grpcclient.InferenceServerClient(server.grpc_url)}


def _pids(server) -> dict:
    """Every process of the server by role: a process killed and restarted changes its pid."""
    kids = children_of(server.pid)
    return {"serve": server.pid, "engine": server.engine_pid(), "workers": sorted(server.worker_pids()),
            "grpc": sorted(p for p in kids if "posenc.service.v2.grpc_main" in cmdline(p))}


def _request(m, name: str, positions: np.ndarray, offsets=(0, 4 << 20)):
    i = m.InferInput("positions", list(positions.shape), "INT64")
    i.set_data_from_numpy(positions)
    outs = []
    for o, offset in zip(("cos", "sin"), offsets):
        out = m.InferRequestedOutput(o)
        out.set_shared_memory(name, positions.size * 128 * 4, offset=offset)
        outs.append(out)
    return [i], outs


def _infer(c, m, name: str, positions: np.ndarray) -> None:
    """cos and sin of ``positions`` into region ``name``."""
    ins, outs = _request(m, name, positions)
    c.infer("rope", ins, outputs=outs, parameters={"spec": SPEC})


def _region_file(size: int) -> tuple[str, str]:
    """A region of the test's own: (key, path), created as shm_open(3) creates it."""
    key = f"posenc_test_{_tag()}"
    path = os.path.join(SHM_DIR, key)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, size)
    os.close(fd)
    return "/" + key, path


@pytest.mark.parametrize("workers", [1, 2])
def test_a_region_shrunk_in_a_loop_never_kills_a_process(procs, ns, workers):
    s = _serve(procs, ns, workers)
    before = _pids(s)
    assert len(before["grpc"]) == workers and before["engine"] is not None
    clients = _clients(s)
    key, path = _region_file(REGION)
    rng = np.random.default_rng(workers)
    counts = {}
    try:
        for transport, c in clients.items():
            m, name = MODULES[transport], f"shrink-{transport}"
            c.register_system_shared_memory(name, key, REGION)
            for _ in range(3):   # answered twice by the full path, then learnt by the shortcut (simd)
                _infer(c, m, name, rng.integers(0, 4096, BATCH, dtype=np.int64))
            fd = os.open(path, os.O_RDWR)
            stop = threading.Event()

            def shrink():   # the client's own object: to 0 bytes and back, as fast as it can
                for _ in range(5_000_000):
                    if stop.is_set():
                        return
                    os.ftruncate(fd, 0)
                    os.ftruncate(fd, REGION)

            t = threading.Thread(target=shrink, daemon=True)
            t.start()
            ok = refused = 0
            deadline = time.monotonic() + SECONDS
            try:
                # the same request with new positions: the shortcut's, or the full path's when it declines
                for _ in range(REQUESTS):
                    if time.monotonic() > deadline:
                        break
                    try:
                        _infer(c, m, name, rng.integers(0, 4096, BATCH, dtype=np.int64))
                        ok += 1
                    except InferenceServerException as e:
                        assert e.status() == CODE[transport] and "too small" in e.message(), \
                            f"{transport}: {e.status()} {e.message()}\n{s.logs()}"
                        refused += 1
            finally:
                stop.set()
                t.join(10)
                os.ftruncate(fd, REGION)
                os.close(fd)
            counts[transport] = (ok, refused)
            assert ok + refused >= 10, counts
            # the region still works once the client stops shrinking it, on the full path and the shortcut
            for _ in range(3):
                p = rng.integers(0, 4096, BATCH, dtype=np.int64)
                _infer(c, m, name, p)
            got = np.fromfile(path, np.float32, p.size * 128).reshape(*BATCH, 128)
            ref = c.infer("rope", _request(m, name, p)[0], parameters={"spec": SPEC}).as_numpy("cos")
            np.testing.assert_array_equal(got, ref)
            c.unregister_system_shared_memory(name)
        assert s.alive() and _pids(s) == before, (counts, before, _pids(s), s.logs())
        print(f"workers {workers}: (answered, refused too small) per transport: {counts}")
    finally:
        for c in clients.values():
            c.close()
        os.unlink(path)
    assert s.stop() == 0, s.logs()
    assert shm_files(ns) == []
