"""The response limit holds for the body that goes on the wire (JSON text, npz, safetensors),
bounded before anything is built (service/core/sizing.py), over real HTTP against a real
``posenc serve`` with one worker: per family, a request whose arrays fit the 64 MiB limit but
whose JSON text could not, and one whose binary answer is just past it, are refused with a 413
naming the selection, with the worker's peak RSS (VmHWM) unmoved and /healthz answered meanwhile;
so are KServe v2 REST JSON outputs. A large JSON answer that fits is built in a thread in pieces:
/healthz on the same worker keeps answering while it is built (answers ordered before the large
answer's first byte, never a latency). How fast they are is a benchmark's (tests/bench/bench_tail.py);
the figures are printed."""

from __future__ import annotations

import contextlib
import threading
import time

import httpx
import numpy as np
import orjson
import pytest

from posenc.engine.answer import pipeline
from posenc.service.core import sizing
from tests.service_cases import CONFIG
from tests.waits import wait_for

pytestmark = pytest.mark.slow
LIMIT = 64 * 2**20
JSON = {"accept": "application/json"}
BIN = {"accept": "application/x-safetensors"}
NPZ = {"accept": "application/x-npz"}
MIB = 2**20

# family -> (a body whose arrays fit but whose JSON text cannot, a body just past the limit in binary)
CASES = {
    "sinusoidal-grid": (
        {"embed_dim": 32, "grid_size": 1000, "dtype": "bfloat16", "positions": None},
        {"embed_dim": 32, "grid_size": 1024, "dtype": "bfloat16"},
    ),
    "rope": (
        {"head_dim": 64, "dtype": "float16", "positions": {"start": 0, "stop": 250_000}},
        {"head_dim": 64, "dtype": "float16", "positions": {"start": 0, "stop": 262_144}},
    ),
    "sinusoidal": (
        {"d_model": 64, "dtype": "float16", "positions": {"start": 0, "stop": 500_000}},
        {"d_model": 64, "dtype": "float16", "positions": {"start": 0, "stop": 524_288}},
    ),
    # 4095 x 8194 float16 cells and 4 bytes of slopes: arrays of exactly 64 MiB, so its safetensors
    # file (a header more) is past the limit too
    "alibi": (
        {
            "num_heads": 1,
            "dtype": "float16",
            "query": {"start": 8194, "stop": 8194 + 4095},
            "key": {"start": 0, "stop": 8194},
        },
        {
            "num_heads": 1,
            "dtype": "float16",
            "query": {"start": 8194, "stop": 8194 + 4095},
            "key": {"start": 0, "stop": 8194},
        },
    ),
    # buckets of up to 7 digits: 64,000,000 bytes of int32, 128 MB of text
    "t5-buckets": (
        {
            "num_buckets": 1 << 20,
            "max_distance": 1 << 21,
            "query": {"start": 0, "stop": 4000},
            "key": {"start": 0, "stop": 4000},
        },
        {"query": {"start": 0, "stop": 4097}, "key": {"start": 0, "stop": 4096}},
    ),
}


def _status(pid: int) -> dict:
    with open(f"/proc/{pid}/status") as f:
        return {
            k: int(v.split()[0]) * 1024
            for k, v in (line.split(":", 1) for line in f)
            if k in ("VmRSS", "VmHWM")
        }


def _worker(server) -> int:
    """The one worker's pid (with --workers 1, uvicorn serves in the serve process itself)."""
    return (server.worker_pids() or [server.pid])[0]


class Prober:
    """GET /healthz back to back on its own connection while a request is in flight: each answer's
    (start, end) on the test's monotonic clock, and anything but a 200 it got."""

    def __init__(self, url: str):
        self.url = url
        self.answered: list[tuple[float, float]] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        with httpx.Client(base_url=self.url, timeout=60) as c:
            while not self._stop.is_set():
                t0 = time.monotonic()
                try:
                    status = c.get("/healthz").status_code
                except httpx.HTTPError as e:
                    self.failed.append(repr(e))
                    return
                if status != 200:
                    self.failed.append(f"/healthz answered {status}")
                self.answered.append((t0, time.monotonic()))

    def within(self, start: float, end: float) -> int:
        """/healthz answers asked after ``start`` and answered before ``end``."""
        return sum(start <= a and b <= end for a, b in self.answered)

    def __enter__(self):
        self._t.start()
        wait_for(lambda: self.answered or self.failed, 60, 0.01, "the first /healthz answered")
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(60)
        assert not self._t.is_alive(), "the /healthz prober is still waiting for an answer"
        assert not self.failed, self.failed


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory):
    from tests.integration.conftest import stopped_cleanly
    from tests.procs import Procs

    reg = Procs(tmp_path_factory.mktemp("bounds"))
    with stopped_cleanly(reg, reg.serve(CONFIG, workers=1)) as s:
        yield s


@pytest.fixture(scope="module")
def client(one_worker):
    with httpx.Client(base_url=one_worker.url, timeout=60) as c:
        yield c


def _refused(client, server, family, body, headers, what):
    pid = _worker(server)
    before = _status(pid)
    with Prober(server.url) as probe:
        t0 = time.monotonic()
        r = client.post(f"/v1/{family}", content=orjson.dumps(body), headers=headers)
        took = time.monotonic() - t0
        asked = len(probe.answered)
        wait_for(lambda: len(probe.answered) > asked, 60, 0.01, "/healthz answered after the refusal")
    after = _status(pid)
    grew = after["VmHWM"] - before["VmHWM"]
    print(
        f"{family} {what}: {r.status_code} in {took * 1e3:.1f} ms, worker peak RSS +{grew / MIB:.1f} MiB "
        f"(RSS {after['VmRSS'] / MIB:.0f} MiB), {len(probe.answered)} /healthz answered meanwhile"
    )
    assert r.status_code == 413, r.text[:300]
    detail = r.json()["detail"]
    assert str(LIMIT) in detail, detail
    assert grew < 16 * MIB, grew  # nothing of the answer's size was allocated
    return detail


@pytest.mark.parametrize("family", CASES)
def test_json_text_over_the_limit_refused_before_anything_is_built(client, one_worker, family):
    body = CASES[family][0]
    req = pipeline.parse(family, body)
    arrays = pipeline.check(req, LIMIT)
    assert arrays <= LIMIT, arrays  # the arrays alone would pass ...
    assert sizing.json_bound(req) > LIMIT  # ... their text could not
    detail = _refused(client, one_worker, family, body, JSON, "JSON")
    assert "JSON" in detail and ("positions" in detail or "query" in detail), detail
    # the same arrays in a binary format fit (except alibi's, exactly 64 MiB of arrays)
    if family != "alibi":
        assert sizing.bound(req, "safetensors") <= LIMIT and sizing.bound(req, "npz") <= LIMIT


@pytest.mark.parametrize("family", CASES)
@pytest.mark.parametrize("fmt", ["safetensors", "npz"])
def test_binary_past_the_limit_refused(client, one_worker, family, fmt):
    body = CASES[family][1]
    req = pipeline.parse(family, body)
    assert sizing.bound(req, fmt) > LIMIT
    _refused(client, one_worker, family, body, BIN if fmt == "safetensors" else NPZ, fmt)


def test_large_json_answer_leaves_the_loop_free(client, one_worker):
    """A JSON answer of ~40 MB (its bound just under 64 MiB) is built in a thread in pieces: /healthz,
    on the same worker, is answered meanwhile."""
    n = LIMIT // (17 * 64 + 2) - 16
    body = {"d_model": 64, "positions": {"start": 0, "stop": n}}
    assert sizing.json_bound(pipeline.parse("sinusoidal", body)) <= LIMIT
    with Prober(one_worker.url) as probe:
        t0 = time.monotonic()
        with client.stream("POST", "/v1/sinusoidal", content=orjson.dumps(body), headers=JSON) as r:
            first = time.monotonic()  # its head: sent once the whole text is built (in blocks after it)
            r.read()
        took = time.monotonic() - t0
    assert r.status_code == 200, r.text[:200]
    during = probe.within(t0, first)
    print(
        f"sinusoidal JSON of {len(r.content) / MIB:.1f} MiB in {took:.2f} s (head after {first - t0:.2f} s); "
        f"{during} of {len(probe.answered)} /healthz answered while it was built"
    )
    # the order, not a latency: /healthz asked after the request went out was answered, one after
    # another, before the answer's head came; a loop held for the whole build answers at most the
    # one probe it had read before the head, the rest after it
    assert during >= 3, (during, probe.answered[:10], t0, first)
    got = np.asarray(orjson.loads(r.content)["encoding"], dtype=np.float32)
    assert got.shape == (n, 64)


@contextlib.contextmanager
def _rest(server):
    import tritonclient.http as httpclient

    c = httpclient.InferenceServerClient(server.url[len("http://") :], network_timeout=120)
    try:
        yield c
    finally:
        c.close()


def _positions(n: int):
    import tritonclient.http as httpclient

    inp = httpclient.InferInput("positions", [n], "INT64")
    inp.set_data_from_numpy(np.arange(n, dtype=np.int64))
    return inp


def test_v2_rest_json_outputs_over_the_limit(one_worker):
    """KServe v2 REST: outputs asked as JSON are bounded by their text, binary ones by their bytes."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    with _rest(one_worker) as c:
        inp = _positions(500_000)
        params = {"spec": '{"d_model": 64, "dtype": "float16"}'}
        pid = _worker(one_worker)
        before = _status(pid)
        t0 = time.monotonic()
        with pytest.raises(InferenceServerException) as e:
            c.infer(
                "sinusoidal",
                [inp],
                parameters=params,
                outputs=[httpclient.InferRequestedOutput("encoding", binary_data=False)],
            )
        took = time.monotonic() - t0
        grew = _status(pid)["VmHWM"] - before["VmHWM"]
        print(f"v2 REST JSON: {e.value} in {took * 1e3:.1f} ms, worker peak RSS +{grew / MIB:.1f} MiB")
        assert e.value.status() == "413" and "JSON" in str(e.value) and str(LIMIT) in str(e.value), e.value
        assert grew < 16 * MIB
        # the same output as binary data: 64,000,000 bytes, under the limit, answered
        r = c.infer(
            "sinusoidal",
            [inp],
            parameters=params,
            outputs=[httpclient.InferRequestedOutput("encoding", binary_data=True)],
        )
        assert r.as_numpy("encoding").shape == (500_000, 64)


def test_v2_rest_large_json_output_is_the_same_text(one_worker):
    """A v2 REST JSON output long enough to be written in pieces and sent in blocks: the same
    answer as the binary one, with a binary output beside it."""
    import tritonclient.http as httpclient

    with _rest(one_worker) as c:
        inp = _positions(40_000)
        params = {"spec": '{"head_dim": 64}'}
        text = c.infer(
            "rope",
            [inp],
            parameters=params,
            outputs=[
                httpclient.InferRequestedOutput("cos", binary_data=False),
                httpclient.InferRequestedOutput("sin", binary_data=True),
            ],
        )
        binary = c.infer(
            "rope",
            [inp],
            parameters=params,
            outputs=[
                httpclient.InferRequestedOutput("cos", binary_data=True),
                httpclient.InferRequestedOutput("sin", binary_data=True),
            ],
        )
        for name in ("cos", "sin"):
            assert np.array_equal(text.as_numpy(name), binary.as_numpy(name)), name
        assert text.as_numpy("cos").shape == (40_000, 64)
