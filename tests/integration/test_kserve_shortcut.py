"""The v2 shortcut (service/v2/hot.py) end to end: a ``posenc serve`` with the shortcut on
(POSENC_SHORTCUT=c), driven by tritonclient over gRPC (unary and streamed) and REST binary. The
first two requests of a shape are answered by the full path, which learns it at the second; the
ones after them, with other positions, by the shortcut (its in-process tests check that it does take them);
each answer is held to /v1's for the same spec, bit for bit, on family and table models, INT32 and INT64, [N]
and [B, N], with positions past the table (computed by the shortcut with the engine's kernel), and into a
client-registered shared-memory region."""

from __future__ import annotations

import queue
import uuid
import zlib

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from tests.integration.kserve_cases import (
    TABLES,
    V2_CONFIG,
    assert_same,
    clients_of,
    infer,
    serving_grpc,
    v1_answer,
)
from tests.procs import child_env

pytestmark = pytest.mark.slow
TRANSPORTS = {"rest": httpclient, "grpc": grpcclient}
# (model, spec parameter or None for a table model, the /v1 body's spec)
MODELS = [
    ("rope", {"head_dim": 64}, {"head_dim": 64}),
    ("sinusoidal", {"d_model": 33, "layout": "interleaved"}, {"d_model": 33, "layout": "interleaved"}),
    ("gptj-rope", None, {**TABLES["gptj-rope"]["spec"], "dtype": "bfloat16"}),
    ("llama-3.1-8b", None, TABLES["llama-3.1-8b"]["spec"]),
    ("marian-512", None, TABLES["marian-512"]["spec"]),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving_grpc(
        tmp_path_factory, "v2-shortcut", V2_CONFIG, workers=1, env=child_env({"POSENC_SHORTCUT": "c"})
    ) as s:
        yield s


@pytest.fixture(scope="module")
def clients(server):
    with clients_of(server) as c:
        yield c


def family_of(model: str) -> str:
    return TABLES[model]["family"] if model in TABLES else model


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("model, spec, v1spec", MODELS, ids=[m[0] for m in MODELS])
@pytest.mark.parametrize("datatype, shape", [("INT64", (1,)), ("INT32", (3,)), ("INT64", (2, 3))])
def test_repeated_requests_answer_what_v1_answers(clients, transport, model, spec, v1spec, datatype, shape):
    rng = np.random.default_rng(zlib.crc32(f"{model} {shape}".encode()))
    for k in range(5):
        p = rng.integers(0, 2048, shape)
        if k == 3:
            p.flat[-1] = 5000  # past the 2048 rows: computed
        r = infer(TRANSPORTS[transport], clients[transport], model, {"positions": p}, spec, datatype=datatype)
        rows = p if p.ndim == 2 else p[None]
        for i, row in enumerate(rows):
            ref = v1_answer(clients["http"], family_of(model), {**v1spec, "positions": row.tolist()})
            assert_same(r, ref, row=i if p.ndim == 2 else None)


def test_a_stream_of_repeated_requests_answers_what_v1_answers(clients, server):
    c = grpcclient.InferenceServerClient(server.grpc_url)
    got: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        for k in range(30):
            i = grpcclient.InferInput("positions", [2], "INT64")
            i.set_data_from_numpy(np.array([k, 2 * k], np.int64))
            c.async_stream_infer("llama-3.1-8b", [i], request_id="s")
        answers = [got.get(timeout=30) for _ in range(30)]
    finally:
        c.stop_stream()
        c.close()
    for k, (result, error) in enumerate(answers):
        assert error is None
        assert_same(
            result,
            v1_answer(clients["http"], "rope", {**TABLES["llama-3.1-8b"]["spec"], "positions": [k, 2 * k]}),
        )


def test_outputs_into_shared_memory_are_what_v1_answers(clients):
    c = clients["grpc"]
    key = f"/posenc_test_{uuid.uuid4().hex[:8]}"
    half = 2 * 3 * 64 * 4
    handle = shm.create_shared_memory_region("out", key, 2 * half)
    try:
        c.register_system_shared_memory("out", key, 2 * half)
        rng = np.random.default_rng(7)
        for _ in range(4):
            p = rng.integers(0, 2048, (2, 3))
            i = grpcclient.InferInput("positions", [2, 3], "INT64")
            i.set_data_from_numpy(p)
            outs = [grpcclient.InferRequestedOutput(n) for n in ("cos", "sin")]
            for k, o in enumerate(outs):
                o.set_shared_memory("out", half, offset=k * half)
            c.infer("rope", [i], outputs=outs, parameters={"spec": '{"head_dim": 64}'})
            for k, name in enumerate(("cos", "sin")):
                got = shm.get_contents_as_numpy(handle, np.float32, [2, 3, 64], offset=k * half)
                for row in range(2):
                    ref = v1_answer(clients["http"], "rope", {"head_dim": 64, "positions": p[row].tolist()})
                    np.testing.assert_array_equal(got[row], ref[name])
        c.unregister_system_shared_memory("out")
    finally:
        shm.destroy_shared_memory_region(handle)
