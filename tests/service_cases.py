"""Requests, table configs and helpers shared by the service tests (in-process, tests/service) and
the served-HTTP tests (tests/integration/test_serve_*.py)."""

from __future__ import annotations

import numpy as np
import orjson

from posenc.engine.answer.pipeline import compute
from posenc.engine.core import formats
from posenc.engine.core.dtypes import bf16_bits_to_f32

LLAMA3_8K = {
    "head_dim": 128,
    "rope_theta": 500000.0,
    "max_position_embeddings": 131072,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}

# The tables the test server's engine holds: 2048 rows, every family.
CONFIG = {
    "length": 2048,
    "tables": [
        {"family": "rope", "spec": {"head_dim": 64}, "dtypes": ["float32", "bfloat16"]},
        {"family": "rope", "spec": LLAMA3_8K},
        {"family": "sinusoidal", "spec": {"d_model": 33}},
        {"family": "alibi", "spec": {"num_heads": 12}, "dtypes": ["float32", "float16"]},
        {"family": "t5-buckets", "spec": {}},
    ],
}

BIN = {"accept": "application/x-safetensors"}
# The ASGI headers of a safetensors request, as the raw front and the shortcuts see them.
ACCEPT_HDRS = [
    (b"host", b"x"),
    (b"content-type", b"application/json"),
    (b"accept", b"application/x-safetensors"),
]

# A valid body per family (tests vary one field at a time).
VALID = {
    "rope": {"head_dim": 64, "positions": [1]},
    "sinusoidal": {"d_model": 8, "positions": [1]},
    "sinusoidal-grid": {"embed_dim": 8, "grid_size": [2, 3], "positions": [1]},
    "alibi": {"num_heads": 12, "query": [1], "key": [0]},
    "t5-buckets": {"query": [0], "key": [1]},
}

REQUESTS = [
    ("rope", {"head_dim": 64, "positions": [0, 1, 7, 2047, 2048, 131072, 400000]}),
    (
        "rope",
        {
            "head_dim": 64,
            "positions": {"start": 100, "stop": 140},
            "dtype": "bfloat16",
            "layout": "interleaved",
        },
    ),
    ("rope", {**LLAMA3_8K, "positions": [5, 9000], "dtype": "float16"}),
    (
        "rope",
        {
            "head_dim": 96,
            "partial_rotary_factor": 0.5,
            "max_position_embeddings": 4096,
            "rope_scaling": {"type": "yarn", "factor": 4.0},
            "positions": [3, 4000],
        },
    ),
    (
        "rope",
        {
            "head_dim": 64,
            "max_position_embeddings": 1024,
            "rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
            "positions": [10, 3000],
        },
    ),
    ("sinusoidal", {"d_model": 33, "positions": [0, 5, 2047, 5000], "layout": "interleaved"}),
    (
        "sinusoidal",
        {"d_model": 33, "positions": [0, 5], "layout": "concat", "offset": 3, "dtype": "bfloat16"},
    ),
    ("sinusoidal", {"d_model": 32, "positions": [0, 5], "layout": "fairseq", "offset": 2}),
    ("alibi", {"num_heads": 12, "query": [4095], "key": {"start": 0, "stop": 4096}}),
    (
        "alibi",
        {
            "num_heads": 12,
            "heads": [11, 0, 0],
            "query": {"start": 0, "stop": 6},
            "key": {"start": 0, "stop": 6},
            "mask_future": True,
            "dtype": "float16",
        },
    ),
    ("alibi", {"num_heads": 12, "query": [200000], "key": [0, 199999], "mode": "causal"}),
    ("alibi", {"num_heads": 5, "query": [3, 1], "key": [0, 9], "mode": "symmetric", "dtype": "bfloat16"}),
    ("t5-buckets", {"query": {"start": 0, "stop": 5}, "key": {"start": 0, "stop": 300}}),
    (
        "t5-buckets",
        {
            "bidirectional": False,
            "num_buckets": 16,
            "max_distance": 64,
            "query": [1000000],
            "key": [0, 999999, 1000000, 1000001],
        },
    ),
]
REQUEST_IDS = [f"{f}-{i}" for i, (f, _) in enumerate(REQUESTS)]


def orjson_dumps(obj) -> bytes:
    return orjson.dumps(obj)


def as_float(a: np.ndarray, dtype) -> np.ndarray:
    return bf16_bits_to_f32(a) if dtype == "bfloat16" and a.dtype == np.uint16 else a


def reference_safetensors(family: str, body: dict) -> bytes:
    """The safetensors bytes of the library's answer to ``body`` (bfloat16 arrays as such)."""
    ref = compute(family, body)
    bf16 = (
        frozenset(k for k, v in ref.items() if isinstance(v, np.ndarray) and v.dtype == np.uint16)
        if body.get("dtype") == "bfloat16"
        else frozenset()
    )
    return formats.to_safetensors(ref, bf16, {"family": family})


def padded_rope_body(size: int) -> bytes:
    """A valid rope body ({"head_dim": 64, "positions": [1, 2]}, the learnt template's key order)
    of exactly ``size`` bytes: blanks inside its positions list."""
    head, tail = b'{"head_dim":64,"positions":[1,', b"2]}"
    return head + b" " * (size - len(head) - len(tail)) + tail
