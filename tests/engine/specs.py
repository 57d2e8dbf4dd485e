"""Valid base requests per family and small helpers to vary them, for the spec tests."""

from __future__ import annotations

import copy

R = {"head_dim": 64, "positions": [0, 1]}
S = {"d_model": 16, "positions": [0, 1]}
A = {"num_heads": 8, "query": [0], "key": [0, 1]}
T = {"query": [0], "key": [0, 1]}
BASES = {"rope": R, "sinusoidal": S, "alibi": A, "t5-buckets": T}

NAN = float("nan")


def w(base_, drop=(), **changes):
    r = copy.deepcopy(base_)
    for k in drop:
        r.pop(k, None)
    r.update(copy.deepcopy(changes))
    return r


def rs(rope_scaling, **top):
    """A rope request with the given rope_scaling block."""
    return w(R, rope_scaling=rope_scaling, **top)


LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
LONG = {
    "rope_type": "longrope",
    "short_factor": [1.0] * 32,
    "long_factor": [2.0] * 32,
    "original_max_position_embeddings": 4096,
}


def without(d, key):
    d = copy.deepcopy(d)
    del d[key]
    return d


def plus(d, **kv):
    d = copy.deepcopy(d)
    d.update(kv)
    return d


SF = ("rope_scaling", "factor")
