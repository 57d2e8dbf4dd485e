"""Writes docs/reference.md, the complete contract of posenc, from the registry where the registry
can say it and from the prose below where it cannot:

    .venv/bin/python -m tests.tools.reference > docs/reference.md      # regenerate
    .venv/bin/python -m tests.tools.reference --check                  # exit 1 if docs/reference.md is stale

Generated: the families and their fields, types, bounds, defaults and examples (each family's
request schema, ``engine/tables``), the arrays each answers and which take the request's dtype,
the rope types and their keys (``ROPE_TYPES``), the model types ``hf_config`` reads
(``engine/models/registry.py``), the dtypes, the selection bounds, every error and its status
(``engine/core/errors.py``, ``service/core/errors.py`` and the v2 errors), the limits and their
settings (``service/core/settings.py``), the media types (``service/front/negotiate.py``) and the
KServe v2 models' inputs and outputs
(``service/v2``). A field added to a family without a line of prose here stops the generator
(``MEANING``), so the page cannot silently fall behind. tests/test_docs.py asserts the page equals
this output.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import sys
from pathlib import Path

from posenc.engine.core import dtypes, errors
from posenc.engine.core.selection import POSITION_LIMIT
from posenc.engine.models import registry
from posenc.engine.tables import FAMILIES
from posenc.engine.tables.base import DEFAULT_LENGTH
from posenc.engine.tables.rope_types import ROPE_TYPES
from posenc.service.core import errors as service_errors
from posenc.service.core import settings
from posenc.service.front import negotiate
from posenc.service.v2 import errors as v2errors
from posenc.service.v2 import models as v2models
from posenc.service.v2 import tensors as v2tensors
from tests.tools import diffusers_zoo

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference.md"

# -- prose: what each field means (the schema gives its type, bounds and default) -------------------
MEANING = {
    "rope": {
        "head_dim": "D, the per-head dimension (transformers' `head_dim`)",
        "rope_theta": "θ, the base of the frequencies",
        "partial_rotary_factor": "the rotary width is d = int(D · factor) (Python's `int`), ≥ 2; an odd d (`default`, "
        "`linear`, `dynamic`, `llama3`) is taken as transformers takes it: ⌈d/2⌉ frequencies 1/θ^(2k/d) and "
        "d + 1 columns of cos and sin (what its rotary class hands attention, which rotates that many)",
        "max_position_embeddings": "M; required by `dynamic`, and the default `original_max_position_embeddings` "
        "of `yarn`, `llama3` and `longrope`",
        "rope_scaling": '`{"rope_type": ..., ...}` with transformers\' keys (below); `"type"` is accepted for '
        '`"rope_type"`; null or absent means `default`',
        "rope_parameters": "transformers 5's name for `rope_scaling` (send one or the other), which may also hold "
        "`rope_theta` and `partial_rotary_factor`",
        "original_max_position_embeddings": "the top-level form of Phi-3 configs: overrides the one inside "
        "`rope_scaling`, as transformers does (yarn, llama3, longrope only)",
        "seq_len": "`dynamic` and `longrope` only: the sequence length that picks the frequencies; null means "
        "max(position) + 1; a value below that is allowed",
        "layout": "`half_split`: Llama/NeoX `rotate_half` pairing (k, k + d/2); `interleaved`: GPT-J/RoFormer "
        "pairing (2k, 2k + 1)",
        "mrope_section": "Qwen2-VL / Qwen2.5-VL multimodal RoPE: the d/2 frequencies are dealt to the axes in "
        "contiguous runs of these counts (sum d/2), frequency k evaluated at its axis's position",
        "mrope_interleaved": "with `mrope_section`: Qwen3-VL's dealing (frequency k goes to axis 1 when k mod 3 = 1 "
        "and k < 3·section[1], to axis 2 when k mod 3 = 2 and k < 3·section[2], else to axis 0)",
        "mrope_axes": "the axis (0 … 7) each of the d/2 frequencies takes its position from, instead of "
        "`mrope_section`: the dealings no rule above names, as [models.md](models.md) reads them from configs "
        "(ERNIE-4.5-VL: [1, 2, 1, 2, …] over its h + w frequencies, then 0 for t; NeoMME: [0, 1, 0, 1, …]; "
        "Qwen4-Exp and the Qwen3-Omni talker: Qwen3-VL's rule over 3·section[a] < d/2 columns)",
        "axes_dim": "one frequency set per axis (diffusers' Flux `axes_dims_rope`): axis a rotates `axes_dim[a]` "
        "columns with frequencies θ^(−2j/axes_dim[a]); blocks concatenated in order, `layout` within "
        "each block; sum = d; `default` rope_type only",
        "inv_freq": "the d/2 frequencies as data, in half-column order (the order the axes' dealing uses), "
        "instead of θ (`default` rope_type only): what a model's library computes where no rope_type "
        "says it (timm's bands, DINOv3's 2π/period; [Token grids](#token-grids))",
        "axes_coords": "with `mrope_section`, `mrope_axes` or `axes_dim`: per axis `[scale, offset]`; index i "
        "of that axis in `position_ids` stands for the coordinate scale·i + offset, evaluated in float64",
        "positions": "required unless `position_ids` is given: the positions p of the rows (with `mrope_section`: "
        "every axis at p, i.e. text tokens)",
        "position_ids": "with `mrope_section`, `mrope_axes` or `axes_dim`, instead of `positions`: one list of positions per axis "
        "(transformers' [3, n] layout), all of one length",
        "dtype": "the dtype of `cos` and `sin`",
    },
    "sinusoidal-grid": {
        "embed_dim": "D; divisible by 4 (by 16 with `temporal_size`)",
        "grid_size": "patches per side, or [H, W]",
        "base_size": "diffusers' `base_size`: coordinates along an axis of n patches are i / (n / base_size) / "
        "interpolation_scale; null means i / interpolation_scale (MAE, timm, transformers' ViTMAE)",
        "interpolation_scale": "as diffusers",
        "temporal_size": "3-D (CogVideoX `get_3d_sincos_pos_embed`): the number of frames T",
        "temporal_interpolation_scale": "3-D: frame coordinates are t / this",
        "extra_tokens": "rows of zeros before the grid (a CLS token; CogVideoX's text tokens)",
        "crop": "2-D: [top, left, height, width], the rows are this window of the grid_size table, at "
        "that table's coordinates (SD3's and OmniGen's centred crop of their `pos_embed_max_size` table)",
        "positions": "rows of the flattened table (extra tokens first, then t-major, h-major); absent means every row",
        "dtype": "the dtype of `encoding`",
    },
    "sinusoidal": {
        "d_model": "the width d",
        "base": "the base of the frequencies (10000 in every published model)",
        "layout": '`interleaved`: sin at even, cos at odd columns ("Attention Is All You Need", DistilBERT); '
        "`concat`: all sin then all cos, same frequencies (Marian, RoFormer, Pegasus); `fairseq`: "
        "concat with exponent k/(d/2 − 1) and a zero column for odd d (fairseq, tensor2tensor, "
        "M2M100, XGLM); `fairseq_cos_first`: the same with the cos half first (MusicGen)",
        "offset": "added to every position before evaluating (fairseq-style models index rows at "
        "position + padding_idx + 1)",
        "positions": "the positions p of the rows",
        "dtype": "the dtype of `encoding`",
    },
    "alibi": {
        "num_heads": "H; the slopes follow the ALiBi paper, including its rule for H not a power of two",
        "heads": "which heads, in output order; entries in [0, H), repeats allowed; null means all",
        "max_bias": "the paper's 8 (MPT's `alibi_bias_max`)",
        "mode": "`causal`: B[h, i, j] = −m_h · (i − j); `symmetric`: −m_h · |i − j|",
        "mask_future": "`causal` only: cells with j > i get the output dtype's most negative finite value "
        "(as transformers masks)",
        "query": "the absolute query positions i",
        "key": "the absolute key positions j",
        "dtype": "the dtype of `bias`",
    },
    "t5-buckets": {
        "bidirectional": "encoder (true) or decoder (false) buckets",
        "num_buckets": "the number of buckets; ≥ 4 when bidirectional",
        "max_distance": "the distance from which every bucket is the last; must exceed the exact range "
        "(num_buckets/4 bidirectional, num_buckets/2 otherwise)",
        "query": "the query positions",
        "key": "the key positions",
    },
}

# -- prose: each family's rules and formulas (transformers 5.24's conventions) -----------------------
FORMULAS = {
    "rope": r"""
**Frequencies.** With k = 0 … d/2 − 1, the base frequencies are inv_k = 1 / θ^(2k/d) (the exponent is
over the rotary width d, not D). By `rope_type`:

| rope_type | inv_freq | attention_scaling |
|---|---|---|
| `default` | 1 / θ^(2k/d) | 1 |
| `linear` | inv_k / factor | 1 |
| `dynamic` | L = max(seq_len, M); θ' = θ · (factor · L/M − (factor − 1))^(d/(d−2)); 1 / θ'^(2k/d) | 1 |
| `yarn` | (1 − ramp_k) · inv_k + ramp_k · inv_k / factor (below) | `attention_factor`, else the mscale rule (below) |
| `llama3` | λ_k = 2π / inv_k; λ > O/low → inv_k / factor; λ < O/high → inv_k; else s = (O/λ − low)/(high − low) and (1 − s) · inv_k / factor + s · inv_k | 1 |
| `longrope` (`su`) | 1 / (ext_k · θ^(2k/d)), ext = `long_factor` if seq_len > O else `short_factor` | `attention_factor`, else 1 if factor ≤ 1 else √(1 + ln(factor)/ln(O)), factor defaulting to M/O |
| `proportional` | the table is D wide; the first int(factor_p · D // 2) frequencies are 1/θ^(2k/D) (factor_p = `partial_rotary_factor`), the rest 0 (those pairs keep cos 1, sin 0); all divided by `factor` | 1 |

O is `original_max_position_embeddings` (defaulting to M), low/high are `low_freq_factor` and
`high_freq_factor`.

*YaRN*: corr(r) = d · ln(O / (r · 2π)) / (2 ln θ); low = corr(`beta_fast`, default 32), high =
corr(`beta_slow`, default 1); with `truncate` (default true) floor(low) and ceil(high); then low =
max(low, 0), high = min(high, d − 1), and high += 0.001 if they are equal. ramp_k = clamp((k − low) /
(high − low), 0, 1). The attention factor is `attention_factor` if given, else
get_mscale(f, `mscale`) / get_mscale(f, `mscale_all_dim`) when both are given and non-zero, else
get_mscale(f), with get_mscale(s, m = 1) = 1 if s ≤ 1 else 0.1 · m · ln(s) + 1 (f = 4: 1.1386294;
f = 32: 1.3465736). DeepSeek-V3 (mscale = mscale_all_dim, factor 1.0) also scales its softmax by
get_mscale(f, mscale_all_dim)², a step outside the encoding.

*dynamic* is stateful in transformers (its frequencies grow with the longest sequence seen and
reset only below M); a request is stateless and uses a fresh module's value: the frequencies for
seq_len = max(positions) + 1 unless the request gives `seq_len` (the torch drop-in,
`posenc.torch.RotaryEmbedding`, keeps transformers' state). *longrope* applies its attention
factor at every length, and switches between short and long factors for each request.

**Angles and layouts.** angle(p, k) = p · inv_k, evaluated in float64;
cos = cos(angle) · attention_scaling and sin likewise, rounded once to `dtype`. `half_split`
repeats the d/2 angles as [a_0 … a_{d/2−1}, a_0 … a_{d/2−1}] (q' = q · cos + rotate_half(q) · sin,
rotate_half(x) = cat(−x[d/2:], x[:d/2])); `interleaved` as [a_0, a_0, a_1, a_1, …]
(rotate_every_two). Only the first d columns of q and k are rotated when d < D (partial rotary).

**Multi-axis.** With `mrope_section`, `mrope_axes` or `axes_dim`, column j of the answer is evaluated at
the position of its axis: `position_ids[axis(j)]`. `mrope_section` deals the d/2 frequencies of one set
(any rope_type, combined as transformers combines them), `mrope_axes` names the axis of each of
them (max + 1 axes); `axes_dim` gives each axis its own set, and
`inv_freq` lists the frequencies per axis block. Refused: `mrope_section` not summing to d/2,
`axes_dim` not summing to d or with another rope_type, both fields, `mrope_interleaved` without
`mrope_section` (or with other than 3 sections), `position_ids` without either field, ragged
`position_ids` or one with the wrong number of axes, and `axes_dim` without `position_ids`;
`mrope_axes` not of d/2 axis numbers in [0, 8) or sent with `mrope_section`, `mrope_interleaved` or
`axes_dim`. ERNIE-4.5-VL, for one, sends `{"head_dim": 128, "rope_theta": 500000, "layout":
"interleaved", "mrope_axes": [1, 2, …, 1, 2 (44 in all), 0, … (20)], "position_ids": [t, h, w]}`.

**Rules** (transformers' validators, made strict): `factor` is required for linear, dynamic, yarn
and llama3 and must be ≥ 1; llama3 also requires `low_freq_factor` ≤ `high_freq_factor` (equal: no smoothed band, as Llama 4's configs have it); longrope
requires `short_factor` and `long_factor`, each of length d/2; an absent `rope_type` means
`default`. Refused: keys the rope_type does not use; `type` and `rope_type` disagreeing;
`rope_scaling` and `rope_parameters` both sent; `rope_theta` or `partial_rotary_factor` given both
at the top level and inside `rope_parameters` with different values; `seq_len` with another
rope_type; d < 2; an odd d with yarn, longrope or proportional (transformers' own functions fail
on one); dynamic with d = 2; yarn with `rope_theta` ≤ 1.
""",
    "sinusoidal": r"""
**Formulas** (position p' = p + `offset`, evaluated in float64 and rounded once):

- `interleaved`: E[p, j] = sin(p' · ω_⌊j/2⌋) for even j, cos(p' · ω_⌊j/2⌋) for odd j, with
  ω_k = base^(−2k/d). With odd d the last column is a sine: ⌈d/2⌉ sine and ⌊d/2⌋ cosine columns.
- `concat`: the first ⌈d/2⌉ columns sin(p' · ω_k), the next ⌊d/2⌋ columns cos(p' · ω_k), same ω_k.
- `fairseq`: with h = ⌊d/2⌋, ω_k = base^(−k/(h−1)) (the lowest frequency is exactly 1/base), the row
  [sin(p' · ω), cos(p' · ω)], and a zero column appended for odd d. M2M100 (padding_idx 1) reads its
  first token at row 2: `offset` 2.
- `fairseq_cos_first`: the `fairseq` frequencies, the row [cos(p' · ω), sin(p' · ω)], and a zero
  column appended for odd d (AudioCraft's MusicGen, transformers' `MusicgenSinusoidalPositionalEmbedding`).

No row is ever zeroed: padding rows are the model's business, not the table's (transformers zeroes
row `padding_idx` in some models).
""",
    "sinusoidal-grid": r"""
**Formulas** (diffusers' `get_2d_sincos_pos_embed` / `get_3d_sincos_pos_embed`, MAE's `pos_embed.py`,
transformers' ViTMAE). A 1-D part of width E over a coordinate c is [sin(c · ω_j) | cos(c · ω_j)],
ω_j = 10000^(−j/(E/2)), j = 0 … E/2 − 1. In 2-D the first D/2 columns encode the column (w)
coordinate and the next D/2 the row (h) coordinate; rows are h-major. In 3-D the first D/4 columns
encode the frame coordinate t / `temporal_interpolation_scale`, then the 2-D form of width 3D/4 over
i / `interpolation_scale`; rows are t-major. Coordinates are evaluated exactly (the float64 nearest
the rational value; the libraries round them through float32, differing by up to about 1e-6), the
sines and cosines in float64, rounded once. SD3's `PatchEmbed` is the table of `pos_embed_max_size`
with base_size = sample_size // patch_size, of which it reads a centred crop: `crop` [top, left,
height, width] gives that window's rows (h-major), each at its place in the whole table (row i of
the window has the coordinates of row top + i).

**Rules**: `base_size` and `crop` are 2-D only; `temporal_interpolation_scale` only with
`temporal_size`; a crop reaching past `grid_size` is a 422 at its height or width; a row past the
table (extra_tokens + T·H·W rows, the crop's H·W with one) is a 422 at `positions`.
""",
    "alibi": r"""
**Slopes** (Press et al., "Train Short, Test Long"): with c = 2^⌊log2 H⌋, m_j = 2^(−max_bias · j / c) for
j = 1 … c; if H ≠ c, then 2^(−max_bias · j / (2c)) for j = 1, 3, 5, …, 2r − 1 with r = H − c are
appended. They are not monotone for H not a power of two (H = 12: 2^−1 … 2^−8, 2^−0.5, 2^−1.5,
2^−2.5, 2^−3.5). This equals transformers' BLOOM `_get_alibi_slopes` and MPT's
`build_mpt_alibi_tensor` (max_bias = `alibi_bias_max`), evaluated in float64 and rounded once.

**Bias block**: B[h, i, j] = −m_h · (i − j) (`causal`; the consumer masks j > i, or `mask_future`
does) or −m_h · |i − j| (`symmetric`), computed directly (never as a difference of two large
products). transformers' BLOOM builds m · j instead, which differs by the constant m · i per query
row: softmax ignores it.

**Rules**: `mask_future` with `symmetric` is refused; a bias that would overflow the dtype (e.g.
float16 at distances past 65504 / slope) is a 422 at `dtype`, never infinities.
""",
    "t5-buckets": r"""
**Formula** (transformers' `T5Attention._relative_position_bucket`), for rel = key − query:

```
nb = num_buckets; out = 0
bidirectional: nb //= 2; out += (rel > 0) * nb; n = |rel|
otherwise:     n = max(−rel, 0)
me = nb // 2
out += n                                                        if n < me
out += min(me + trunc(ln(n/me) / ln(max_distance/me) · (nb − me)), nb − 1)   otherwise
```

Bidirectional (32, 128): rel 0 → 0, −1 → 1, +1 → 17, −16 → 10, ≤ −128 → 15, ≥ 128 → 31.
Unidirectional (32, 128): rel ≥ 0 → 0, −1 → 1, −16 → 16, ≤ −128 → 31. posenc evaluates the logarithm
in float64; T5's float32 gives the same buckets for |rel| ≤ 3·10^5 in the configurations checked.
""",
}


# -- generated parts -------------------------------------------------------------------------------
def _type(s: dict) -> str:
    """A field's type from its JSON schema, in words."""
    if "oneOf" in s:
        return "selection"
    t = s.get("type", "any")
    types = t if isinstance(t, list) else [t]
    words = {
        "integer": "int",
        "number": "float",
        "boolean": "bool",
        "string": "string",
        "object": "object",
        "array": "list",
        "null": "null",
    }
    out = " or ".join(words.get(x, x) for x in types)
    if "array" in types and "items" in s:
        out = out.replace("list", f"list of {words.get(s['items'].get('type'), 'values')}")
    if "enum" in s:
        out = " \\| ".join(f"`{json.dumps(v)}`" for v in s["enum"])
    return out


def _bounds(s: dict) -> str:
    parts = []
    if "minimum" in s:
        parts.append(f"≥ {s['minimum']}")
    if "exclusiveMinimum" in s:
        parts.append(f"> {s['exclusiveMinimum']}")
    if "maximum" in s:
        parts.append(f"≤ {s['maximum']}")
    if s.get("minItems"):
        parts.append("non-empty")
    items = s.get("items", {})
    if "minimum" in items:
        parts.append(f"entries ≥ {items['minimum']}")
    return ", ".join(parts)


def field_table(fam) -> list[str]:
    props, required = fam.schema["properties"], set(fam.schema.get("required", ()))
    meaning = MEANING[fam.name]
    if set(meaning) != set(props):
        raise SystemExit(
            f"tests/tools/reference.py: MEANING[{fam.name!r}] must describe exactly the fields "
            f"{sorted(props)}; it has {sorted(meaning)}"
        )
    rows = ["| field | type | bounds | default | meaning |", "|---|---|---|---|---|"]
    for name, s in props.items():
        default = (
            "required"
            if name in required
            else (f"`{json.dumps(s['default'])}`" if "default" in s else "null")
        )
        rows.append(f"| `{name}` | {_type(s)} | {_bounds(s)} | {default} | {meaning[name]} |")
    return rows


def answer_table(fam) -> list[str]:
    rows = ["| array | shape and meaning | dtype |", "|---|---|---|"]
    for o in fam.outputs:  # the family's one description of its answer (engine/tables/base.py Output)
        if o.dtype is None:
            dt = "the request's `dtype`"
        elif not o.axes:
            dt = f"a number ({o.dtype}; a 0-d {o.dtype} array in binary answers)"
        else:
            dt = o.dtype
        rows.append(f"| `{o.name}` | {o.description} | {dt} |")
    return rows


def rope_types_table() -> list[str]:
    rows = [
        "| rope_type | keys of `rope_scaling` / `rope_parameters` | frequencies follow the sequence length |",
        "|---|---|---|",
    ]
    for alias, t in ROPE_TYPES.items():
        name = f"`{alias}`" if alias == t.name else f"`{alias}` (= `{t.name}`)"
        keys = ", ".join(f"`{k}`" for k in t.keys) or "none"
        rows.append(f"| {name} | {keys} | {'yes (`seq_len`)' if t.uses_seq_len else 'no'} |")
    return rows


def family_section(fam) -> list[str]:
    out = [
        f"### `{fam.name}`",
        "",
        f"`POST /v1/{fam.name}`; KServe v2 model `{fam.name}`. Selections: "
        + ", ".join(f"`{s}`" for s in fam.selections)
        + ".",
        "",
    ]
    out += field_table(fam) + ["", "Answer:", ""] + answer_table(fam)
    if fam.name == "rope":
        out += ["", 'Rope types (`"su"` is transformers\' old name for longrope):', ""] + rope_types_table()
    out += [FORMULAS[fam.name].rstrip()]
    types = registry.supported(fam.name)
    if types:
        listed = types if len(types) <= 40 else [*types[:12], "…"]
        out += [
            "",
            f"`hf_config` model types ({len(types)}): "
            + ", ".join(f"`{t}`" if t != "…" else t for t in listed)
            + " (every one, and how each is read: [models.md](models.md); `GET /v1/models`).",
        ]
    out += ["", "Examples (the bodies `/docs` offers):", ""]
    for title, ex in fam.examples.items():
        out += [f"- {title}: `{json.dumps(ex['value'])}`"]
    return out + [""]


# v2 statuses that service/v2/errors.py's GRPC_CODES does not map (they are decided before the
# protocol's handlers: the token gate, service/core/auth.py and service/v2/grpc_auth.py; the HTTP
# head limits, which gRPC does not have)
V2_OTHER = {401: "401 / UNAUTHENTICATED", 431: "431 (REST) / —"}


def error_table() -> list[str]:
    rows = ["| error | HTTP status | KServe v2 REST / gRPC | when |", "|---|---|---|---|"]
    found = [
        c
        for module in (errors, service_errors)
        for c in vars(module).values()
        if inspect.isclass(c)
        and c.__module__ == module.__name__
        and issubclass(c, errors.PosencError)
        and c is not errors.PosencError
    ]
    found += [v2errors.BadRequest, v2errors.ModelNotFound]
    for cls in found:
        doc = inspect.cleandoc(cls.__doc__ or "")
        when = " ".join(doc.split("\n\n")[0].split()).replace("``", "`")
        status = cls.status
        if status == 500:  # not a request's error: the process refuses to start
            rows.append(f"| `{cls.__name__}` | — (start-up: exit 1) | — | {when} |")
            continue
        if cls is errors.NotStored:  # the engine's answer to a worker, never a request's
            rows.append(f"| `{cls.__name__}` | — (never a request's answer) | — | {when} |")
            continue
        v2 = 400 if status == 422 else status
        code = v2errors.GRPC_CODES.get(v2)
        v2col = f"{v2} / {code.name}" if code is not None else V2_OTHER.get(status, "—")
        rows.append(f"| `{cls.__name__}` | {status} | {v2col} | {when} |")
    return rows


LIMITS = (  # setting -> (what it bounds, refused with)
    (
        "max_response_bytes",
        "a response: the body sent (see below)",
        "413 (`TooLarge`), naming the format and the selections",
    ),
    ("max_positions", "positions in one selection (`positions`, `query`, `key`)", "413 naming the selection"),
    ("max_body_bytes", "a request body", "413 (`BodyTooLarge`)"),
    ("max_header_bytes", "a request head", "431, connection closed"),
    ("header_timeout_s", "seconds to receive a request head", "408"),
    ("body_timeout_s", "seconds to receive a request body", "connection closed"),
    ("max_connections", "open connections per worker", "503, connection closed"),
    ("build_timeout_s", "seconds a request waits for an on-demand build", "503"),
    (
        "max_shm_regions",
        "KServe v2 shared-memory regions registered, all processes together",
        "400 / RESOURCE_EXHAUSTED",
    ),
    (
        "memory_budget_bytes",
        "shared memory for on-demand tables (pinned default tables do not count)",
        "never refused: rows are computed instead",
    ),
)


def serve_flags() -> set[str]:
    """The options of ``posenc serve`` (its argparse parser)."""
    from posenc.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {o for a in sub.choices["serve"]._actions for o in a.option_strings}


def limits_table() -> list[str]:
    defaults = {
        f.name: (f.default if f.default is not dataclasses.MISSING else None)
        for f in dataclasses.fields(settings.Settings)
    }
    flags = serve_flags()
    rows = ["| limit | default | setting (`posenc serve` flag) | refused with |", "|---|---|---|---|"]
    for name, what, refused in LIMITS:
        v = defaults[name]
        shown = f"{v:,}" + (f" ({v / 2**20:g} MiB)" if name.endswith("bytes") and v >= 2**20 else "")
        flag = "--" + name.replace("_", "-").removesuffix("-s").removesuffix("-bytes")
        flag = next((f for f in (flag, "--" + name.replace("_", "-")) if f in flags), None)
        setting = f"`{settings.ENV_PREFIX}{name.upper()}`" + (f" (`{flag}`)" if flag else "")
        rows.append(f"| {what} | {shown} | {setting} | {refused} |")
    schema_bounds = []
    for fam in FAMILIES.values():
        for field, s in fam.schema["properties"].items():
            if "maximum" in s and s.get("type") == "integer":
                schema_bounds.append(f"| `{fam.name}.{field}` | {s['maximum']:,} | — | 422 at `{field}` |")
    rows += schema_bounds
    # t5-buckets' request schema does not carry these bounds (its parser does: engine/tables/t5.py)
    rows.append("| `t5-buckets.num_buckets` | 1,048,576 (2^20) | — | 422 at `num_buckets` |")
    rows.append("| `t5-buckets.max_distance` | 2,147,483,648 (2^31) | — | 422 at `max_distance` |")
    rows.append(f"| `Accept`, its lines joined | {negotiate.MAX_ACCEPT:,} bytes | — | 431 |")
    rows.append(f"| a position | < {POSITION_LIMIT:,} (2^31) | — | 422 at the selection |")
    return rows


def v2_table() -> list[str]:
    rows = [
        "| model | inputs (INT32 or INT64) | outputs: name, datatype (`dtype` float32), shape |",
        "|---|---|---|",
    ]
    for name, fam in FAMILIES.items():
        outs = v2models._output_metadata(fam, None, dtypes.DEFAULT_DTYPE)
        shown = ", ".join(f"`{o['name']}` {o['datatype']} {o['shape']}" for o in outs)
        ins = [
            f"`{s}` [k, N] or [B, k, N]" if fam.selection_rank(s) == 2 else f"`{s}` [N] or [B, N]"
            for s in fam.selection_fields
        ]
        rows.append(f"| `{name}` | " + ", ".join(ins) + f" | {shown} |")
    return rows


def _grid_facts() -> dict:
    """The token grids' bounds and the timm reading's counts (engine/models/grid.py, timm_vit.py)."""
    from posenc.engine.models import grid, timm_vit

    unread = sorted(timm_vit.UNREAD)
    why = sorted(set(timm_vit.UNREAD.values()))
    return {
        "grid_side": f"{grid.MAX_SIDE:,}",
        "grid_tokens": f"{grid.MAX_TOKENS:,}",
        "timm": timm_vit.ZOO["timm"],
        "timm_read": len(timm_vit.ARCHITECTURES),
        "timm_rotary": len(timm_vit.ARCHITECTURES) + len(unread),
        "timm_unread": ", ".join(f"`{n}`" for n in unread) + " (" + "; ".join(why) + ")",
    }


def render() -> str:
    fams = list(FAMILIES.values())
    g = {
        "families": ", ".join(f"`{f.name}`" for f in fams),
        "family_sections": "\n".join("\n".join(family_section(f)) for f in fams),
        "dtypes": ", ".join(f"`{d}`" for d in dtypes.DTYPES),
        "default_dtype": dtypes.DEFAULT_DTYPE,
        "position_limit": f"{POSITION_LIMIT:,}",
        "errors": "\n".join(error_table()),
        "limits": "\n".join(limits_table()),
        "offers": ", ".join(f"`{m}`" for m in negotiate.OFFERS),
        "v2": "\n".join(v2_table()),
        "v2_inputs": ", ".join(f"`{d}`" for d in v2tensors.INPUT_DATATYPES),
        "routes": ", ".join(f"`POST /v1/{f.name}`" for f in fams),
        "default_length": f"{DEFAULT_LENGTH:,}",
        "http_port": settings.DEFAULT_PORT,
        "grpc_port": settings.DEFAULT_GRPC_PORT,
    }
    g.update(_grid_facts())
    g["diffusers_rope"] = diffusers_zoo.reference_section()
    return TEMPLATE.format(**g)


def main(argv: list[str]) -> int:
    text = render()
    if argv[1:] == ["--check"]:
        if PAGE.read_text() != text:
            print(
                "docs/reference.md is stale: python -m tests.tools.reference > docs/reference.md",
                file=sys.stderr,
            )
            return 1
        return 0
    sys.stdout.write(text)
    return 0


TEMPLATE = """\
# posenc reference

<!-- Generated by `python -m tests.tools.reference > docs/reference.md` from the family registry
(engine/tables), engine/core/errors.py, service/core/errors.py, service/core/settings.py and
service/v2; edit the generator (tests/tools/reference.py), not this page. tests/test_docs.py checks
that they agree. -->

The whole contract of posenc in one page: every family, field, selection rule, dtype, status and
limit, and the KServe v2 mapping. Every way in (HTTP, KServe v2, `posenc compute`, the
shared-memory client `posenc.engine.client.Client`, the engine's table config) speaks the same
**spec**: one JSON object per table family. Field names are transformers' config names wherever
transformers has one, so values can be pasted from a model's `config.json`.

Every value is computed in float64 and rounded **once** to the requested dtype. Where transformers
computes in float32, posenc is therefore at least as exact, and differs from transformers by
transformers' own float32 error ([Precision](#precision-against-transformers)).

Contents: [Families](#families) · [Named tables and model configs](#named-tables-and-model-configs) ·
[Selections, dtypes, strictness](#selections-dtypes-strictness) ·
[Precision](#precision-against-transformers) · [HTTP](#http) · [Errors and statuses](#errors-and-statuses) ·
[Limits](#limits) · [KServe v2](#kserve-v2-open-inference-protocol) · [Command line](#command-line) ·
[Python](#python)

## Families

{families}. Notation: D = `head_dim`, d = the rotary width, k = 0 … d/2 − 1, p = an integer
position, θ = `rope_theta`, M = `max_position_embeddings`. A body is the spec fields, the family's
selections and `dtype` (except `t5-buckets`, whose answer is int32).

{family_sections}
## Named tables and model configs

- **`table`**: instead of the spec fields, a body may name a table of the engine's table config
  (`{{"table": "llama-3.1-8b", "positions": [0, 1, 2]}}`): the answer is that table's spec with these
  selections and `dtype`. An unknown name is a 422 at `table` listing the known names of that
  family; a table of another family is a 422 naming its route. `GET /v1/tables` lists the names.
- **`hf_config`** (the families that list model types above): instead of the spec fields, a model's
  whole `config.json` object, as transformers writes it (its `NaN`, `Infinity` and `-Infinity`
  tokens included: accepted inside `hf_config` only, anywhere else such a number is a 422 at its
  field) or as published. posenc derives what transformers' own code for that `model_type`
  computes (head dimension, θ, rotary fraction, the scaling in both its transformers 4
  `rope_scaling` and transformers 5 `rope_parameters` forms, the pairing layout; for ALiBi
  `num_heads` and `max_bias`; for `t5-buckets` `num_buckets`, `max_distance` and whether the
  stack's attention is bidirectional; for `sinusoidal` the width, the layout and the `offset` of
  the model's own position table). `layer_type` picks one part of a config and is required exactly
  when the config has several that differ: an entry of a per-layer-type `rope_parameters`
  (`"full_attention"`, `"sliding_attention"`), or the stack of an encoder-decoder model
  (`"encoder"`, `"decoder"`: T5's encoder buckets bidirectionally, its decoder not); a stack
  without a table of the family (Whisper's learned decoder positions) is a 422 at `layer_type`
  saying why. Keys without positional information are ignored. A config that turns the family's
  table off (XLM's `sinusoidal_embeddings` false, TrOCR's `use_learned_position_embeddings`) is a
  422 at that key. A `model_type` whose positions are not of this family, or that posenc does not
  know, is a 422 at `hf_config.model_type` naming the supported ones. diffusers transformer configs
  are recognised by `_class_name` instead (Flux's per-axis RoPE, SD3's and CogVideoX's grids; a
  CogVideoX config with rotary or learnt positions is a 422 at the key that says so); the Qwen-VL
  types give `mrope_section` (multi-axis rope, `position_ids`). [models.md](models.md) lists how
  each type is read.
- **`grid`** (beside `hf_config` of a vision or video model): the token grid the model sees,
  patches per axis, instead of the selection; [Token grids](#token-grids).
- `hf_config` or `table` together with explicit spec fields is a 422 at the extra field; both
  together is a 422 at `table`; `layer_type` without `hf_config` is a 422 at `layer_type`. An
  explicit null for any of them is an absent field.
- Every answer to an `hf_config` or `table` body also returns the canonical spec it used (`spec`:
  JSON in the JSON answer, the `spec` entry of the metadata in binary answers), which sent back as
  spec fields gives the same table.

### Token grids

A vision or video model's rope follows its token grid, and some libraries evaluate it at
fractional coordinates. Such a model is read from its config with the grid beside it:
`{{"hf_config": {{"architecture": "eva02_base_patch14_448"}}, "grid": {{"height": 32, "width": 32}}}}`
(patches per axis; `frames` for video; a record may take more keys, named in its 422). The
record turns it into ordinary spec fields and the selection, so the answer is a rope answer like
any other (every route, format, v2, `Client.lookup`):

- `position_ids`: each axis's integer index of every token, tokens in the order the model lays
  them out (row-major: `height` outer, `width` inner); `positions` or `position_ids` beside `grid`
  is a 422 at that field.
- `inv_freq` (where no rope_type says the frequencies) and `axes_coords` (where coordinates are
  not the indices): column j of token i is cos((scale·idx + offset) · f_j), idx the token's index on
  j's axis, evaluated in float64 and rounded once. These follow the grid's size (EVA rescales to
  its reference shape, DINOv3 centres to [−1, 1]), so each grid size is its own spec and table.
- The answer's `spec` is that canonical spec; sent back with the grid's `position_ids` it gives
  the same rows. A spec with `axes_coords` is answered by the full path (the C shortcut and the
  reader's handles compute rows past a table as p · f_j, not these).

Refused, each a 422: `grid` without `hf_config` or beside `table`; a grid beside a model whose
positions are not a grid (at `grid`); a missing `grid` (at `grid`, with an example); an unknown
key, a size outside [1, {grid_side}] or more than {grid_tokens} tokens (at `grid…`).

**timm** ([models.md](models.md), {timm_read} of {timm_rotary} rotary models of timm {timm}): by the
registered model name a timm `config.json` gives as `architecture` (the hub's form: `{{"architecture":
"vit_base_patch16_rope_reg1_gap_256", "num_classes": 1000, ...}}`), `grid` `height` and `width`. The
arguments its model function gives the rope module (engine/models/timm_zoo.json) decide the
reading; `model_args` that change the rope module are a 422 at that key. The answer is what the
module hands attention for the patch tokens (prefix tokens: class and register tokens take no
rope): timm's `[sin | cos]` concatenation is posenc's `sin` and `cos`, in the pairing its
attention applies (`rotate_half`: `half_split`, else `interleaved`), as in eval mode (the random
coordinate augmentation some apply in training, Sapiens2's `rescale_coords`, is no table). Per module:

| timm module | models | frequencies (`inv_freq`) | coordinates (`axes_coords`) |
|---|---|---|---|
| `RotaryEmbeddingCat` (EVA-02, `vit_*_rope_reg*`) | `eva02_base_patch14_448` | dim/4 bands per axis, 1/T^(k/(dim/4)) | i · ref/size (`ref_feat_shape` 16: index i of 32 is 0.5·i) |
| `RotaryEmbeddingCat` (Perception Encoder) | `vit_pe_core_base_patch16_224` | the same | (i + 1) · ref/size; `grid_indexing` xy: width is axis 0 |
| `RotaryEmbeddingCat` (`vit_*_rope`, T = 100) | `vit_base_patch16_rope_224` | the same | i; width first |
| `RotaryEmbeddingCat` (Qwen3-VL, DeepSeek ViTs) | `qwen3_vit_88m` | the same, `half_split` | i |
| `RotaryEmbeddingDinoV3` (DINOv3, Sapiens2, LingBot) | `vit_base_patch16_dinov3` | 2π / T^(2k/(dim/2)) | 2·(i + 0.5)/size − 1 |
| `Gemma4RotaryEmbedding2D` | `gemma4_vit_167m` | `axes_dim` [D/2, D/2], θ = 100 | i; x (the column) first |

Not read: {timm_unread}.

**diffusers** ([models.md](models.md)): by the `_class_name` of a diffusers transformer's
`config.json`; the answer is what the class's own positional module hands its attention, cos and
sin in the pairing its attention applies (a complex `freqs_cis` is cos = real and sin = imaginary
part, each repeated over its pair (2k, 2k+1); raw angles are their cos and sin in the same columns;
2x2 rotation matrices [[cos, −sin], [sin, cos]] are a pair's cos and sin). The positions are the
ones the class builds: where its transformer builds them from the latent, `grid` names it (`frames`,
`height`, `width` in patches, and `text`, the caption tokens, where the class places them beside the
image: Lumina2 before it at (i, 0, 0) with the image at (text, row, column), Ernie-Image after it);
where its pipeline hands them in (Flux's `img_ids` / `txt_ids`, [n, k]), `position_ids` are those
ids, one list per axis; the 1-D audio classes take `positions`. A grid also takes what the
transformer's forward is handed beside the latent: Cosmos' `fps` (frames at i · 24 / fps; without
it, an image at i), LTX-Video's and LTX-2's `fps` (the frame rate its pipeline passes, a number:
frames in seconds; 25 and 24 without it; Sana-WM's refiner's also `first_frame`, its window's first
latent frame; LTX-2's `rope_type` `"split"` also `head`, as each head rotates its own frequencies),
Kandinsky 5's `scale_factor` ([t, h, w], each axis's angles divided by it; its
pipelines pass [1, 2, 2] or [1, 3.16, 3.16] by resolution for video, [1, 1, 1] for images, the
default); Kandinsky 6 reads its config's `scale_factor` and takes `position_ids` too (its forward's
`visual_rope_pos`: the image-to-video pipeline appends the reference frame at frame 0). Lumina-Next's
pipeline scales its frequencies by the image's size, by step: its grid takes `phase`, `"linear"`
(the steps before the pipeline's `scaling_watershed`: all of them at its default 1.0) or `"ntk"`
(from it on); JoyImage Edit with `rope_type` `"mrope"` rotates the caption after the image (`text`);
JoyImage Edit Plus's reference images of other sizes than the target's are `position_ids` (each
item at the frames after the last one's). Wan-Animate 2's grid takes its reference latent
(`reference_frames`, `reference_height`, `reference_width`): its tokens follow the generation
latent's, at the config's `refer_offset_*` (a negative one: the reference grid's size on that axis)
and every `refer_stride`-th frame, as its cached pass rotates the keys; AnyFlow-FAR's takes
`compressed_frames`, the first frames, on the compressed grid (`compressed_height`, `compressed_width`:
(height · patch_size) // compressed_patch_size unless given) at the centres of their pooling windows,
before the rest on the full grid (the key's sequence; its query is the tail). Ideogram4's
`position_ids` are its pipeline's (the caption at (i, i, i), the image at 65536 + (0, row, column));
OmniGen's `positions` are its collator's, and its config must carry `rope_scaling` (no default).
Examples:
`{{"hf_config": {{"_class_name": "WanTransformer3DModel", "attention_head_dim": 128}}, "grid": {{"frames": 21, "height": 30, "width": 52}}}}`,
`{{"hf_config": {{"_class_name": "Flux2Transformer2DModel"}}, "position_ids": [[0, 0, 0], [0, 0, 0], [0, 0, 1], [0, 0, 0]]}}`,
`{{"hf_config": {{"_class_name": "Lumina2Transformer2DModel"}}, "grid": {{"text": 77, "height": 64, "width": 64}}}}`,
`{{"hf_config": {{"_class_name": "Kandinsky5Transformer3DModel"}}, "grid": {{"frames": 31, "height": 30, "width": 52, "scale_factor": [1, 2, 2]}}}}`,
`{{"hf_config": {{"_class_name": "LTX2VideoTransformer3DModel"}}, "grid": {{"frames": 4, "height": 8, "width": 12, "fps": 24}}}}`,
`{{"hf_config": {{"_class_name": "LuminaNextDiT2DModel"}}, "grid": {{"height": 64, "width": 64, "phase": "ntk"}}}}`,
`{{"hf_config": {{"_class_name": "WanAnimate2Transformer3DModel"}}, "grid": {{"frames": 4, "height": 30, "width": 52, "reference_height": 30, "reference_width": 52}}}}`,
`{{"hf_config": {{"_class_name": "AnyFlowFARTransformer3DModel"}}, "grid": {{"frames": 9, "compressed_frames": 4, "height": 30, "width": 52}}}}`,
`{{"hf_config": {{"_class_name": "StableAudio3DiTModel"}}, "positions": {{"start": 0, "stop": 1024}}}}`.
An unknown `_class_name` is a 422 at `hf_config._class_name` naming what to send instead; a rotary
class posenc does not read says why (`GET /v1/models` lists them); a key a class needs that is
invalid is a 422 at that key.

{diffusers_rope}

### diffusers' sin-cos tables

A diffusers transformer whose positions are an absolute sin-cos table (its patch embedding adds it
to the tokens) is read from its `config.json` by `_class_name`, as that embedding reads it
(diffusers 0.42.1; [models.md](models.md) lists each class). `grid` names the latent the model
sees, in patches (`height`, `width`; `frames` for video; CogView3-Plus's `text` tokens): the answer
is the table the class builds, or crops, for that latent. Without `grid` it is the table of the
config's own sample size (SD3, OmniGen, CogView3-Plus: their whole `pos_embed_max_size` table).
`positions` still selects rows of it. The spec returned says what was built:

| classes | embedding | `grid` gives |
|---|---|---|
| DiT, PixArt-α/Σ, Transformer2DModel (patched input), Sana (with `interpolation_scale`), Latte | `PatchEmbed` | `grid_size` [height, width], `base_size` sample_size // patch_size kept |
| SD3, OmniGen | `PatchEmbed` / `OmniGenPatchEmbed` over `pos_embed_max_size` | `crop`: the centred height × width window |
| CogView3-Plus | `CogView3PlusPatchEmbed` | `crop` [0, 0, height, width], after `text` zero rows (`extra_tokens`) |
| CogVideoX, ConsisID | `CogVideoXPatchEmbed` | `temporal_size` frames, `grid_size` [height, width], after `max_text_seq_length` zero rows |

```
POST /v1/sinusoidal-grid {{"hf_config": {{"_class_name": "PixArtTransformer2DModel", "sample_size": 128,
  "patch_size": 2, "num_attention_heads": 16, "attention_head_dim": 72}}, "grid": {{"height": 64, "width": 96}}}}
  → spec {{"embed_dim": 1152, "grid_size": [64, 96], "base_size": 64.0, "interpolation_scale": 2.0, ...}}
POST /v1/sinusoidal-grid {{"hf_config": {{"_class_name": "SD3Transformer2DModel", "sample_size": 128,
  "patch_size": 2, "num_attention_heads": 24, "attention_head_dim": 64, "pos_embed_max_size": 192}},
  "grid": {{"height": 64, "width": 80}}}}   → crop [64, 56, 64, 80] of the 192² table, base_size 64
POST /v1/sinusoidal-grid {{"hf_config": {{"_class_name": "CogView3PlusTransformer2DModel"}},
  "grid": {{"height": 64, "width": 64, "text": 224}}}}   → 224 zero rows, then crop [0, 0, 64, 64]
POST /v1/sinusoidal-grid {{"hf_config": {{"_class_name": "CogVideoXTransformer3DModel"}},
  "grid": {{"frames": 13, "height": 30, "width": 45}}, "positions": {{"start": 0, "stop": 300}}}}
```

The 1-D frame tables are `sinusoidal` answers (`positions` are frame indices): Latte's
`temp_pos_embed` (`concat`, heads · head_dim wide, `video_length` rows) and TransformerTemporalModel's
`SinusoidalPositionalEmbedding` (`interleaved`, when `positional_embeddings` is `"sinusoidal"`):
`POST /v1/sinusoidal {{"hf_config": {{"_class_name": "LatteTransformer3DModel", "patch_size": 2}},
"positions": {{"start": 0, "stop": 16}}}}`. Latte's spatial table is its `sinusoidal-grid` answer.

A config whose class builds no such table is a 422 at the key that says so (Sana's
`interpolation_scale` null, a Transformer2DModel without `patch_size` or with `num_vector_embeds`,
a ConsisID with `use_rotary_positional_embeddings`, a TransformerTemporalModel whose
`positional_embeddings` is not `"sinusoidal"`); a key the class needs and has no default for is a
422 naming it; a grid larger than a cropped table is a 422 at `grid.height` or `grid.width`.
Learned tables (AuraFlow's `pos_embed`, PriorTransformer's `positional_embedding`, T5FilmDecoder's
`position_encoding`, MiniMax-Music-3's RVQ depth decoder's `pos_embedding`, Transformer2DModel's
`ImagePositionalEmbeddings`) live in the weights, not the config: posenc does not read them.

## Selections, dtypes, strictness

- A **selection** is a non-empty list of non-negative ints (any order, repeats allowed, answered in
  the order given), or `{{"start": s, "stop": e}}` with s < e (half-open, optional `"step"` > 0).
  Every position is < 2^31 ({position_limit}). No precomputed table bounds positions: a position
  past a stored table is computed exactly, not refused.
- **Specs are strict**: an unknown field is refused (a typo must not yield a silently wrong table);
  an int field takes only a JSON integer (not `"64"`, not `64.0`, not `true`); a float field also
  takes an integer; an explicit null equals an absent optional field, in every family. Any value
  for which a formula would divide by zero, take the logarithm of a non-positive number or produce
  a non-finite result is refused like any other invalid field, at the field whose value must change
  (for a rule across fields, e.g. `rope_scaling.factor`).
- **`dtype`**: {dtypes} (default `{default_dtype}`), for every float array of the answer except
  `inv_freq` and `slopes`, which stay float32 (the tables above say which). Values are computed in
  float64 and rounded once (round to nearest even). A result that would overflow the dtype is a 422
  at `dtype`, never silently turned into infinities.

## Precision against transformers

posenc's tables are exact (float64, rounded once); transformers builds most of them in float32. The
differences below are transformers' error, which the tests allow when comparing with transformers
5.24, and nowhere else: against float64 references the tests demand half an ulp of the output dtype
(give or take the float64 reference's own error of a few 10^−16 relative).

- RoPE `inv_freq`: transformers' float32 frequencies are within about 8·10^−8 (relative) of float64
  when d is a power of two, within 4.1·10^−7 otherwise (d = 80, 112, 160 with θ = 5·10^5 or 10^6).
  Its cos/sin come from float32 products p · inv_freq and so drift with the position: up to about
  3–8·10^−8 · p, 4.1·10^−3 at p ≈ 1.3·10^5. The tests allow 1·10^−6 + 2.5·10^−7 · p (times
  attention_scaling), and 2·10^−7 relative on `inv_freq`.
- **The torch drop-in** (`posenc.torch.RotaryEmbedding`) therefore does not give bit-identical
  logits: on a float32 model its logits were measured within 7.7·10^−7 of transformers'
  own at positions < 64 and within 4.2·10^−6 at positions ≈ 9,000, with the same greedy tokens.
  The difference is transformers' float32 rounding of the angles, not posenc's.
- ALiBi: transformers' BLOOM slopes (float32) are off by up to 6.8·10^−7 relative (H = 127); MPT's
  agree to 1 ulp; Falcon casts its slopes to bfloat16 (error 1.6·10^−3). BLOOM's m · j in float32
  loses 3.9·10^−3 at j ≈ 131071; posenc computes −m · (i − j) directly.
- Sinusoidal `fairseq` (M2M100 and kin) is float32 in transformers: 6.1·10^−3 off at p = 10^5.
  DistilBERT, Marian, RoFormer and Pegasus compute in float64 like posenc.
- T5 buckets equal transformers' (its float32 logarithm and posenc's float64 one agree for
  |rel| ≤ 3·10^5 in the configurations checked; past `max_distance` every bucket is the last).

## HTTP

`posenc serve` listens on 127.0.0.1:{http_port} by default (`--host`, `--port`).

- {routes}: the body is the spec plus its selections and `dtype`.
- `GET /v1/tables`: the tables in shared memory and the configured names; `GET /v1/models`: the
  model types whose config `hf_config` reads, by family, and the rotary ones it does not read, with
  the reason ([models.md](models.md)); `GET /healthz` (alive),
  `GET /readyz` (503 until a worker has mapped and verified the tables), `GET /metrics` (Prometheus
  text), `GET /docs` (OpenAPI, an example per route).
- **Answer formats**, chosen by `Accept` (offered: {offers}; a missing Accept, `*/*` and
  `application/*` get JSON; q-values are honoured; ties go to JSON):
  - JSON: an object whose keys are the array names, each a nested list (bfloat16 and float16
    values written as their float values), plus `attention_scaling` for rope and `spec` for
    `hf_config`/`table` bodies.
  - safetensors (`application/x-safetensors`, also `application/octet-stream`): 8-byte little-endian
    header length, a JSON header `{{name: {{dtype, shape, data_offsets}}, "__metadata__": {{...}}}}`, then the
    raw arrays; bfloat16 is native (`BF16`); `attention_scaling` is a 0-d float64 array; the
    metadata holds `family` (and `spec`). Loads with `safetensors.numpy`/`safetensors.torch` or numpy
    alone (the README shows how).
  - npz (`application/x-npz`): `numpy.savez` output; bfloat16 arrays are uint16 bit patterns (torch:
    `.view(torch.bfloat16)`), listed in its `__bfloat16__` entry.
- With a bearer token configured, `/v1` and `/v2` need `Authorization: Bearer <token>` (401
  otherwise); TLS and CORS are `posenc serve` options ([deploy.md](deploy.md)).

## Errors and statuses

A refused request gets a JSON body `{{"detail": ...}}`. For a 422 (an invalid spec, selection or
dtype) it is FastAPI's list `[{{"type", "loc", "msg"}}]`, whose `loc` is `"body"` then the path of
the field whose value must change (e.g. `["body", "rope_scaling", "factor"]`); for every other status
a string. No input gets a 500. `posenc compute` prints the same message on stderr, without a
traceback, and exits with 2 for a refused input, 1 otherwise.

{errors}

## Limits

Every size is checked before anything is allocated. Settings are `POSENC_*` environment variables
(service/core/settings.py), some also `posenc serve` flags (`posenc serve --help`).

{limits}

The response limit holds for the bytes the answer sends, bounded from the request's shapes before
any array or text exists (service/core/sizing.py):

- safetensors: exactly (its header and the arrays' bytes);
- npz: the arrays' bytes plus at most a few hundred bytes of zip and `.npy` headers per array;
- JSON: every cell counted at the longest text it can have: a float32, float16 or bfloat16 value
  16 characters (`-0.0000` and nine digits, as orjson writes a float32) plus its comma, a
  `t5-buckets` bucket the digits of `num_buckets - 1` plus its comma, plus every list's brackets.
  So a JSON answer holds at most about 3.9 million float cells (64 MiB / 17); the same arrays in
  safetensors fit four to eight times as many. A request over it (e.g. `sinusoidal-grid` with
  `embed_dim` 32, `grid_size` 1000, bfloat16: 64,000,000 bytes of arrays, 544,000,000 of text at
  most) is a 413 in about a millisecond, its worker's memory unmoved.
- KServe v2 REST: the binary outputs' bytes plus the JSON outputs' text, bounded the same way;
  gRPC answers are binary (`raw_output_contents`): their arrays' bytes.

`posenc compute` writes files and keeps the arrays' bytes as its `--max-bytes` limit. A JSON answer
whose bound is over 64 KiB, and any other answer over 1 MiB, is built in a thread, and a JSON text
of more than 16,384 cells is written in pieces of that many (each a few ms at most) and sent as
1 MiB blocks, never copied whole, so a large answer does not hold the worker's event loop (and
its other requests) while it is built. `/healthz` on the same worker, asked back to back while
another connection asks for one 20-60 MiB JSON answer after another, waited at p50 2.2 times and at
p99 3.7 times what it waits on the idle worker (medians of three rounds on a shared 2-core host;
the longest wait of a round was 100-190 ms beside the answers, 32 ms idle at the median):

```
python tests/bench/bench_big_answer.py --rounds 3 --seconds 4
```

`tests/integration/test_serve_answer_bounds.py` checks the order, not the milliseconds: `/healthz`,
asked back to back, is answered several times before the large answer's head arrives, which the
server sends once the whole text is built.

## KServe v2 (Open Inference Protocol)

REST under `/v2` on the HTTP port, and `inference.GRPCInferenceService` (KServe's
`grpc_predict_v2.proto` as extended by Triton's `grpc_service.proto`, which `tritonclient` speaks) on
port {grpc_port} (`posenc serve --grpc-port`; 0 turns it off). [kserve.md](kserve.md) has examples,
streams and figures.

- Health and metadata: `GET /v2/health/live`, `/v2/health/ready`, `/v2` (server metadata with its
  extensions), `/v2/models/{{name}}`, `/v2/models/{{name}}/ready`, and their gRPC twins.
- **Models**: one per family, named as the family, taking the spec (its fields without selections;
  `dtype` included, or `hf_config` and `layer_type`) as the request parameter `spec`, a JSON string;
  and one per table of the table config, named as in `GET /v1/tables`, whose spec is fixed (only a
  `dtype` parameter).
- **Inputs**: the family's selections by name, datatype {v2_inputs}, shape [N], or [B, N] for a batch
  of B selections of equal length in one request. Values lie in [0, 2^31).
- **Outputs**: the family's arrays by name; FP32, FP16 or BF16 as `dtype` says for the arrays that
  take it; INT32 `buckets`; FP32 `inv_freq` and `slopes`; `attention_scaling` FP64 shape [1]. For a
  batch the selection-shaped outputs (`cos`, `sin`, `encoding`, `bias`, `buckets`) get a leading B;
  the others are shared. The binary tensor data extension (REST) and raw contents (gRPC) carry every
  datatype; BF16 travels only in binary.

{v2}

(-1: a dimension that depends on the request.)

- **System shared memory**: a client on the same host registers a region of its own
  (`/v2/systemsharedmemory/region/{{name}}/register`, gRPC `SystemSharedMemoryRegister`) and asks for
  outputs in it with the `shared_memory_region` parameters, as `tritonclient.utils.shared_memory`
  does.
- **Errors**: an invalid spec, selection or parameter is REST 400 `{{"error": "<field path>: <message>"}}`
  (e.g. `parameters.spec.head_dim: ...`, `inputs[0].data[1][3]: ...`) and gRPC INVALID_ARGUMENT
  with the same message; an unknown model 404 / NOT_FOUND; a response over the size limit
  413 / RESOURCE_EXHAUSTED; the engine unavailable 503 / UNAVAILABLE (the table above).

## Command line

- `posenc serve`: the engine plus the HTTP (and gRPC) workers, on 127.0.0.1:{http_port} with the
  default tables (`--tables FILE` for others; `posenc serve --help` lists every option).
- `posenc engine`: the engine alone (`--dry-run` prints the bytes a table config needs).
- `posenc compute FAMILY --spec JSON|@FILE --out FILE`: one spec with its selections, written to
  `.npz` or `.safetensors` (arrays named as above; `attention_scaling` a 0-d float64 array; bfloat16
  as uint16 bit patterns in npz). `--hf-config FILE` (and `--layer-type`) gives a model's config
  instead of the spec fields; `--tables FILE` the table config whose names `{{"table": ...}}` may use.
  The same response limit applies as on the server (64 MiB), raised with `--max-bytes`. An invalid
  spec exits with status 2 and prints the 422's message.
- `posenc loadtest`: the load-test report ([loadtest.md](loadtest.md)).

The table config (`--tables FILE` / `POSENC_TABLES`): a JSON list of entries
`{{"family": ..., "spec": {{...the family's spec fields...}}, "name": ...}}` or, instead of `spec`,
`"hf_config": "path/to/config.json"`; tables are {default_length} rows long unless an entry says
otherwise (engine/process/configured.py).

## Python

- `posenc.engine.client.Client(shm_dir, namespace)`: `table(family, spec)` maps a stored table
  read-only (numpy views; `.torch(name)` for torch), `lookup(family, body)` answers a body bit for
  bit as the service does, `handle(family, spec)` resolves a spec once: its `lookup(positions,
  out=None)` answers [N] or [B, N] positions in one C call (rope, sinusoidal), into numpy arrays or
  torch tensors; a bad position is refused at `positions` (a batch: `positions`, row, index), a
  wrong `out` at `out`, name; for ALiBi, T5 and `handle(..., selections=("position_ids",))` its
  `lookup(query=..., key=...)` / `lookup(position_ids=...)` answers the named selections
  (engine/reader/selections.py, through the pipeline: the same bits).
- `posenc.service.client.PosencClient(url)` (needs `httpx`): one method per family, numpy answers.
- `posenc.torch.RotaryEmbedding(config, device=None)`: a drop-in for a transformers model's rotary
  embedding (`model.model.rotary_emb`): `forward(x, position_ids)` returns `(cos, sin)` of shape
  [batch, seq, rotary width] in `x.dtype` on `x.device`, `attention_scaling` applied, read from the
  shared tables when an engine runs and computed exactly when none does (see
  [Precision](#precision-against-transformers) for how its logits compare with transformers').
  For the Qwen2-VL / Qwen2.5-VL / Qwen3-VL text models (`mrope_section`) and those read with
  `mrope_axes` (ERNIE-4.5-VL, Qwen3-Omni, Qwen4-Exp; NeoMME's two axes) `position_ids` is
  [k, batch, seq] (t, h, w), or [batch, seq] for every axis at once, as their rotary classes take it.
"""


if __name__ == "__main__":
    sys.exit(main(sys.argv))
