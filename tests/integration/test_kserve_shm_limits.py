"""Shared-memory regions cannot exhaust a server (real `posenc serve`, real ``tritonclient``):
2,000 regions of a client's own, each registered and used once, leave every server process with
a bounded number of descriptors (they are opened on use and kept in a small LRU, not one or two
per region forever); registrations past the limit are refused with a message naming it
(400 / RESOURCE_EXHAUSTED), and registering the last region reads no more than registering the first
did (bytes the server's processes read, /proc/PID/io: a count of work, not a timing)."""

from __future__ import annotations

import os
import statistics
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from posenc.service.v2.shm import MAX_REGIONS, OPEN_REGIONS
from tests.integration.kserve_cases import wait_grpc_ready
from tests.procs import bytes_read, children_of
from tests.service.v2.shm_client import client_object
from tests.shm import SHM_DIR, shm_files

pytestmark = pytest.mark.slow
MODULES = {"rest": httpclient, "grpc": grpcclient}
CONFIG = {"length": 2048, "tables": [{"name": "rope-64", "family": "rope", "spec": {"head_dim": 64}}]}
REGIONS = 2000
SIZE = 4096
SLACK = 24  # descriptors a process may open besides regions (sockets of new connections, ...)


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _server_pids(s) -> list[int]:
    """serve and its processes (workers, gRPC, engine), its standby engine aside: serve starts that
    one 2 s after the engine is up, so it may appear during the test without anything restarting."""
    standby = s.standby_pid()
    return [s.pid, *(p for p in children_of(s.pid) if p != standby)]


def _use(m, c, name: str, p: int) -> None:
    o = m.InferRequestedOutput("cos")
    o.set_shared_memory(name, 64 * 4)
    c.infer("rope", [_positions(m, p)], outputs=[o], parameters={"spec": '{"head_dim": 64}'})


def test_two_thousand_regions_keep_descriptors_bounded_and_registration_reads_flat(procs, ns):
    s = procs.serve(CONFIG, workers=2, namespace=ns, grpc=True, args=["--grpc-workers", "2"])
    wait_grpc_ready(s)
    clients = {
        "rest": httpclient.InferenceServerClient(s.url[len("http://") :], network_timeout=30),
        "grpc": grpcclient.InferenceServerClient(s.grpc_url),
    }
    prefix = f"posenc_test_{uuid.uuid4().hex[:8]}_"
    paths = []
    try:
        for _ in range(REGIONS):  # the client's regions
            paths.append(client_object(SIZE, prefix)[1])
        pids = _server_pids(s)
        for t in ("rest", "grpc"):  # each transport's connection is open before the baseline
            clients[t].infer("rope", [_positions(MODULES[t], 1)], parameters={"spec": '{"head_dim": 64}'})
        base = {p: _fds(p) for p in pids}
        peak = dict(base)

        def sample():
            for p in pids:
                peak[p] = max(peak[p], _fds(p))

        done, reads = 0, []
        read = lambda: sum(bytes_read(p) for p in pids)  # noqa: E731
        while done < REGIONS:
            batch = list(range(done, min(done + MAX_REGIONS, REGIONS)))
            for i in batch:  # registration over gRPC, and the bytes the server's processes read for it
                before = read()
                clients["grpc"].register_system_shared_memory(f"r{i}", "/" + os.path.basename(paths[i]), SIZE)
                reads.append(read() - before)
            if len(batch) == MAX_REGIONS:  # full: one more is refused on both transports, naming the limit
                for t, code in (("grpc", "StatusCode.RESOURCE_EXHAUSTED"), ("rest", "400")):
                    with pytest.raises(InferenceServerException) as e:
                        clients[t].register_system_shared_memory(
                            "one-more", "/" + os.path.basename(paths[-1]), SIZE
                        )
                    assert e.value.status() == code and f"{MAX_REGIONS} regions" in e.value.message(), (
                        e.value.message()
                    )
            for k, i in enumerate(batch):  # each region used once, alternately over REST and gRPC
                t = "rest" if k % 2 else "grpc"
                _use(MODULES[t], clients[t], f"r{i}", i % 2048)
                if k % 64 == 0:
                    sample()
            sample()
            for i in (batch[0], batch[-1]):  # the answers landed in the regions
                got = np.fromfile(paths[i], np.float32, 64)
                ref = clients["grpc"].infer(
                    "rope", [_positions(grpcclient, i % 2048)], parameters={"spec": '{"head_dim": 64}'}
                )
                np.testing.assert_array_equal(got, ref.as_numpy("cos").reshape(-1))
            clients["rest"].unregister_system_shared_memory()
            done += len(batch)
        assert s.alive() and sorted(_server_pids(s)) == sorted(pids)
        grown = {p: peak[p] - base[p] for p in pids}
        assert max(grown.values()) <= OPEN_REGIONS + SLACK, (grown, base)
        # each registration reads the registry's new records, not the whole log (which made it 10x
        # slower at 1024): the bytes read per registration do not grow with the count
        first, last = (
            statistics.median(reads[:100]),
            statistics.median(reads[MAX_REGIONS - 100 : MAX_REGIONS]),
        )
        assert last <= first + 4096, (first, last)
        print(
            f"registration: median {first:.0f} bytes read (first 100), {last:.0f} (last 100 of "
            f"{MAX_REGIONS}); descriptors grown: {grown}"
        )
    finally:
        for c in clients.values():
            c.close()
        for path in paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    assert not [n for n in os.listdir(SHM_DIR) if n.startswith(prefix)]
    assert s.stop() == 0, s.logs()
    assert shm_files(ns) == []


def _positions(m, p: int):
    i = m.InferInput("positions", [1], "INT64")
    i.set_data_from_numpy(np.array([p], np.int64))
    return i
