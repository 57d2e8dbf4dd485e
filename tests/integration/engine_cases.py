"""Specs, configs and helpers shared by the engine integration tests (tests/integration/test_engine_*.py)."""

from __future__ import annotations

import json

import numpy as np

from tests.procs import Procs
from tests.shm import SHM_DIR, held_segments

LENGTH = 4096  # rows of every configured table in these tests
ON_DEMAND_LENGTH = 131072  # the engine's DEFAULT_LENGTH: rows of a table built on demand


# ---------------------------------------------------------------------------------------------
# Specs and configs

LONGROPE = {
    "head_dim": 16,
    "rope_theta": 10000.0,
    "max_position_embeddings": 4096,
    "rope_scaling": {
        "rope_type": "longrope",
        "original_max_position_embeddings": 1024,
        "short_factor": [1.0 + 0.1 * i for i in range(8)],
        "long_factor": [2.0 + 0.5 * i for i in range(8)],
    },
}
LLAMA3 = {
    "head_dim": 64,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 1024,
    },
}
YARN = {
    "head_dim": 32,
    "max_position_embeddings": 4096,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024},
}
LINEAR = {"head_dim": 32, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
DYNAMIC = {
    "head_dim": 32,
    "max_position_embeddings": 2048,
    "rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
}
PARTIAL = {"head_dim": 64, "partial_rotary_factor": 0.25}

# Every family, every rope_type, every dtype.
FULL_CONFIG = {
    "length": LENGTH,
    "tables": [
        {"family": "rope", "spec": {"head_dim": 64}, "dtypes": ["float32", "bfloat16", "float16"]},
        {"family": "rope", "spec": PARTIAL},
        {"family": "rope", "spec": LLAMA3},
        {"family": "rope", "spec": LINEAR},
        {"family": "rope", "spec": YARN, "dtypes": ["float32", "bfloat16"]},
        {"family": "rope", "spec": LONGROPE},
        {"family": "rope", "spec": DYNAMIC},
        {"family": "sinusoidal", "spec": {"d_model": 33}, "dtypes": ["float32", "float16", "bfloat16"]},
        {"family": "sinusoidal", "spec": {"d_model": 31, "layout": "fairseq"}},
        {"family": "alibi", "spec": {"num_heads": 12}, "dtypes": ["float32", "float16", "bfloat16"]},
        {"family": "t5-buckets", "spec": {"bidirectional": True}},
        {"family": "t5-buckets", "spec": {"bidirectional": False}},
    ],
}

SMALL_CONFIG = {
    "length": LENGTH,
    "tables": [
        {"family": "rope", "spec": {"head_dim": 64}, "dtypes": ["float32", "bfloat16"]},
        {"family": "sinusoidal", "spec": {"d_model": 33}},
        {"family": "alibi", "spec": {"num_heads": 8}},
        {"family": "t5-buckets", "spec": {}},
    ],
}

# Positions inside the table, at its edge, past it (computed exactly), repeated, out of order.
PAST = [0, 1, 17, 4095, 4096, 4097, 131071, 131072, 2**31 - 1, 5, 5, 3]
RANGE = {"start": 4000, "stop": 4300, "step": 7}
Q_NEAR = {"start": 100, "stop": 130}
K_NEAR = [0, 99, 100, 101, 129, 200, 4000]  # distances < 4096: from the table
K_FAR = [0, 5, 128, 5000, 9000]  # distances >= 4096: computed
T5_KEYS = [0, 3, 64, 127, 128, 129, 1000, 999_990, 1_000_000, 2_000_000]


def _rope_cases():
    out = []
    for dt in ("float32", "bfloat16", "float16"):
        for layout in ("half_split", "interleaved"):
            out.append(("rope", {"head_dim": 64, "layout": layout, "positions": PAST, "dtype": dt}))
    out.append(("rope", {"head_dim": 64, "positions": RANGE}))
    out.append(("rope", {**PARTIAL, "positions": PAST}))
    out.append(("rope", {**LLAMA3, "positions": PAST}))
    out.append(("rope", {**LINEAR, "positions": PAST, "layout": "interleaved"}))
    for dt in ("float32", "bfloat16"):
        out.append(("rope", {**YARN, "positions": PAST, "dtype": dt}))
    out.append(("rope", {**LONGROPE, "positions": [0, 5, 1023]}))  # short factors
    out.append(("rope", {**LONGROPE, "positions": [0, 5, 1023, 1024, 5000]}))  # long factors
    out.append(("rope", {**LONGROPE, "seq_len": 100, "positions": [3000, 4100]}))  # short, past table
    out.append(("rope", {**DYNAMIC, "positions": [0, 5, 2047]}))  # table at L = M
    out.append(("rope", {**DYNAMIC, "seq_len": 1000, "positions": [10, 3000, 5000]}))
    out.append(("rope", {**DYNAMIC, "positions": [0, 3000]}))  # past M: computed
    return out


def _other_cases():
    out = []
    for dt, layout, offset in (
        ("float32", "interleaved", 0),
        ("bfloat16", "interleaved", 2),
        ("float16", "concat", 0),
        ("float32", "concat", 4093),
    ):
        out.append(
            (
                "sinusoidal",
                {"d_model": 33, "layout": layout, "offset": offset, "positions": PAST, "dtype": dt},
            )
        )
    out.append(("sinusoidal", {"d_model": 31, "layout": "fairseq", "offset": 1, "positions": PAST}))
    for dt in ("float32", "float16", "bfloat16"):
        out.append(("alibi", {"num_heads": 12, "query": Q_NEAR, "key": K_NEAR, "dtype": dt}))
    out.append(
        ("alibi", {"num_heads": 12, "query": Q_NEAR, "key": K_NEAR, "mask_future": True, "dtype": "float16"})
    )
    out.append(
        (
            "alibi",
            {
                "num_heads": 12,
                "mode": "symmetric",
                "heads": [3, 0, 3, 11],
                "query": Q_NEAR,
                "key": K_NEAR,
                "dtype": "bfloat16",
            },
        )
    )
    out.append(("alibi", {"num_heads": 12, "query": [0, 4095, 8000], "key": K_FAR}))  # past the table
    out.append(("alibi", {"num_heads": 12, "query": [0, 70000], "key": K_FAR, "dtype": "float16"}))  # refused
    for bidi in (True, False):
        out.append(("t5-buckets", {"bidirectional": bidi, "query": [0, 5, 100, 1_000_000], "key": T5_KEYS}))
    return out


ALL_CASES = _rope_cases() + _other_cases()
LOOP_CASES = [  # what looping readers check on every iteration
    ("rope", {"head_dim": 64, "positions": PAST}),
    ("rope", {"head_dim": 64, "layout": "interleaved", "positions": [7, 4095, 5000], "dtype": "bfloat16"}),
    ("sinusoidal", {"d_model": 33, "offset": 2, "positions": [0, 1, 4094, 9000]}),
    ("alibi", {"num_heads": 8, "query": [0, 10, 20], "key": [0, 5, 25, 30]}),
    ("t5-buckets", {"query": [0, 9], "key": [0, 1, 200, 5000]}),
]


# ---------------------------------------------------------------------------------------------
# Bit-for-bit comparison (bits_equal itself is in tests/children/bits.py, shared with the readers)


def _diff(name, got, want) -> str:
    if set(got) != set(want):
        return f"{name}: keys {sorted(got)} != {sorted(want)}"
    for k in want:
        g, w = np.asarray(got[k]), np.asarray(want[k])
        if g.dtype != w.dtype or g.shape != w.shape:
            return f"{name}.{k}: {g.dtype}{g.shape} != {w.dtype}{w.shape}"
        if g.tobytes() != w.tobytes():
            bad = np.argwhere(g.view(np.uint8).reshape(-1) != w.view(np.uint8).reshape(-1))
            return f"{name}.{k}: {len(bad)} bytes differ; got {g.reshape(-1)[:6]} want {w.reshape(-1)[:6]}"
    return ""


def reader(procs: Procs, ns: str, task: str, name: str = "reader", **args):
    """A reader process running one task of tests/children/reader.py with ``args``."""
    return procs.child("reader", task, ns, SHM_DIR, json.dumps(args), name=name)


def run_together(readers, go, stop=None) -> list[dict]:
    """Release reader processes at once (each waits for the file ``go`` after saying it is
    ready), wait for each to exit 0, and return each one's last JSON line. With ``stop``, the
    readers read until that file exists, and it is made once every one has said it is reading:
    they overlap however late one was scheduled."""
    for r in readers:
        r.wait_json(lambda m: m.get("ready"), timeout=60)
    go.touch()
    if stop is not None:
        for r in readers:
            r.wait_json(lambda m: m.get("reading"), timeout=60, what="its first round of reads")
        stop.touch()
    out = []
    for r in readers:
        r.expect_exit(0, timeout=60)
        out.append(r.json_lines()[-1])
    return out


def engine_stats(eng) -> dict:
    reply = eng.client().call({"op": "stats"})
    assert reply.get("ok"), reply
    return reply


def seg_files(eng, generation: int | None = None) -> list[str]:
    """The sealed segments engine ``eng`` (a tests/procs.py process) holds."""
    return held_segments(eng.pid, eng.namespace, generation)
