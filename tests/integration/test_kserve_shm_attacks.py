"""What a client can make `posenc serve` do through the system shared-memory extension, on real
server processes (REST and gRPC, one and two workers of each), with the real ``tritonclient``:

- shrinking and regrowing its own region in a loop while asking for outputs into it gets answers
  or a 400 / INVALID_ARGUMENT ("too small"), never a process killed by SIGBUS: every process of
  the server (uvicorn, its workers, the gRPC processes, the engine) keeps its pid;
- a key that is a symbolic link (to a file outside /dev/shm, or to one of the server's own
  files) or a hard link (to one of them) is refused, at registration and at use, and the
  file behind it is left as it was.
"""

from __future__ import annotations

import hashlib
import os
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.integration.kserve_cases import wait_grpc_ready
from tests.procs import children_of, cmdline
from tests.service.v2.shm_client import client_object, shrinking
from tests.shm import SHM_DIR, shm_files

pytestmark = pytest.mark.slow
MODULES = {"rest": httpclient, "grpc": grpcclient}
CODE = {"rest": "400", "grpc": "StatusCode.INVALID_ARGUMENT"}
CONFIG = {"length": 4096, "tables": [{"name": "rope-128", "family": "rope", "spec": {"head_dim": 128}}]}
SPEC = '{"head_dim": 128}'
REGION = 8 << 20  # the client's region: 8 MiB, shrunk to 0 and regrown in a loop
BATCH = (32, 128)  # cos and sin: 2 MiB each, at offsets 0 and 4 MiB
REQUESTS = 60  # per transport, every run as many (a number of calls, not a time window)


def _tag() -> str:
    return uuid.uuid4().hex[:8]


def _serve(procs, ns, workers: int):
    s = procs.serve(CONFIG, workers=workers, namespace=ns, grpc=True, args=["--grpc-workers", str(workers)])
    wait_grpc_ready(s)
    return s


def _clients(server) -> dict:
    return {
        "rest": httpclient.InferenceServerClient(
            server.url[len("http://") :], connection_timeout=60, network_timeout=120
        ),
        "grpc": grpcclient.InferenceServerClient(server.grpc_url),
    }


def _pids(server) -> dict:
    """Every process of the server by role: a process killed and restarted changes its pid."""
    kids = children_of(server.pid)
    return {
        "serve": server.pid,
        "engine": server.engine_pid(),
        "workers": sorted(server.worker_pids()),
        "grpc": sorted(p for p in kids if "posenc.service.supervise.grpc_main" in cmdline(p)),
    }


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


def _sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_region_shrunk_in_a_loop_never_kills_a_process(procs, ns, workers):
    s = _serve(procs, ns, workers)
    before = _pids(s)
    assert len(before["grpc"]) == workers and before["engine"] is not None
    clients = _clients(s)
    key, path = client_object(REGION)
    rng = np.random.default_rng(workers)
    counts = {}
    try:
        for transport, c in clients.items():
            m, name = MODULES[transport], f"shrink-{transport}"
            c.register_system_shared_memory(name, key, REGION)
            for _ in range(3):  # answered twice by the full path, then learnt by the shortcut (simd)
                _infer(c, m, name, rng.integers(0, 4096, BATCH, dtype=np.int64))
            ok = refused = 0
            with shrinking(path, REGION):
                # the same request with new positions: the shortcut's, or the full path's when it declines
                for _ in range(REQUESTS):
                    try:
                        _infer(c, m, name, rng.integers(0, 4096, BATCH, dtype=np.int64))
                        ok += 1
                    except InferenceServerException as e:
                        assert e.status() == CODE[transport] and "too small" in e.message(), (
                            f"{transport}: {e.status()} {e.message()}\n{s.logs()}"
                        )
                        refused += 1
            counts[transport] = (ok, refused)
            assert ok + refused == REQUESTS, counts
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


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One server (2 workers of each transport) for the link attacks, stopped cleanly after."""
    from tests.procs import Procs, unique_namespace

    reg = Procs(tmp_path_factory.mktemp("links"))
    ns = unique_namespace()
    s = _serve(reg, ns, 2)
    clients = _clients(s)
    yield s, clients
    for c in clients.values():
        c.close()
    rc = s.stop()
    reg.cleanup()
    assert rc == 0, s.logs()
    assert shm_files(ns) == []


def _own_file(ns: str) -> str:
    """A file of the server's in /dev/shm (its manifest: tables are sealed memory, not files)."""
    path = os.path.join(SHM_DIR, f"{ns}.manifest.json")
    assert os.path.exists(path), shm_files(ns)
    return path


def _refused(call, transport: str, words: str) -> None:
    with pytest.raises(InferenceServerException) as e:
        call()
    assert e.value.status() == CODE[transport] and words in e.value.message(), (
        e.value.status(),
        e.value.message(),
    )


def _links(tmp_path, ns: str) -> dict:
    """Keys of /dev/shm that lead elsewhere: {kind: (key, the file written through it)}."""
    outside = tmp_path / f"outside-{_tag()}"
    outside.write_bytes(b"A" * REGION)
    own = _own_file(ns)
    out = {}
    for kind, target in (
        ("symlink outside", str(outside)),
        ("symlink to a posenc file", own),
        ("hard link to a posenc file", own),
    ):
        key = f"posenc_test_{_tag()}"
        path = os.path.join(SHM_DIR, key)
        (os.link if kind.startswith("hard") else os.symlink)(target, path)
        out[kind] = ("/" + key, path, target)
    return out


WORDS = {
    "symlink outside": "symbolic link",
    "symlink to a posenc file": "symbolic link",
    "hard link to a posenc file": "links",
}


@pytest.mark.parametrize("transport", MODULES)
def test_links_are_refused_at_registration(served, tmp_path, transport):
    s, clients = served
    c = clients[transport]
    links = _links(tmp_path, s.namespace)
    try:
        before = {k: _sha(t) for k, (_, _, t) in links.items()}
        for kind, (key, _, _) in links.items():
            size = os.stat(links[kind][2]).st_size
            _refused(
                lambda: c.register_system_shared_memory("evil", key, min(size, 1 << 16)),
                transport,
                WORDS[kind],
            )
        st = c.get_system_shared_memory_status()
        assert (st == []) if transport == "rest" else not st.regions
        assert {k: _sha(t) for k, (_, _, t) in links.items()} == before
    finally:
        for _key, path, _ in links.values():
            os.unlink(path)


@pytest.mark.parametrize("transport", MODULES)
def test_a_key_swapped_for_a_link_after_registration_is_refused_at_use(served, tmp_path, transport):
    """A client registers a region of its own, then puts a link where it was: posenc opens the
    key again when a request first uses it (and after its descriptor was closed) and refuses."""
    s, clients = served
    c, m = clients[transport], MODULES[transport]
    links = _links(tmp_path, s.namespace)
    before = {k: _sha(t) for k, (_, _, t) in links.items()}
    try:
        for kind, (_key, path, _target) in links.items():
            name = f"swap-{_tag()}"
            own, own_path = client_object(REGION)
            try:
                c.register_system_shared_memory(name, own, 1 << 16)
            finally:
                os.unlink(own_path)
            os.rename(path, own_path)  # the link now has the registered key's name
            try:
                p = np.arange(16, dtype=np.int64).reshape(1, 16)
                for _ in range(4):  # over both workers, and on to the shortcut if it could learn
                    ins, outs = _request(m, name, p, (0, 8192))
                    _refused(
                        lambda: c.infer("rope", ins, outputs=outs, parameters={"spec": SPEC}),
                        transport,
                        WORDS[kind],
                    )
            finally:
                os.rename(own_path, path)
                c.unregister_system_shared_memory(name)
        assert {k: _sha(t) for k, (_, _, t) in links.items()} == before
    finally:
        for _key, path, _ in links.values():
            os.unlink(path)


@pytest.mark.parametrize("transport", MODULES)
def test_keys_of_any_posenc_namespace_are_refused(served, transport):
    s, clients = served
    c = clients[transport]
    seg = f"{s.namespace}.seg.1.0123456789abcdef0123"  # (a segment name of an older version)
    for key in (
        f"/{seg}",
        f"/{s.namespace}.manifest.json",
        f"/{s.namespace}.lock",
        "/ptest-00000000.seg.0.rope",
        "/other_ns.manifest.json",
        "/x.metrics.1",
    ):
        _refused(lambda: c.register_system_shared_memory("evil", key, 16), transport, "posenc's own files")
