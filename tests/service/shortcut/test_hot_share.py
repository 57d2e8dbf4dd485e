"""How much the C shortcut answers, and what: for each family, seeded bodies of a known kind go to
``Service.hot`` in-process. Plain bodies of a spec with a mapped table must all be answered by C
(those of a spec it does not serve, none), and so must rows past the table (computed with the
engine's sincos kernel); ALiBi blocks past its byte limit must all be left to the full path; every C
answer is decoded with stock safetensors and held directly to transformers or
to float64 references written from docs/reference.md, not only to posenc's other paths."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
from safetensors.torch import load as load_safetensors

from posenc.engine.tables.base import DEFAULT_LENGTH  # the rows of a table built on demand
from tests.engine.float64_refs import bias64, sinusoidal64, slopes64
from tests.engine.rope_refs import (
    hf_module_cos_sin,
    hf_tol,
    ref_cos_sin64,
    ref_inv64,
    rope_exponents,
    to_interleaved,
)
from tests.numeric import SEED, angle_slack, assert_close, assert_rounded_once, assert_within_ulp
from tests.service.hot_helpers import learn_mapped, needs_native
from tests.service_cases import ACCEPT_HDRS, orjson_dumps, reference_safetensors

N = 40  # bodies of each kind per case
TABLE = 2048  # rows of the engine's configured tables (service_cases.CONFIG)


def rope_rows(r, past=False, table=TABLE):
    rows = r.integers(0, table, int(r.integers(1, 65))).tolist()
    if past:  # one position past the table: computed by C
        rows[int(r.integers(len(rows)))] = int(r.integers(table, 2**31))
    return {"positions": rows}


def sinusoidal_rows(r, past=False, table=TABLE):
    if r.integers(2):
        start = int(r.integers(0, table - 64))
        sel = {"start": start, "stop": start + int(r.integers(1, 64))}
        if past:
            sel = {"start": table - 3, "stop": table + 5}
        return {"positions": sel}
    return rope_rows(r, past, table)


def on_demand_rows(r, past=False):  # a table the engine built on demand: its length
    return sinusoidal_rows(r, past, table=DEFAULT_LENGTH)


def alibi_decode(r, past=False):
    q = int(r.integers(0, 3 * TABLE))  # distances past the table are computed by C too
    if past:  # a block over the 4 MiB the shortcut fills
        return {"query": [q, q + 1, q + 2], "key": {"start": 0, "stop": 400_000}}  # >= 3 heads: 14 MB
    return {"query": [q], "key": {"start": int(r.integers(0, q + 1)), "stop": q + 1}}


# id -> (family, spec, selection maker, whether C serves the spec)
CASES = {
    "rope-f32": ("rope", {"head_dim": 64}, rope_rows, True),
    "rope-bf16-interleaved": (
        "rope",
        {"head_dim": 64, "layout": "interleaved", "dtype": "bfloat16"},
        rope_rows,
        True,
    ),
    "sinusoidal-mapped": ("sinusoidal", {"d_model": 33}, sinusoidal_rows, True),
    # no configured table of this layout and dtype: the first answers have the engine build it on
    # demand, and C answers from it as from a configured one
    "sinusoidal-on-demand": (
        "sinusoidal",
        {"d_model": 33, "layout": "concat", "dtype": "bfloat16"},
        on_demand_rows,
        True,
    ),
    # ALiBi blocks other than float32: the engine's block kernel, lent to C (overflow: the full path's)
    "alibi-f16": ("alibi", {"num_heads": 12, "dtype": "float16"}, alibi_decode, True),
    "alibi-decode": ("alibi", {"num_heads": 12}, alibi_decode, True),
    "alibi-heads-masked": (
        "alibi",
        {"num_heads": 12, "heads": [11, 0, 0], "mask_future": True},
        alibi_decode,
        True,
    ),
    "alibi-symmetric": ("alibi", {"num_heads": 12, "mode": "symmetric"}, alibi_decode, True),
    "alibi-bf16-masked": (
        "alibi",
        {"num_heads": 12, "mask_future": True, "dtype": "bfloat16"},
        alibi_decode,
        True,
    ),
}


def decoded(raw: bytes, dtype: str) -> dict[str, np.ndarray]:
    """A safetensors answer read by the stock library (bfloat16 as its uint16 bits)."""
    out = {}
    for k, t in load_safetensors(raw).items():
        out[k] = t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()
    return out


def check_directly(family: str, spec: dict, sel: dict, arrays: dict) -> None:
    dtype = spec.get("dtype", "float32")
    if family == "rope":
        pos = sel["positions"]
        inv64, alpha = ref_inv64(spec, max(pos) + 1)
        cos64, sin64, ang = ref_cos_sin64(inv64, alpha, pos)
        e, base = rope_exponents(spec, max(pos) + 1)
        slack = angle_slack(ang, np.concatenate([e, e])[None, :], base, alpha)
        hcos, hsin = hf_module_cos_sin(spec, pos)
        if spec.get("layout") == "interleaved":
            cos64, sin64, slack = to_interleaved(cos64), to_interleaved(sin64), to_interleaved(slack)
            hcos, hsin = to_interleaved(hcos), to_interleaved(hsin)
        assert_within_ulp(arrays["cos"], cos64, dtype, slack=slack, what="C rope cos vs float64")
        assert_within_ulp(arrays["sin"], sin64, dtype, slack=slack, what="C rope sin vs float64")
        if dtype == "float32":  # and transformers' own forward, at its float32 error
            assert_close(arrays["cos"], hcos, atol=hf_tol(pos, alpha), what="C rope cos vs transformers")
            assert_close(arrays["sin"], hsin, atol=hf_tol(pos, alpha), what="C rope sin vs transformers")
    elif family == "sinusoidal":
        p = sel["positions"]
        pos = p if isinstance(p, list) else list(range(p["start"], p["stop"]))
        want, slack = sinusoidal64(spec["d_model"], pos, spec.get("layout", "interleaved"))
        assert_within_ulp(arrays["encoding"], want, dtype, slack=slack, what="C sinusoidal vs float64")
    else:
        heads = spec.get("heads", list(range(spec["num_heads"])))
        k = sel["key"]
        keys = list(range(k["start"], k["stop"]))
        want = bias64(slopes64(spec["num_heads"])[heads], sel["query"], keys, spec.get("mode", "causal"))
        if spec.get("mask_future"):
            future = np.asarray(keys)[None, None, :] > np.asarray(sel["query"])[None, :, None]
            want = np.where(future, -float(np.finfo(np.float32).max), want)
        assert_rounded_once(arrays["bias"], want, dtype, what="C alibi vs float64")


@needs_native
@pytest.mark.parametrize("case", CASES)
def test_c_answers_exactly_the_plain_bodies(learnt, case):
    family, spec, make, serves = CASES[case]
    r = np.random.default_rng([SEED, zlib.crc32(case.encode())])
    if make is on_demand_rows:  # a table as long as the engine builds them
        learn_mapped(learnt, family, {**spec, "positions": [DEFAULT_LENGTH - 1]})
    learn_mapped(learnt, family, {**spec, **make(r)})  # learn the template
    plain = [make(r) for _ in range(N)]
    past = [make(r, past=True) for _ in range(N)]
    answers = [learnt.hot(family, orjson_dumps({**spec, **sel}), ACCEPT_HDRS) for sel in plain]
    assert sum(a is not None for a in answers) == (N if serves else 0), case
    past_answers = [learnt.hot(family, orjson_dumps({**spec, **sel}), ACCEPT_HDRS) for sel in past]
    if family == "alibi":  # over the bytes the shortcut fills
        assert all(a is None for a in past_answers), case
    else:  # rows past the table: computed in C, held to the references below
        assert sum(a is not None for a in past_answers) == (N if serves else 0), case
        plain, answers = plain + past, answers + past_answers
    for sel, raw in zip(plain, answers):
        if raw is None:
            continue
        assert raw == reference_safetensors(family, {**spec, **sel}), sel
        check_directly(family, spec, sel, decoded(raw, spec.get("dtype", "float32")))
