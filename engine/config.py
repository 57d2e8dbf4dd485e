"""The engine's table config: which tables to precompute at start.

JSON (a file, ``--tables FILE`` / ``POSENC_TABLES``; or the embedded ``DEFAULT_CONFIG``):

    {"length": 131072,                        # rows per rope/sinusoidal table, distances per alibi
     "tables": [{"family": "rope", "spec": {...API.md spec fields...},
                 "dtypes": ["float32"], "length": 131072, "name": "llama-3.1-8b"}, ...]}

Specs are validated by the same parsers as requests, so an invalid config stops the engine at start
with the same message a request would get (``tables[2].spec.rope_scaling.factor: ...``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from . import dtypes as _dt
from .errors import SpecError
from .fields import refuse_unknown, req_int, require_object
from .tables import FAMILIES, TableDef
from .tables.base import DEFAULT_LENGTH

MAX_LENGTH = 1 << 24

DEFAULT_CONFIG: dict[str, Any] = {
    "length": DEFAULT_LENGTH,
    "tables": [
        # Llama 2 / Llama 1 / Mistral-v0.1 style: θ = 10000, head_dim 128
        {"name": "llama-2-7b", "family": "rope", "spec": {"head_dim": 128, "rope_theta": 10000.0}},
        # Llama 3.1 8B config.json
        {"name": "llama-3.1-8b", "family": "rope",
         "spec": {"head_dim": 128, "rope_theta": 500000.0, "max_position_embeddings": 131072,
                  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}},
        # Qwen2.5 / Mistral-v0.3 style: θ = 1e6
        {"name": "qwen2.5-7b", "family": "rope", "spec": {"head_dim": 128, "rope_theta": 1000000.0}},
        # Pythia 6.9B (GPT-NeoX): rotary_pct 0.25 of head_dim 128
        {"name": "pythia-6.9b", "family": "rope",
         "spec": {"head_dim": 128, "rope_theta": 10000.0, "partial_rotary_factor": 0.25}},
        # Transformer-base/big, BERT-size and large encoders; interleaved and concat share a table
        {"name": "sinusoidal-512", "family": "sinusoidal", "spec": {"d_model": 512}},
        {"name": "sinusoidal-768", "family": "sinusoidal", "spec": {"d_model": 768}},
        {"name": "sinusoidal-1024", "family": "sinusoidal", "spec": {"d_model": 1024}},
        # ALiBi head counts of BLOOM-560m (16), MPT-7B (32), BLOOM-7b1 (32), 12 (BERT-size), 8, 64
        *({"name": f"alibi-{h}", "family": "alibi", "spec": {"num_heads": h}} for h in (8, 12, 16, 32, 64)),
        # T5 encoder (bidirectional) and decoder (unidirectional) defaults
        {"name": "t5-encoder", "family": "t5-buckets", "spec": {"bidirectional": True}},
        {"name": "t5-decoder", "family": "t5-buckets", "spec": {"bidirectional": False}},
    ],
}


@dataclasses.dataclass(frozen=True)
class ConfiguredTable:
    name: str
    table: TableDef
    spec: dict          # the canonical spec fields of the entry (Family.spec_json)


def parse_config(cfg) -> list[ConfiguredTable]:
    require_object(cfg)
    refuse_unknown(cfg, ("length", "tables"))
    length = req_int(cfg, "length", (), lo=1, hi=MAX_LENGTH, required=False, default=DEFAULT_LENGTH)
    tables = cfg.get("tables")
    if not isinstance(tables, list):
        raise SpecError(("tables",), "must be a list of {family, spec, dtypes?, length?, name?}")
    out, seen = [], set()
    for i, entry in enumerate(tables):
        loc = ("tables", i)
        require_object(entry, loc)
        refuse_unknown(entry, ("family", "spec", "dtypes", "length", "name"), loc)
        family = entry.get("family")
        if family not in FAMILIES:
            raise SpecError((*loc, "family"), f"must be one of {', '.join(FAMILIES)}, got {family!r}")
        fam = FAMILIES[family]
        spec_json = entry.get("spec") or {}
        require_object(spec_json, (*loc, "spec"))
        for sel_name in (*fam.selections, "dtype"):
            if sel_name in spec_json:
                raise SpecError((*loc, "spec", sel_name),
                                "not part of a table spec (selections come with requests; dtypes go in 'dtypes')")
        try:
            spec = fam.parse_spec(spec_json)
        except SpecError as e:
            raise SpecError((*loc, "spec", *e.loc), e.msg, e.kind) from None
        n = req_int(entry, "length", loc, lo=1, hi=MAX_LENGTH, required=False, default=length)
        dts = entry.get("dtypes", ["float32"] if fam.has_dtype else [None])
        if fam.has_dtype:
            if not isinstance(dts, list) or not dts:
                raise SpecError((*loc, "dtypes"), f"must be a non-empty list of {sorted(_dt.DTYPES)}")
            for j, dt in enumerate(dts):
                if dt is None:  # a null inside the list is not "absent": name the entry
                    raise SpecError((*loc, "dtypes", j), f"must be one of {sorted(_dt.DTYPES)}, got null")
                _dt.check_dtype(dt, (*loc, "dtypes", j))
        elif entry.get("dtypes") is not None:
            raise SpecError((*loc, "dtypes"), f"{family} has no dtype (its output is int32)")
        name = entry.get("name") or f"{family}-{i}"
        if not isinstance(name, str):
            raise SpecError((*loc, "name"), "must be a string")
        for dt in dts:
            for t in fam.stable_tables(spec, dt, n):
                if t.key not in seen:
                    seen.add(t.key)
                    out.append(ConfiguredTable(name, t, dict(spec_json)))
    return out


def load_config(path: str | None) -> list[ConfiguredTable]:
    if path is None:
        return parse_config(DEFAULT_CONFIG)
    try:
        with open(path, "rb") as f:
            cfg = json.loads(f.read())
    except OSError as e:
        raise SpecError(("tables",), f"cannot read table config {path}: {e.strerror}") from None
    except ValueError as e:
        raise SpecError(("tables",), f"table config {path} is not valid JSON: {e}") from None
    return parse_config(cfg)
