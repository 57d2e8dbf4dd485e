"""The gRPC processes of a real ``posenc serve`` survive what used to take gRPC down:

- /dev/shm full at start (a 64 MiB tmpfs filled, as tests/integration/test_harden_shm.py does):
  the gRPC processes cannot make their metrics files and serve all the same, with the reason in
  their log and in /metrics (``posenc_metrics_missing``), and are never restarted;
- two gRPC processes share the port (``--grpc-workers`` 2, the default; SO_REUSEPORT): one killed
  by SIGKILL under a load of tritonclient.grpc calls loses only the calls in flight on it and those
  its clients' channels fail while they reconnect, the rest are answered, ``posenc serve`` restarts
  it, and every channel is answered again (the figures are printed; nothing here is timed)."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.kserve_cases import wait_grpc_ready
from tests.integration.test_harden_shm import CONFIG20, fill
from tests.procs import children_of, cmdline, wait_for
from tests.service_cases import CONFIG

pytestmark = pytest.mark.slow


def grpc_pids(server) -> list[int]:
    return sorted(p for p in children_of(server.pid) if "grpc_main" in cmdline(p))


def infer(c, positions):
    t = grpcclient.InferInput("positions", [len(positions)], "INT64")
    t.set_data_from_numpy(np.asarray(positions, dtype=np.int64))
    return c.infer("rope", [t], parameters={"spec": '{"head_dim": 64}'})


def sockets(pid: int, port: int, state: str) -> int:
    """How many TCP sockets on local ``port`` in ``state`` (0A: LISTEN, 01: ESTABLISHED) ``pid`` holds."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0
    inodes = set()
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed since the listing: not one of them
            continue
        if link.startswith("socket:"):
            inodes.add(link[8:-1])
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if int(cols[1].rsplit(":", 1)[1], 16) == port and cols[3] == state and cols[9] in inodes:
                n += 1
    return n


def test_a_full_shm_at_start_costs_grpc_its_metrics_not_its_calls(procs, small_shm):
    filler = fill(small_shm)
    s = procs.serve(CONFIG20, workers=2, grpc=True, args=["--shm-dir", small_shm])
    wait_grpc_ready(s)
    before = grpc_pids(s)
    assert len(before) == 2, before
    # both gRPC processes have met the full /dev/shm (their log says so) before the load
    err = wait_for(
        lambda: (e := s.stderr()).count("gRPC process") >= 2 and "runs without metrics" in e and e,
        60,
        0.05,
        "both gRPC processes' 'runs without metrics' lines",
        seen=s.stderr,
    )
    assert "ENOSPC" in err, err
    clients = [grpcclient.InferenceServerClient(s.grpc_url) for _ in range(4)]
    try:
        # a soak, not a timing: calls for 2 s, four times the old restart loop's 0.5 s, so that a
        # process restarted for its metrics would be seen restarted
        t_end = time.monotonic() + 2.0
        n = 0
        while time.monotonic() < t_end:
            for c in clients:
                r = infer(c, [0, 1, 5000])
                assert r.as_numpy("cos").shape == (3, 64)
                n += 1
    finally:
        for c in clients:
            c.close()
    assert grpc_pids(s) == before, s.output()  # never restarted
    err = s.stderr()
    assert "restarting" not in err, err

    def missing_grpc():  # posenc_metrics_missing's gRPC rows, once both processes' are in /metrics
        text = httpx.get(s.url + "/metrics", timeout=10).text
        rows = [
            smp
            for fam in text_string_to_metric_families(text)
            for smp in fam.samples
            if smp.name == "posenc_metrics_missing"
        ]
        grpc = sorted(int(smp.labels["pid"]) for smp in rows if smp.labels["role"] == "grpc")
        return grpc == before and rows

    missing = wait_for(
        missing_grpc, 30, 0.1, "both gRPC processes in posenc_metrics_missing", seen=missing_grpc
    )
    roles = sorted(
        (smp.labels["role"], int(smp.labels["pid"])) for smp in missing if smp.labels["role"] == "grpc"
    )
    print(f"full shm: {n} gRPC calls answered by {before}; /metrics: {[dict(m.labels) for m in missing]}")
    assert [p for _, p in roles] == before, missing
    assert all("ENOSPC" in smp.labels["reason"] for smp in missing), missing
    assert s.stop() == 0, s.output()
    os.unlink(filler)
    assert os.listdir(small_shm) == [], os.listdir(small_shm)


def test_a_killed_grpc_process_loses_only_its_calls_in_flight(procs):
    s = procs.serve(CONFIG, workers=1, grpc=True)
    wait_grpc_ready(s)
    pids = grpc_pids(s)
    assert len(pids) == 2, pids  # --grpc-workers' default
    # per channel: its calls in order, (start, end, ok, error)
    calls: list[list[tuple[float, float, bool, str]]] = [[] for _ in range(8)]
    stop = threading.Event()

    def load(k):  # a connection of its own (gRPC shares one per target in a process unless told not to)
        c = grpcclient.InferenceServerClient(s.grpc_url, channel_args=[("grpc.use_local_subchannel_pool", 1)])
        try:
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    r = infer(c, list(range(0, 4096, 7)))
                    ok, why = r.as_numpy("cos").shape == (586, 64), ""
                except Exception as e:  # tritonclient's InferenceServerException: UNAVAILABLE
                    ok, why = False, str(e)[:120]
                calls[k].append((t0, time.monotonic(), ok, why))
        finally:
            c.close()

    threads = [threading.Thread(target=load, args=(k,)) for k in range(8)]  # 8 channels: both get some
    for t in threads:
        t.start()

    def connected():  # the clients' connections, per process, once all eight are up and answered
        held = {p: sockets(p, s.grpc_port, "01") for p in pids}
        return sum(held.values()) >= 8 and all(any(c[2] for c in mine) for mine in calls) and held

    held = wait_for(
        connected,
        60,
        0.01,
        "eight connections to the gRPC processes, each answered",
        seen=lambda: ({p: sockets(p, s.grpc_port, "01") for p in pids}, [len(m) for m in calls]),
    )
    victim = max(pids, key=held.get)  # (at least 4 of the 8)
    killed = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    respawned = wait_for(lambda: [p for p in grpc_pids(s) if p not in pids], 30, 0.005, "a new gRPC process")[
        0
    ]
    spawn_s = time.monotonic() - killed
    wait_for(lambda: sockets(respawned, s.grpc_port, "0A"), 30, 0.01, "the new gRPC process listening")
    listened = time.monotonic()
    listen_s = listened - killed

    def answered_since():  # per channel, its calls begun once the new process listened and answered
        return [sum(c[2] for c in list(mine) if c[0] > listened) for mine in calls]

    # every channel is back: each answered three calls begun after the new process listened (a
    # channel that lost its connection reconnects after grpc's backoff; the deadline only a hang's)
    wait_for(
        lambda: min(answered_since()) >= 3,
        120,
        0.05,
        "every channel answered 3 calls since the new gRPC process listened",
        seen=answered_since,
    )
    stop.set()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a load thread is still in a call"
    every = sorted(c for mine in calls for c in mine)
    failed = [c for c in every if not c[2]]
    print(
        f"connections per gRPC process {held}, {victim} killed; {len(every)} gRPC calls, "
        f"{len(failed)} failed (started {[round(c[0] - killed, 3) for c in failed]} s "
        f"from the kill: {sorted({c[3] for c in failed})}); restart: the new process {spawn_s * 1e3:.0f} ms "
        f"after SIGKILL, listening after {listen_s * 1e3:.0f} ms"
    )
    # the calls that failed were on the dead process's connections: they ended after the kill,
    # while their channel reconnected (a channel that lost its connection fails its calls fast
    # during grpc's reconnect backoff, ~1 s: under load that is many calls); on each channel they
    # are one run, after which every call is answered, and a channel of the survivor lost none
    assert held[victim] >= 4, held
    assert all(c[1] >= killed for c in failed), failed[:5]
    for k, mine in enumerate(calls):
        oks = "".join("1" if c[2] else "0" for c in mine)  # answered before, lost, answered after
        assert oks.lstrip("1").lstrip("0").lstrip("1") == "" and oks.endswith("1"), (k, oks)
    lost = [k for k, mine in enumerate(calls) if any(not c[2] for c in mine)]  # channels that lost calls
    assert len(lost) <= held[victim], (lost, held)
    assert s.alive() and len(grpc_pids(s)) == 2
    assert f"gRPC server {victim} killed by SIGKILL" in s.stderr() and "restarting in 0.0s" in s.stderr(), (
        s.stderr()
    )
