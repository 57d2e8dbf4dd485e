"""Service answers held to float64 references written from docs/reference.md's formulas, never
posenc's code (tests/engine/float64_refs.py and tests/engine/rope_refs.py hold them; T5's is here).

``assert_answer(family, body, arrays)`` checks one decoded answer (JSON lists, or the arrays of a
safetensors or npz body, bfloat16 as uint16 bits) against the reference of ``body``: every float
within half an ulp of the float64 value (give or take that reference's own error, which
numeric.angle_slack bounds), ALiBi's exactly the float64 value rounded once, T5's buckets equal.
The service tests use it so that a wrong formula in posenc cannot agree with itself.
"""

from __future__ import annotations

import json
import math

import numpy as np

from tests.engine.float64_refs import bias64, grid64, sinusoidal64, slopes64
from tests.engine.rope_refs import (
    lay,
    ref_axes64,
    ref_cos_sin64,
    ref_inv64,
    ref_mrope64,
    rope_exponents,
    to_interleaved,
)
from tests.numeric import angle_slack, assert_rounded_once, assert_within_ulp


def positions_of(sel) -> list[int]:
    """A selection (a list, or {"start", "stop", "step"}) as its list of positions."""
    if isinstance(sel, dict):
        step = sel.get("step")
        return list(range(sel["start"], sel["stop"], 1 if step is None else step))  # "step": null is 1
    return list(sel)


def t5_buckets64(query, key, bidirectional=True, num_buckets=32, max_distance=128) -> np.ndarray:
    """T5's relative-position bucket of key − query, the formula of docs/reference.md evaluated
    value by value in float64 (it agrees with T5's float32 for these distances)."""
    out = np.empty((len(query), len(key)), dtype=np.int32)
    for a, q in enumerate(query):
        for b, k in enumerate(key):
            rel, nb, bucket = k - q, num_buckets, 0
            if bidirectional:
                nb //= 2
                bucket += nb if rel > 0 else 0
                n = abs(rel)
            else:
                n = max(-rel, 0)
            me = nb // 2
            if n < me:
                bucket += n
            else:
                bucket += min(me + int(math.log(n / me) / math.log(max_distance / me) * (nb - me)), nb - 1)
            out[a, b] = bucket
    return out


_SAFETENSORS_DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": np.uint16,
    "I64": np.int64,
    "I32": np.int32,
}


def safetensors_arrays(raw: bytes) -> dict:
    """The arrays of a safetensors body, read by the format's definition (an 8-byte little-endian
    header length, a JSON header of each tensor's dtype, shape and data_offsets, then the data), not
    by posenc's writer's code: bfloat16 as uint16 bits."""
    n = int.from_bytes(raw[:8], "little")
    data = memoryview(raw)[8 + n :]
    out = {}
    for name, t in json.loads(bytes(raw[8 : 8 + n])).items():
        if name != "__metadata__":
            a, b = t["data_offsets"]
            out[name] = np.frombuffer(data[a:b], dtype=_SAFETENSORS_DTYPES[t["dtype"]]).reshape(t["shape"])
    return out


def assert_c_answer(family: str, body: dict, raw: bytes, what: str = "") -> None:
    """A C answer (a safetensors body) decoded and held to the float64 reference of ``body``: the C
    shortcut's bytes are checked against the docs' formulas, not only against the pipeline's bytes."""
    assert_answer(family, body, safetensors_arrays(raw), what or f"C answer {family} {body}")


def as_storage(value, dtype: str) -> np.ndarray:
    """An answer's array as the output dtype's storage (JSON lists come as their float values;
    bfloat16 as uint16 bit patterns, which is how binary answers carry it)."""
    a = np.asarray(value)
    if dtype == "bfloat16":
        if a.dtype == np.uint16:
            return a
        bits = np.asarray(value, dtype=np.float32).view(np.uint32)
        assert not (bits & 0xFFFF).any(), "a bfloat16 value that is not a bfloat16"
        return (bits >> 16).astype(np.uint16)
    return np.asarray(value, dtype=dtype)


def assert_answer(family: str, body: dict, arrays: dict, what: str = "") -> None:
    dtype = body.get("dtype", "float32")
    what = what or f"{family} {body}"
    if family == "rope" and body.get("position_ids") is not None:
        _assert_multiaxis(body, arrays, dtype, what)
    elif family == "rope":
        pos = positions_of(body["positions"])
        inv64, alpha = ref_inv64(body, max(pos) + 1)
        cos64, sin64, ang = ref_cos_sin64(inv64, alpha, pos)
        e, base = rope_exponents(body, max(pos) + 1)
        slack = angle_slack(ang, np.concatenate([e, e])[None, :], base, alpha)
        if body.get("layout") == "interleaved":
            cos64, sin64, slack = to_interleaved(cos64), to_interleaved(sin64), to_interleaved(slack)
        assert_within_ulp(as_storage(arrays["cos"], dtype), cos64, dtype, slack=slack, what=f"{what} cos")
        assert_within_ulp(as_storage(arrays["sin"], dtype), sin64, dtype, slack=slack, what=f"{what} sin")
        assert_within_ulp(
            as_storage(arrays["inv_freq"], "float32"),
            inv64,
            "float32",
            slack=angle_slack(inv64, e, base),
            what=f"{what} inv_freq",
        )
        assert abs(float(np.asarray(arrays["attention_scaling"])) - alpha) <= 1e-13 * alpha, what
    elif family == "sinusoidal":
        pos = positions_of(body["positions"])
        want, slack = sinusoidal64(
            body["d_model"],
            pos,
            body.get("layout", "interleaved"),
            base=body.get("base", 10000.0),
            offset=body.get("offset", 0),
        )
        assert_within_ulp(
            as_storage(arrays["encoding"], dtype), want, dtype, slack=slack, what=f"{what} encoding"
        )
    elif family == "sinusoidal-grid":
        g = body["grid_size"]
        h, w = (g, g) if isinstance(g, int) else g
        rows = positions_of(body["positions"]) if body.get("positions") is not None else None
        if body.get("crop") is not None:  # the window's rows are those rows of the whole table
            top, left, ch, cw = body["crop"]
            extra, frames = body.get("extra_tokens", 0), body.get("temporal_size") or 1
            rows = np.arange(extra + frames * ch * cw) if rows is None else np.asarray(rows)
            i, j = divmod(rows - extra, cw)
            rows = np.where(rows < extra, rows, extra + (top + i) * w + left + j)
        want, slack = grid64(
            body["embed_dim"],
            h,
            w,
            body.get("base_size"),
            body.get("interpolation_scale", 1.0),
            body.get("temporal_size"),
            body.get("temporal_interpolation_scale", 1.0),
            body.get("extra_tokens", 0),
            rows=rows,
        )
        assert_within_ulp(
            as_storage(arrays["encoding"], dtype), want, dtype, slack=slack, what=f"{what} encoding"
        )
    elif family == "alibi":
        q, k = positions_of(body["query"]), positions_of(body["key"])
        slopes = slopes64(body["num_heads"], body.get("max_bias", 8.0))
        heads = body.get("heads") or list(range(body["num_heads"]))
        slopes = slopes[heads]
        want = bias64(slopes, q, k, body.get("mode", "causal"))
        if body.get("mask_future"):
            low = {
                "float32": -np.finfo(np.float32).max,
                "float16": -65504.0,
                "bfloat16": -3.3895313892515355e38,
            }
            want = np.where(np.asarray(k)[None, None, :] > np.asarray(q)[None, :, None], low[dtype], want)
        assert_rounded_once(as_storage(arrays["bias"], dtype), want, dtype, what=f"{what} bias")
        assert_rounded_once(as_storage(arrays["slopes"], "float32"), slopes, "float32", what=f"{what} slopes")
    elif family == "t5-buckets":
        want = t5_buckets64(
            positions_of(body["query"]),
            positions_of(body["key"]),
            body.get("bidirectional", True),
            body.get("num_buckets", 32),
            body.get("max_distance", 128),
        )
        got = np.asarray(arrays["buckets"])
        assert got.dtype.kind == "i" or isinstance(arrays["buckets"], list), got.dtype
        assert np.array_equal(got.astype(np.int64), want), f"{what}: buckets differ from T5's formula"
    else:
        raise AssertionError(f"no independent reference for {family}")


def _assert_multiaxis(body: dict, arrays: dict, dtype: str, what: str) -> None:
    """rope with position_ids: mrope_section (one frequency set dealt to the axes) or axes_dim
    (a set per axis), each column at its axis's position (docs/reference.md, rope)."""
    ids = np.asarray(body["position_ids"])
    layout = body.get("layout", "half_split")
    if body.get("axes_dim"):
        theta = body.get("rope_theta", 10000.0)
        angs, exps = ref_axes64(body["axes_dim"], theta, ids)
        cos64, sin64 = lay([np.cos(a) for a in angs], layout), lay([np.sin(a) for a in angs], layout)
        slack = lay([angle_slack(a, e[None, :], theta) for a, e in zip(angs, exps)], layout)
        inv64 = np.concatenate([1.0 / theta**e for e in exps])
        inv_slack = np.concatenate([angle_slack(1.0 / theta**e, e, theta) for e in exps])
        alpha = 1.0
    else:
        ang, alpha, inv64 = ref_mrope64(body, ids, int(ids.max()) + 1)
        e, base = rope_exponents(body, int(ids.max()) + 1)
        cos64, sin64 = lay([np.cos(ang) * alpha], layout), lay([np.sin(ang) * alpha], layout)
        slack = lay([angle_slack(ang, e[None, :], base, alpha)], layout)
        inv_slack = angle_slack(inv64, e, base)
    assert_within_ulp(as_storage(arrays["cos"], dtype), cos64, dtype, slack=slack, what=f"{what} cos")
    assert_within_ulp(as_storage(arrays["sin"], dtype), sin64, dtype, slack=slack, what=f"{what} sin")
    assert_within_ulp(
        as_storage(arrays["inv_freq"], "float32"), inv64, "float32", slack=inv_slack, what=f"{what} inv_freq"
    )
    assert abs(float(np.asarray(arrays["attention_scaling"])) - alpha) <= 1e-13 * alpha, what
