"""A bound on concurrent gRPC work (service/v2/admit.py) on a real ``posenc serve``: 20 concurrent
unary ModelInfer calls answering 56 MiB each used to take the gRPC process to 2.5 GiB. Past
``grpc_max_inflight_bytes`` (bytes of planned answers) or ``grpc_max_concurrent`` (calls), a call
is refused with RESOURCE_EXHAUSTED naming the limit while the others are answered, and the
process's resident memory stays bounded."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.integration.kserve_cases import V2_CONFIG, wait_grpc_ready
from tests.procs import Procs, child_env, children_of, cmdline

MIB = 2**20
CALLS = 20
ROWS = 56 * MIB // (2 * 128 * 4)  # rope head_dim 128, float32: cos and sin, 56 MiB together


def reset_peak(pid: int) -> None:
    """VmHWM (the peak resident size) starts over from the current size (proc(5), clear_refs)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def peak_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.fixture
def serve(tmp_path):
    reg = Procs(tmp_path)

    def start(**env):
        s = reg.serve(
            V2_CONFIG,
            workers=1,
            grpc=True,
            env=child_env({f"POSENC_{k.upper()}": str(v) for k, v in env.items()}),
        )
        wait_grpc_ready(s)
        grpc_pid = next(p for p in children_of(s.pid) if "grpc_main" in cmdline(p))
        return s, grpc_pid

    yield start
    reg.cleanup()


def storm(server, rows: int, calls: int = CALLS, watch_pid: int | None = None):
    """``calls`` concurrent ModelInfer calls (one client each, released together) answering
    ``rows`` rope rows; (answers, refusals' messages, the peak resident size of ``watch_pid`` over
    the calls in KiB: its VmHWM, reset before them)."""
    start = threading.Barrier(calls)

    def one(_):
        c = grpcclient.InferenceServerClient(server.grpc_url)
        t = grpcclient.InferInput("positions", [rows], "INT64")
        t.set_data_from_numpy(np.arange(rows, dtype=np.int64))
        try:
            start.wait()
            r = c.infer("rope", [t], parameters={"spec": '{"head_dim": 128}'}, client_timeout=120)
            return ("ok", r.as_numpy("cos").nbytes + r.as_numpy("sin").nbytes)
        except InferenceServerException as e:
            return (e.status(), e.message())
        finally:
            c.close()

    if watch_pid:
        reset_peak(watch_pid)
    with ThreadPoolExecutor(calls) as pool:
        got = list(pool.map(one, range(calls)))
    answers = [n for kind, n in got if kind == "ok"]
    refused = [(kind, msg) for kind, msg in got if kind != "ok"]
    return answers, refused, peak_kib(watch_pid) if watch_pid else 0


def test_concurrent_large_answers_keep_the_grpc_process_bounded(serve):
    s, pid = serve(grpc_max_inflight_bytes=128 * MIB)
    answers, refused, peak = storm(s, ROWS, watch_pid=pid)
    assert answers and all(n == 56 * MIB for n in answers), answers
    assert refused, "no call was refused"
    for kind, msg in refused:
        assert kind == "StatusCode.RESOURCE_EXHAUSTED" and "GRPC_MAX_INFLIGHT_BYTES" in msg, (kind, msg)
    assert peak < 1024 * 1024, f"the gRPC process reached {peak // 1024} MiB"  # it was 2.5 GiB
    assert len(storm(s, 16)[0]) == CALLS  # small answers all pass


def test_calls_past_grpc_max_concurrent_are_refused_and_the_others_answered(serve):
    s, _ = serve(grpc_max_concurrent=2, grpc_max_inflight_bytes=4096 * MIB)
    answers, refused, _ = storm(s, ROWS // 4)
    assert answers and all(n == 14 * MIB for n in answers), answers
    assert refused, "no call was refused"
    for kind, msg in refused:
        assert kind == "StatusCode.RESOURCE_EXHAUSTED" and "GRPC_MAX_CONCURRENT" in msg, (kind, msg)
