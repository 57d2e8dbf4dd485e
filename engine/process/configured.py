"""The engine's table config: which tables to precompute at start.

JSON (a file, ``--tables FILE`` / ``POSENC_TABLES``; or the embedded ``DEFAULT_CONFIG``):

    {"length": 131072,                        # rows per rope/sinusoidal table, distances per alibi
     "on_demand_length": 131072,              # the longest an on-demand table grows (engine/tables/base.py)
     "tables": [{"family": "rope", "spec": {...the family's spec fields (docs/reference.md)...},
                 "dtypes": ["float32"], "length": 131072, "name": "llama-3.1-8b"}, ...]}

Instead of ``spec``, an entry may give a model's config (the families and model types of
engine/models/registry.py): ``"hf_config": {...}`` or a path to a config.json (relative to the table
config's folder; the file, and an inline config, may hold config.json's NaN and Infinity:
engine/core/jsonread.py), and where the config has several parts ``"layer_type"``. Specs are
validated by the same parsers as requests, so an invalid config stops the engine at start with
the same message a request would get
(``tables[2].spec.rope_scaling.factor: ...``, ``tables[3].hf_config.rotary_pct: ...``).

Each configured table keeps its name and its canonical spec (``ConfiguredTable``): the engine
writes both into its manifest, and a request may then name the table (``{"table": NAME}``).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ..core import dtypes as _dt
from ..core import jsonread
from ..core.errors import SpecError
from ..core.fields import refuse_unknown, req_int, require_object
from ..models import registry
from ..tables import FAMILIES, TableDef
from ..tables.base import DEFAULT_LENGTH

MAX_LENGTH = 1 << 24

# The embedded default set, sized to the positions each model uses (a request past a table's length
# is computed exactly for the rows past it, so a length is a speed choice, never a correctness one):
# about 230 MiB, built in well under two seconds on two cores.
DEFAULT_CONFIG: dict[str, Any] = {
    "length": DEFAULT_LENGTH,
    "tables": [
        # Llama 2 / Llama 1 / Mistral-v0.1 style: θ = 10000, head_dim 128 (4k context; Mistral 32k)
        {
            "name": "llama-2-7b",
            "family": "rope",
            "length": 32768,
            "spec": {"head_dim": 128, "rope_theta": 10000.0},
        },
        # Llama 3.1 8B config.json: 128k context
        {
            "name": "llama-3.1-8b",
            "family": "rope",
            "spec": {
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
            },
        },
        # Qwen2.5 / Mistral-v0.3 style: θ = 1e6 (32k context)
        {
            "name": "qwen2.5-7b",
            "family": "rope",
            "length": 32768,
            "spec": {"head_dim": 128, "rope_theta": 1000000.0},
        },
        # Pythia 6.9B (GPT-NeoX): rotary_pct 0.25 of head_dim 128 (2k context)
        {
            "name": "pythia-6.9b",
            "family": "rope",
            "length": 8192,
            "spec": {"head_dim": 128, "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        },
        # Qwen2.5-VL's multimodal RoPE (mrope_section [16, 24, 24]) reads the qwen2.5-7b table above:
        # same frequencies, its columns gathered per axis. FLUX.1 (axes_dims_rope [16, 56, 56],
        # θ 10000, interleaved): text ids are 0 and image ids the latent patch grid (64-128 per side).
        {
            "name": "flux.1",
            "family": "rope",
            "length": 4096,
            "spec": {"head_dim": 128, "axes_dim": [16, 56, 56], "layout": "interleaved"},
        },
        # SD3 / SD3.5's PatchEmbed: a pos_embed_max_size 192 grid with base_size 128 // 2, stored as
        # two 192-row axis tables
        {
            "name": "sd3-grid",
            "family": "sinusoidal-grid",
            "spec": {"embed_dim": 1536, "grid_size": 192, "base_size": 64},
        },
        # Transformer-base/big, BERT-size and large encoders (512-8192 positions); interleaved and
        # concat share a table
        *(
            {"name": f"sinusoidal-{d}", "family": "sinusoidal", "length": 8192, "spec": {"d_model": d}}
            for d in (512, 768, 1024)
        ),
        # ALiBi head counts of BLOOM-560m (16), MPT-7B (32), BLOOM-7b1 (32), 12 (BERT-size), 8, 64;
        # distances up to 64k (MPT-StoryWriter's 65k context)
        *(
            {"name": f"alibi-{h}", "family": "alibi", "length": 65536, "spec": {"num_heads": h}}
            for h in (8, 12, 16, 32, 64)
        ),
        # T5 encoder (bidirectional) and decoder (unidirectional) defaults
        {"name": "t5-encoder", "family": "t5-buckets", "spec": {"bidirectional": True}},
        {"name": "t5-decoder", "family": "t5-buckets", "spec": {"bidirectional": False}},
    ],
}


@dataclasses.dataclass(frozen=True)
class ConfiguredTable:
    name: str
    table: TableDef
    spec: dict  # the canonical spec fields of the entry (Family.spec_json)


class TableList(list):
    """The configured tables (a list of ConfiguredTable), and the config's ``on_demand_length``:
    the longest the engine builds a table that requests ask for (sized to the rows they read)."""

    on_demand_length: int = DEFAULT_LENGTH


def named_specs(tables: list[ConfiguredTable]) -> dict:
    """{name: (family, spec fields)}: the tables a ``table`` body may name."""
    return {ct.name: (ct.table.family, ct.spec) for ct in tables}


def _read_json(path: str, loc: tuple, what: str, allowed=jsonread.in_table_hf_config):
    """A JSON file; NaN/Infinity only where ``allowed`` (inside model configs: engine/core/jsonread.py)."""
    try:
        with open(path, "rb") as f:
            return jsonread.loads(f.read(), allowed)
    except SpecError:  # a NaN outside the model configs: at its path
        raise
    except OSError as e:
        raise SpecError(loc, f"cannot read {what} {path}: {e.strerror}") from None
    except ValueError as e:
        raise SpecError(loc, f"{what} {path} is not valid JSON: {e}") from None


def _entry_spec(fam, entry: dict, loc: tuple, base_dir: str):
    """The parsed spec of a config entry: its ``spec``, or what its ``hf_config`` gives."""
    cfg = entry.get("hf_config")
    if cfg is not None:
        if entry.get("spec") is not None:
            raise SpecError((*loc, "spec"), "give either spec or hf_config, not both")
        if isinstance(cfg, str):
            cfg = _read_json(
                os.path.join(base_dir, cfg), (*loc, "hf_config"), "model config", jsonread.anywhere
            )
        try:
            derived = registry.derive(fam.name, cfg, entry.get("layer_type"))
            try:
                return fam.parse_spec(derived.fields)
            except SpecError as e:
                raise derived.relocate(e) from None
        except SpecError as e:
            raise SpecError((*loc, *e.loc), e.msg, e.kind) from None
    if entry.get("layer_type") is not None:
        raise SpecError((*loc, "layer_type"), "only with hf_config")
    spec_json = entry.get("spec") or {}
    require_object(spec_json, (*loc, "spec"))
    for sel_name in (*fam.selection_fields, "dtype"):
        if sel_name in spec_json:
            raise SpecError(
                (*loc, "spec", sel_name),
                "not part of a table spec (selections come with requests; dtypes go in 'dtypes')",
            )
    try:
        return fam.parse_spec(spec_json)
    except SpecError as e:
        raise SpecError((*loc, "spec", *e.loc), e.msg, e.kind) from None


def parse_config(cfg, base_dir: str = ".") -> TableList:
    require_object(cfg)
    refuse_unknown(cfg, ("length", "on_demand_length", "tables"))
    length = req_int(cfg, "length", (), lo=1, hi=MAX_LENGTH, required=False, default=DEFAULT_LENGTH)
    on_demand = req_int(
        cfg, "on_demand_length", (), lo=1, hi=MAX_LENGTH, required=False, default=DEFAULT_LENGTH
    )
    tables = cfg.get("tables")
    if not isinstance(tables, list):
        raise SpecError(("tables",), "must be a list of {family, spec, dtypes?, length?, name?}")
    out, seen, names = TableList(), set(), {}
    out.on_demand_length = on_demand
    for i, entry in enumerate(tables):
        loc = ("tables", i)
        require_object(entry, loc)
        refuse_unknown(entry, ("family", "spec", "hf_config", "layer_type", "dtypes", "length", "name"), loc)
        family = entry.get("family")
        if family not in FAMILIES:
            raise SpecError((*loc, "family"), f"must be one of {', '.join(FAMILIES)}, got {family!r}")
        fam = FAMILIES[family]
        spec = _entry_spec(fam, entry, loc, base_dir)
        n = req_int(entry, "length", loc, lo=1, hi=MAX_LENGTH, required=False, default=length)
        dts = entry.get("dtypes", [_dt.DEFAULT_DTYPE] if fam.has_dtype else [None])
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
        if name in names:  # requests name tables: one name, one spec
            raise SpecError((*loc, "name"), f"{name!r} already names tables[{names[name]}]")
        names[name] = i
        for dt in dts:
            for t in fam.stable_tables(spec, dt, n):
                if t.key not in seen:
                    seen.add(t.key)
                    out.append(ConfiguredTable(name, t, fam.spec_json(spec)))
    return out


def load_config(path: str | None) -> TableList:
    if path is None:
        return parse_config(DEFAULT_CONFIG)
    return parse_config(_read_json(path, ("tables",), "table config"), os.path.dirname(os.path.abspath(path)))
