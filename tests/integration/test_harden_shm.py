"""Storage short is never a refusal, nor a death.

- The shared-memory directory (a 64 MiB tmpfs mounted for the test; root only) full before
  ``posenc serve`` starts: tables are sealed segments in memory, not files there, so they are
  stored all the same; the manifest and the workers' metrics files cannot be written, and readers
  take the manifest from the engine's socket; every answer is 200 and exact, nothing dies, and the
  server leaves nothing behind.
- A configured table larger than the memory available: it is not stored, is still known by name
  and answered by computing the rows, and /readyz and /v1/tables say it is computed.
"""

from __future__ import annotations

import os

import httpx
import numpy as np
import pytest

from posenc.engine.answer.pipeline import compute
from posenc.engine.core.formats import read_safetensors
from tests.service_cases import BIN

MiB = 2**20
CONFIG20 = {"tables": [{"name": "r40", "family": "rope", "spec": {"head_dim": 40}}]}  # 20 MiB
NAMED = {"r40": {"head_dim": 40}, "huge": {"head_dim": 8192}, "small": {"head_dim": 40}}
NEW = [{"head_dim": 32, "rope_theta": 1000.0 * (k + 2)} for k in range(6)]  # 16 MiB each


def fill(path: str) -> str:
    """Take every free byte of ``path``'s file system; the filler's path."""
    filler = os.path.join(path, "filler")
    fd = os.open(filler, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        st = os.statvfs(path)
        os.posix_fallocate(fd, 0, st.f_bavail * st.f_frsize)
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        with open(os.path.join(path, "probe"), "wb") as f:
            f.write(b"x" * 4096)
            f.flush()
            os.fsync(f.fileno())
    os.unlink(os.path.join(path, "probe"))
    return filler


def check(url: str, body: dict) -> int:
    r = httpx.post(url + "/v1/rope", json=body, headers=BIN, timeout=30)
    if r.status_code == 200:
        arrays = read_safetensors(r.content)[0]
        want = compute(
            "rope", {k: v for k, v in body.items() if k != "table"} | NAMED.get(body.get("table"), {})
        )
        assert all(arrays[k].tobytes() == want[k].tobytes() for k in ("cos", "sin")), body
    return r.status_code


@pytest.mark.slow
def test_a_full_shared_memory_directory_at_start_stores_tables_all_the_same(procs, small_shm):
    filler = fill(small_shm)
    s = procs.serve(CONFIG20, workers=2, args=["--shm-dir", small_shm])
    before = {*s.worker_pids(), s.engine_pid()}
    rng = np.random.default_rng(7)
    for k in range(60):  # named, by spec, on demand; inside the tables and past them
        spec = [{"table": "r40"}, {"head_dim": 40}, NEW[k % 3]][k % 3]
        assert check(s.url, {**spec, "positions": [int(p) for p in rng.integers(0, 200000, 3)]}) == 200
    t = httpx.get(s.url + "/v1/tables").json()
    assert [n["answered"] for n in t["named"]] == ["stored"], t["named"]
    assert httpx.get(s.url + "/readyz").json()["computed"] == []
    from posenc.engine.reader.client import Client

    c = Client(shm_dir=small_shm, namespace=s.namespace)
    m = c.wait_ready(10)  # no manifest file: the engine's socket answers
    assert not os.path.exists(os.path.join(small_shm, f"{s.namespace}.manifest.json"))
    assert (
        len(m["tables"]) >= 1
        and c.table("rope", {"head_dim": 40}).length == m["tables"][next(iter(m["tables"]))]["length"]
    )
    assert {*s.worker_pids(), s.engine_pid()} == before, s.output()
    assert "Traceback" not in s.stderr(), s.output()
    assert s.stop() == 0, s.output()
    os.unlink(filler)
    assert os.listdir(small_shm) == [], os.listdir(small_shm)


@pytest.mark.slow
def test_a_configured_table_larger_than_memory_is_known_by_name_and_computed(procs, ns):
    huge = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")  # more than all memory
    rows = 1 << max(12, (huge // (2 * 4 * 4096)).bit_length())  # head_dim 8192: 32 KiB a row
    config = {
        "tables": [
            {"name": "huge", "family": "rope", "spec": NAMED["huge"], "length": rows},
            {"name": "small", "family": "rope", "spec": {"head_dim": 40}},
        ]
    }
    s = procs.serve(config, workers=1, namespace=ns)
    assert check(s.url, {"table": "huge", "positions": [0, 9, rows + 5]}) == 200
    assert check(s.url, {"table": "small", "positions": [3]}) == 200
    assert httpx.get(s.url + "/readyz").json()["computed"] == ["huge"]
    named = {n["name"]: n["answered"] for n in httpx.get(s.url + "/v1/tables").json()["named"]}
    assert named == {"huge": "computed", "small": "stored"}
    assert "not enough memory available" in s.stderr(), s.output()
    assert s.stop() == 0, s.output()
