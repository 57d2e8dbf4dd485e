"""service/core/sizing.py: every bound at least the bytes the encoder writes (safetensors
exactly), the float text's longest cell held over every float16 and bfloat16 value and a sample
of float32 bit patterns, and the chunked JSON text byte for byte orjson's."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from posenc.engine.answer import pipeline
from posenc.engine.core.encode import encode, json_ready
from posenc.engine.core.encode import json_text as orjson_text
from posenc.engine.process.configured import load_config, named_specs
from posenc.engine.tables import FAMILIES
from posenc.service.core import sizing

QWEN = {"head_dim": 128, "rope_theta": 1e6, "mrope_section": [16, 24, 24]}
HF = {
    "model_type": "llama",
    "hidden_size": 512,
    "num_attention_heads": 8,
    "rope_theta": 10000.0,
    "max_position_embeddings": 4096,
}
CASES = [
    ("rope", {"head_dim": 64, "positions": [0, 5, 70000]}),
    ("rope", {"head_dim": 128, "partial_rotary_factor": 0.25, "positions": {"start": 0, "stop": 300}}),
    ("rope", {**QWEN, "position_ids": [[1, 2, 3], [4, 5, 6], [7, 8, 9]]}),
    ("rope", {"hf_config": HF, "positions": [1, 2]}),
    ("rope", {"table": "llama-3.1-8b", "positions": [1, 2]}),
    ("sinusoidal", {"d_model": 30, "positions": {"start": 0, "stop": 200}}),
    ("sinusoidal-grid", {"embed_dim": 32, "grid_size": 20}),
    ("sinusoidal-grid", {"embed_dim": 64, "grid_size": [3, 4], "temporal_size": 2}),
    ("alibi", {"num_heads": 8, "query": {"start": 0, "stop": 40}, "key": {"start": 0, "stop": 50}}),
    ("alibi", {"num_heads": 1, "query": [3], "key": [0, 1, 2], "mask_future": True}),
    ("t5-buckets", {"query": {"start": 0, "stop": 30}, "key": {"start": 0, "stop": 31}}),
    ("t5-buckets", {"num_buckets": 1000, "max_distance": 5000, "query": [0], "key": [4999, 0]}),
]
DTYPES = ("float32", "float16", "bfloat16")


def _named():
    return named_specs(load_config(None))


def _answers(family, body):
    bodies = [body] if not FAMILIES[family].has_dtype else [{**body, "dtype": d} for d in DTYPES]
    for b in bodies:
        req = pipeline.parse(family, b, named=_named())
        yield req, pipeline.arrays(req)


@pytest.mark.parametrize("family,body", CASES)
def test_bounds_hold_and_safetensors_is_exact(family, body):
    for req, out in _answers(family, body):
        # the family's description of its answer (Family.outputs) is the answer's arrays
        arrays = {k: v for k, v in out.items() if k != "spec"}
        assert [n for n, _, _ in req.shapes()] == list(arrays)
        for name, shape, dt in req.shapes():
            a = arrays[name]
            if shape is None:
                assert type(a) is float and dt == "float64", name
            else:
                want_dt = np.uint16 if dt == "bfloat16" else np.dtype(dt)  # bfloat16: its bit patterns
                assert a.shape == shape and a.dtype == want_dt, (name, a.shape, a.dtype, shape, dt)
        for fmt in ("json", "npz", "safetensors"):
            got = len(encode(req.family, out, req.dtype, fmt)[0])
            want = sizing.bound(req, fmt)
            assert got <= want, (fmt, req.dtype, got, want)
            if fmt == "safetensors":
                assert got == want
        nb = req.nbytes()
        assert nb == sum(
            np.asarray(v).nbytes if not isinstance(v, float) else 8 for k, v in out.items() if k != "spec"
        )


def test_longest_float_text():
    opt = orjson.OPT_SERIALIZE_NUMPY
    f16 = np.arange(65536, dtype=np.uint16).view(np.float16)
    bf16 = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    rng = np.random.default_rng(0)
    f32 = rng.integers(0, 2**32, size=2_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    # the decades where fixed notation is longest (1e-5 .. 1e-4), every float32 of a slice of them
    f32b = np.arange(0x3727C5AC, 0x3727C5AC + 2_000_000, dtype=np.uint32).view(np.float32)
    longest = 0
    for a in (f16, bf16, f32, -f32b):
        longest = max(longest, max(map(len, orjson.dumps(a, option=opt)[1:-1].split(b","))))
    assert longest == sizing.FLOAT_TEXT  # reached: the bound is not loose


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_chunked_json_is_orjson(chunk):
    for family, body in CASES:
        for req, out in _answers(family, body):
            ready = {k: json_ready(v, req.dtype) for k, v in out.items()}
            assert sizing.json_text(ready, chunk) == orjson_text(ready), (family, req.dtype)


def test_too_large_names_format_and_selections():
    req = pipeline.parse(
        "sinusoidal-grid", {"embed_dim": 32, "grid_size": 1000, "dtype": "bfloat16", "positions": None}
    )
    assert pipeline.check(req, 64 * 2**20) <= 64 * 2**20  # the arrays fit ...
    with pytest.raises(sizing.AnswerTooLarge) as e:  # ... their JSON text does not
        sizing.check(req, "json", 64 * 2**20)
    assert (
        e.value.status == 413 and "JSON" in str(e.value) and "positions (1000000 positions)" in str(e.value)
    )
    assert 64_000_000 < sizing.check(req, "safetensors", 64 * 2**20) < 64_000_000 + 256


def test_json_blocks_are_the_text_in_consecutive_blocks():
    req = pipeline.parse("sinusoidal", {"d_model": 64, "positions": {"start": 0, "stop": 40_000}})
    ready = {k: json_ready(v, req.dtype) for k, v in pipeline.arrays(req).items()}
    blocks = sizing.json_blocks(ready)
    assert isinstance(blocks, sizing.Blocks) and len(blocks) > 2
    assert all(len(b) < 2 * sizing.BLOCK_BYTES for b in blocks)
    assert blocks.joined() == orjson_text(ready) and blocks.nbytes == len(orjson_text(ready))
    small = {"e": ready["encoding"][:3]}
    assert sizing.json_blocks(small) == orjson_text(small)
