"""v2 infers of the block families (alibi, t5-buckets: inputs ``query`` and ``key``) on the shortcut,
end to end: a ``posenc serve`` with the C shortcut (POSENC_SHORTCUT=c) and the lane, driven by the
real tritonclient over REST (binary) and gRPC. The first two requests of a shape teach the shortcut
(service/v2/hot_blocks.py); every answer, before and after, is held bit for bit to the pipeline's
own arrays computed in this process (``posenc.engine.answer.pipeline``), on family and table models, every
dtype, positions inside and past the stored tables. A learnt ALiBi infer that arrives whole on an
idle connection is answered by the lane's one C call: ``posenc_answer_path_total{route=
"/v2/models/alibi/infer", path="c"}`` counts it (the test fails where blocks take the Python path)."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from posenc.engine.answer.pipeline import compute
from posenc.service.metrics.counters import FLUSH_S
from posenc.service.metrics.layout import PATHS
from posenc.service.shortcut import templates as replay
from tests.integration.kserve_cases import TABLES, V2_CONFIG, bits, serving_grpc
from tests.integration.test_kserve_shortcut import clients  # noqa: F401  (the fixture, over this module's server)
from tests.integration.test_metrics_paths import OK, Counted, scrape, send
from tests.procs import child_env
from tests.service.hot_helpers import needs_kernels
from tests.waits import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not replay.NATIVE, reason="the C paths need service._hot")]
TRANSPORTS = {"rest": httpclient, "grpc": grpcclient}
# (model, spec parameter or None for a table model, the spec compute() is given)
MODELS = [
    ("alibi", {"num_heads": 12}, {"num_heads": 12}),
    (
        "alibi",
        {"num_heads": 5, "mode": "symmetric", "dtype": "bfloat16"},
        {"num_heads": 5, "mode": "symmetric", "dtype": "bfloat16"},
    ),
    (
        "alibi",
        {"num_heads": 16, "heads": [3, 0], "mask_future": True, "dtype": "float16"},
        {"num_heads": 16, "heads": [3, 0], "mask_future": True, "dtype": "float16"},
    ),
    ("bloom-alibi", None, TABLES["bloom-alibi"]["spec"]),
    ("t5-buckets", {"num_buckets": 16, "max_distance": 64}, {"num_buckets": 16, "max_distance": 64}),
    ("t5-decoder", None, TABLES["t5-decoder"]["spec"]),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving_grpc(
        tmp_path_factory,
        "v2-blocks",
        V2_CONFIG,
        workers=1,
        args=["--lane", "on"],
        env=child_env({"POSENC_SHORTCUT": "c"}),
    ) as s:
        yield s


def block_inputs(module, q: np.ndarray, k: np.ndarray, qtype: str, ktype: str, key_first: bool) -> list:
    out = []
    for name, a, dt in (
        (("key", k, ktype), ("query", q, qtype)) if key_first else (("query", q, qtype), ("key", k, ktype))
    ):
        i = module.InferInput(name, [a.size], dt)
        i.set_data_from_numpy(a.astype(np.int32 if dt == "INT32" else np.int64))
        out.append(i)
    return out


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("model, spec, ref_spec", MODELS, ids=[f"{m[0]}-{i}" for i, m in enumerate(MODELS)])
def test_block_infers_answer_what_the_pipeline_computes(clients, transport, model, spec, ref_spec):  # noqa: F811
    rng = np.random.default_rng(zlib.crc32(f"{transport} {model} {spec}".encode()))
    qtype, ktype, key_first = (
        rng.choice(["INT32", "INT64"]),
        rng.choice(["INT32", "INT64"]),
        bool(rng.integers(2)),
    )
    family = TABLES[model]["family"] if model in TABLES else model
    for step in range(8):
        nq, nk = (1, 16) if step % 2 else (3, 5)  # two shapes, each learnt at its second answer
        if step >= 6:  # past the stored tables (2048): computed, far for the float32 and T5 ones
            far = 1 << (30 if ref_spec.get("dtype", "float32") == "float32" else 14)
            q, k = rng.integers(2048, far, nq), rng.integers(0, far, nk)
        elif step >= 4:  # a decode block inside the table: consecutive keys up to the query
            k = np.arange(100, 100 + nk)
            q = 99 + nk + rng.integers(0, 3, nq)
        else:
            q, k = rng.integers(0, 2048, nq), rng.integers(0, 2048, nk)
        params = {"spec": json.dumps(spec)} if spec is not None else None
        r = clients[transport].infer(
            model, block_inputs(TRANSPORTS[transport], q, k, qtype, ktype, key_first), parameters=params
        )
        ref = compute(family, {**ref_spec, "query": q.tolist(), "key": k.tolist()})
        for name, want in ref.items():
            got = bits(r.as_numpy(name))
            assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape)
            assert np.array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8)), (step, name)


def raw_block(model: str, spec: dict, q, k) -> bytes:
    """A v2 REST binary infer of int64 query and key, as one write of raw HTTP."""
    q, k = np.asarray(q, np.int64), np.asarray(k, np.int64)
    head = json.dumps(
        {
            "parameters": {"spec": json.dumps(spec), "binary_data_output": True},
            "inputs": [
                {
                    "name": n,
                    "datatype": "INT64",
                    "shape": [a.size],
                    "parameters": {"binary_data_size": a.nbytes},
                }
                for n, a in (("query", q), ("key", k))
            ],
        }
    ).encode()
    body = head + q.tobytes() + k.tobytes()
    return (
        b"POST /v2/models/%s/infer HTTP/1.1\r\nhost: t\r\ncontent-type: application/octet-stream\r\n"
        b"inference-header-content-length: %d\r\ncontent-length: %d\r\n\r\n%s"
        % (model.encode(), len(head), len(body), body)
    )


@needs_kernels  # float16 cells: the engine's C kernel
def test_learnt_alibi_infers_are_answered_by_the_lanes_c_call(server):
    route = "/v2/models/alibi/infer"
    spec = {"num_heads": 12, "dtype": "float16"}
    rng = np.random.default_rng(1)
    first = raw_block("alibi", spec, [7], np.arange(16))
    sent = [sum(scrape(server)[0].get(route, {}).get(p, 0.0) for p in PATHS)]

    def answered_in_c():
        """Send the block once; whether the lane's C call answered it. The full path answers until
        the key is learnt from the mapped table: at its second answer, or at the next one after its
        table (built on demand at the first) is mapped in the worker."""
        c = scrape(server)[0].get(route, {}).get("c", 0.0)
        assert send(server, first) == OK
        sent[0] += 1
        ways = wait_for(
            lambda: (w := scrape(server)[0].get(route, {})) and sum(w.values()) >= sent[0] and w,
            60,
            FLUSH_S,
            f"{sent[0]} answers of {route} counted",
        )
        return ways["c"] > c

    wait_for(answered_in_c, 120, 0, "the learnt ALiBi block answered by the lane's C call")
    counted = Counted(server, route)
    # one query, 16 keys, anywhere in the table (4096 rows, MIN_ON_DEMAND), then once past it (rows
    # computed in C): last, since a read past an on-demand table asks the engine for a longer one,
    # and the manifest that maps it drops the templates (learnt again at the next answers)
    for hi in (4096, 4096, 4096, 4096, 8192):
        assert send(server, raw_block("alibi", spec, rng.integers(0, hi, 1), rng.integers(0, hi, 16))) == OK
    counted.check(c=5)
    assert send(server, raw_block("alibi", spec, [200000], np.arange(16))).startswith(
        b"HTTP/1.1 400"
    )  # overflow
    counted.check(python=1)
