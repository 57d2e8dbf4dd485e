"""OpenAPI request schemas and examples for /docs, built from the engine's registries so the
documented names cannot drift from the accepted ones. Validation itself is the engine's strict
parser (engine.tables.*.parse), which names the field of every error."""

from __future__ import annotations

from posenc.engine.dtypes import DTYPES
from posenc.engine.tables import rope, sinusoidal, alibi
from posenc.engine.tables.rope import ROPE_TYPES

_SELECTION = {
    "oneOf": [
        {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}, "minItems": 1},
        {"type": "object", "additionalProperties": False, "required": ["start", "stop"],
         "properties": {"start": {"type": "integer", "minimum": 0},
                        "stop": {"type": "integer", "maximum": 2**31},
                        "step": {"type": "integer", "minimum": 1}}},
    ],
    "description": "positions: a list (any order, repeats allowed) or a half-open range",
}
_DTYPE = {"type": "string", "enum": list(DTYPES), "default": "float32"}
_SCALING_KEYS = sorted({k for t in ROPE_TYPES.values() for k in t.keys})
_SCALING = {
    "type": ["object", "null"],
    "description": "transformers' rope_scaling / rope_parameters; keys by rope_type: "
                   + "; ".join(f"{n}: {', '.join(t.keys) or '-'}" for n, t in ROPE_TYPES.items()),
    "properties": {"rope_type": {"type": "string", "enum": list(ROPE_TYPES)},
                   "type": {"type": "string", "enum": list(ROPE_TYPES)},
                   **{k: {} for k in _SCALING_KEYS}},
}

SCHEMAS = {
    "rope": {
        "type": "object", "additionalProperties": False, "required": ["head_dim", "positions"],
        "properties": {
            "head_dim": {"type": "integer", "minimum": 2},
            "rope_theta": {"type": "number", "exclusiveMinimum": 0, "default": 10000.0},
            "partial_rotary_factor": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 1.0},
            "max_position_embeddings": {"type": ["integer", "null"], "minimum": 1},
            "rope_scaling": _SCALING, "rope_parameters": _SCALING,
            "original_max_position_embeddings": {"type": ["integer", "null"], "minimum": 1},
            "seq_len": {"type": ["integer", "null"], "minimum": 1},
            "layout": {"type": "string", "enum": list(rope.LAYOUTS), "default": "half_split"},
            "positions": _SELECTION, "dtype": _DTYPE}},
    "sinusoidal": {
        "type": "object", "additionalProperties": False, "required": ["d_model", "positions"],
        "properties": {
            "d_model": {"type": "integer", "minimum": 2},
            "base": {"type": "number", "exclusiveMinimum": 1, "default": 10000.0},
            "layout": {"type": "string", "enum": list(sinusoidal.LAYOUTS), "default": "interleaved"},
            "offset": {"type": "integer", "minimum": 0, "default": 0},
            "positions": _SELECTION, "dtype": _DTYPE}},
    "alibi": {
        "type": "object", "additionalProperties": False, "required": ["num_heads", "query", "key"],
        "properties": {
            "num_heads": {"type": "integer", "minimum": 1},
            "heads": {"type": ["array", "null"], "items": {"type": "integer", "minimum": 0}, "minItems": 1},
            "max_bias": {"type": "number", "exclusiveMinimum": 0, "default": 8.0},
            "mode": {"type": "string", "enum": list(alibi.MODES), "default": "causal"},
            "mask_future": {"type": "boolean", "default": False},
            "query": _SELECTION, "key": _SELECTION, "dtype": _DTYPE}},
    "t5-buckets": {
        "type": "object", "additionalProperties": False, "required": ["query", "key"],
        "properties": {
            "bidirectional": {"type": "boolean", "default": True},
            "num_buckets": {"type": "integer", "minimum": 2, "default": 32},
            "max_distance": {"type": "integer", "minimum": 1, "default": 128},
            "query": _SELECTION, "key": _SELECTION}},
}

EXAMPLES = {
    "rope": {
        "llama-3.1 decode step": {"value": {
            "head_dim": 128, "rope_theta": 500000.0, "max_position_embeddings": 131072,
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
            "positions": [4096], "dtype": "bfloat16"}},
        "yarn prefill": {"value": {"head_dim": 64, "max_position_embeddings": 4096,
                                   "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
                                   "positions": {"start": 0, "stop": 16}}},
        "GPT-J interleaved, partial": {"value": {"head_dim": 256, "partial_rotary_factor": 0.25,
                                                 "layout": "interleaved", "positions": [0, 1, 2]}},
    },
    "sinusoidal": {
        "transformer-base": {"value": {"d_model": 512, "positions": [0, 1, 2, 3]}},
        "M2M100 (fairseq, padding_idx 1)": {"value": {"d_model": 1024, "layout": "fairseq", "offset": 2,
                                                     "positions": {"start": 0, "stop": 8}}},
    },
    "alibi": {
        "decode row, 32 heads": {"value": {"num_heads": 32, "query": [4095], "key": {"start": 0, "stop": 4096}}},
        "masked prefill, 12 heads": {"value": {"num_heads": 12, "mask_future": True, "dtype": "float16",
                                               "query": {"start": 0, "stop": 8}, "key": {"start": 0, "stop": 8}}},
    },
    "t5-buckets": {
        "encoder block": {"value": {"query": {"start": 0, "stop": 8}, "key": {"start": 0, "stop": 8}}},
        "decoder step": {"value": {"bidirectional": False, "query": [100], "key": {"start": 0, "stop": 101}}},
    },
}

RETURNS = {
    "rope": "cos, sin [n, d] (times attention_scaling), inv_freq [d/2] float32, attention_scaling",
    "sinusoidal": "encoding [n, d_model]",
    "alibi": "bias [len(heads), n_query, n_key], slopes [len(heads)] float32",
    "t5-buckets": "buckets [n_query, n_key] int32",
}
