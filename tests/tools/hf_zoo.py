"""Writes engine/models/zoo.json, the RoPE reading of every transformers model type whose modeling file
has a text rotary embedding, from transformers' own classes (the version the test extra pins):

    .venv/bin/python -m tests.tools.hf_zoo            # regenerate engine/models/zoo.json
    .venv/bin/python -m tests.tools.hf_zoo --check    # exit 1 if engine/models/zoo.json is stale

For each model type of ``CONFIG_MAPPING`` whose modeling module defines a ``*RotaryEmbedding``
class (vision-only ones aside), the tool builds the config class's defaults, finds the rotary class
and the (sub-)config it runs on (the text model's: ``text_config``, ``thinker_config.text_config``
...), runs it, and records what differs between model types, as data:

- ``source``: the modeling file and class; ``text_path``: where the text config sits;
- ``defaults`` / ``aliases`` / ``default_theta`` / ``default_rope``: the text config class's
  defaults of the keys posenc reads, its ``attribute_map``, its default θ and the rope parameters
  its ``__post_init__`` fills in when a config gives none;
- ``layout``: the pairing of the cos/sin the class returns (``torch.cat((freqs, freqs))`` is
  half_split; ``repeat_interleave`` or a complex ``freqs_cis`` is interleaved), found by running it;
- ``default_partial``: whether its default frequencies honour ``partial_rotary_factor`` (the
  class is run again on the config with the fraction set to 0.5);
- ``mrope_interleaved``: for multi-axis classes (``mrope_section``), whether they deal the
  frequencies interleaved (run again on different positions per axis); ``mrope_dealing``: for
  one that deals them neither way, which of rope_axes.DEALINGS it follows (ERNIE-4.5-VL's pairs,
  NeoMME's alternating two axes, Qwen4-Exp's interleaving over part of d/2).

A row is written only when posenc's generic reading (posenc.engine.models.config.RopeModel) of the
config, with these facts, gives the class's own cos/sin (docs/reference.md's tolerance) on the
defaults and on each probe; every other model type is listed under ``unread`` with the reason.
tests/engine/test_hf_zoo.py holds posenc to the classes again, through every way in; this tool
only decides what the data says. posenc never imports transformers at run time.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib
import inspect
import json
import pathlib
import re
import sys
import warnings

import numpy as np

from posenc.engine.models.config import per_layer_type
from posenc.engine.tables import rope_axes

ROOT = pathlib.Path(__file__).resolve().parents[2]
TABLE = ROOT / "engine" / "models" / "zoo.json"
POSITIONS = [0, 1, 2, 3, 17, 100, 1000, 2047, 4095, 4096, 4097, 8191, 32768, 131071, 150000]
# config keys posenc reads (their attribute_map aliases and class defaults are recorded)
READ_KEYS = ("hidden_size", "num_attention_heads", "head_dim", "max_position_embeddings")


def _quiet():
    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def rotary_classes():
    """model dir -> [(module stem, class name)] of the text rotary embeddings its modeling files define."""
    import transformers

    root = pathlib.Path(transformers.__file__).parent / "models"
    out: dict = {}
    for f in sorted(root.glob("*/modeling_*.py")):
        for name in re.findall(r"^class (\w*RotaryEmbedding\w*)\(", f.read_text(), re.M):
            if "Vision" not in name:
                out.setdefault(f.parent.name, []).append((f.stem, name))
    return out


def sub_configs(cfg, path=()):
    """(path, config) of a config and its sub-configs, depth first, the config itself first."""
    yield path, cfg
    for name in getattr(cfg, "sub_configs", None) or {}:
        sub = getattr(cfg, name, None)
        if sub is not None and hasattr(sub, "to_dict") and len(path) < 3:
            yield from sub_configs(sub, (*path, name))


def layer_types(conf):
    """The layer types of a per-layer-type rope_parameters that the config's layers use and give
    rotary parameters (its rotary class builds those alone), else [None]."""
    rp = getattr(conf, "rope_parameters", None)
    if isinstance(rp, dict) and per_layer_type(rp):
        used = set(getattr(conf, "layer_types", None) or rp)
        rotary = [lt for lt in rp if rp[lt] is not None]  # a null block: a layer type without RoPE
        return [lt for lt in rotary if lt in used] or rotary
    return [None]


def run_class(module, positions, layer_type=None):
    """The rotary module's cos/sin for ``positions`` (a list, or [3][n] for multi-axis) as posenc's
    [n, width] float64 arrays, the layout its output is in, and its attention scaling."""
    import torch

    pos = torch.tensor(positions, dtype=torch.int64)
    pos = pos[:, None, :] if pos.ndim == 2 else pos[None, :]
    x = torch.zeros(1, dtype=torch.float32)
    with torch.no_grad():
        out = module(x, pos, layer_type) if layer_type is not None else module(x, pos)
    if isinstance(out, torch.Tensor) and out.is_complex():  # freqs_cis: polar(1, freqs), pairs (2k, 2k+1)
        z = out.reshape(-1, out.shape[-2], out.shape[-1])[0]
        cos, sin, form = z.real.repeat_interleave(2, dim=-1), z.imag.repeat_interleave(2, dim=-1), "complex"
    elif isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out):
        cos, sin = (t.reshape(-1, t.shape[-2], t.shape[-1])[0] if t.ndim >= 2 else t for t in out)
        form = "pair"
    else:
        raise ValueError(f"returns {type(out).__name__}, not (cos, sin)")
    if cos.ndim != 2 or cos.shape[0] != pos.shape[-1]:
        raise ValueError(f"returns cos of shape {tuple(cos.shape)}, not one row per position")
    attr = f"{layer_type}_attention_scaling" if layer_type else "attention_scaling"
    scaling = getattr(module, attr, getattr(module, "attention_scaling", 1.0))
    return cos.double().numpy(), sin.double().numpy(), form, float(scaling)


def tolerance(positions, scaling):
    """transformers' own float32 error (docs/reference.md): (1e-6 + 2.5e-7·p)·max(1, α)."""
    p = np.asarray(positions, dtype=np.float64)
    p = p.max(axis=0) if p.ndim == 2 else p
    return (1e-6 + 2.5e-7 * p[:, None]) * max(1.0, scaling)


def close(got, want, tol):
    return got.shape == want.shape and bool(np.all(np.abs(got - want) <= tol))


def _field_default(cls, name):
    fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    f = fields.get(name) or fields.get(getattr(cls, "attribute_map", {}).get(name, name))
    if f is None or f.default is dataclasses.MISSING or f.default is None:
        return None
    return f.default


def class_facts(conf) -> dict:
    """The text config class's defaults, aliases and default rope parameters."""
    cls = type(conf)
    amap = dict(getattr(cls, "attribute_map", {}) or {})
    facts = {
        "aliases": {
            k: v
            for k, v in sorted(amap.items())
            if k in (*READ_KEYS, "rope_parameters", "rope_theta", "partial_rotary_factor")
        },
        "defaults": {k: v for k in READ_KEYS if (v := _field_default(cls, k)) is not None},
    }
    prf = _field_default(cls, "partial_rotary_factor")
    if prf is not None:
        facts["partial_default"] = float(prf)
    theta = getattr(cls, "default_theta", None)
    if isinstance(theta, (int, float)):
        facts["default_theta"] = float(theta)
    try:
        bare = cls()
    except Exception:
        return facts
    facts["default_rope"] = copy.deepcopy(getattr(bare, "rope_parameters", None))
    legacy = legacy_keys(cls, bare)
    if legacy:
        facts["legacy"] = legacy
    try:
        hd, split = getattr(bare, "head_dim", None), bare.hidden_size // bare.num_attention_heads
    except Exception:  # a heterogeneous config: head_dim differs per layer (per_layer_config)
        hd, split = None, None
    qk = getattr(bare, "qk_rope_head_dim", None)
    if qk is not None and hd == qk:  # DeepSeek-style: __post_init__ copies qk_rope_head_dim
        facts["head_dim_key"] = "qk_rope_head_dim"
        facts["defaults"]["qk_rope_head_dim"] = qk
        facts["defaults"].pop("head_dim", None)
    elif hd is not None and hd != facts["defaults"].get("head_dim", split):
        facts["head_dim_saved"] = True  # computed by __post_init__'s own rule
    return facts


THETA, FRACTION = 12345.0, 0.5  # probe values no default has


def legacy_keys(cls, bare) -> dict:
    """The top-level keys a config class's own convert_rope_params_to_dict reads into its rope
    parameters (transformers 4 spellings: ModernBERT's global_rope_theta, Gemma 3n's
    rope_local_base_freq, GPT-NeoX-Japanese's rotary_emb_base, MiniMax-M2's rotary_dim), found by
    building the class with each key it names set to a probe value: layer type ("" when one block)
    -> {rope field: key}. Empty when the class keeps transformers' shared conversion."""
    from transformers.modeling_rope_utils import RotaryEmbeddingConfigMixin

    fn = getattr(cls, "convert_rope_params_to_dict", None)
    if fn is None or fn is getattr(RotaryEmbeddingConfigMixin, "convert_rope_params_to_dict", None):
        return {}
    names = []
    for klass in cls.__mro__:
        own = klass.__dict__.get("convert_rope_params_to_dict")
        if own is not None and klass is not RotaryEmbeddingConfigMixin:
            names += re.findall(r'(?:kwargs\.(?:pop|get)\(|getattr\(self, )"(\w+)"', inspect.getsource(own))
    out: dict = {}
    head = getattr(bare, "head_dim", None) if not bare.to_dict().get("per_layer_config") else None
    for name in dict.fromkeys(names):
        if name in ("rope_scaling", "rope_parameters"):
            continue
        probes = [(THETA, "rope_theta", name), (FRACTION, "partial_rotary_factor", name)]
        if isinstance(head, int) and head >= 8:
            probes += [
                (head // 2, "partial_rotary_factor", name + "/head_dim"),
                (head // 4, "partial_rotary_factor", name + "/head_dim"),
            ]
        for value, field, key in probes:
            try:
                rp = cls(**{name: value}).rope_parameters
            except Exception:
                continue
            entries = rp.items() if rp and per_layer_type(rp) else [("", rp)]
            want = value / head if key.endswith("/head_dim") else value
            for lt, e in entries:
                if (
                    e
                    and e.get(field) == want
                    and (bare.rope_parameters.get(lt, {}) if lt else bare.rope_parameters).get(field) != want
                ):
                    out.setdefault(lt, {})[field] = key
    return out


def find(mt, cfg, classes):
    """(module, class name, path, conf) of the first text rotary class that runs on the config or
    one of its sub-configs: the config itself first, then text_config-like paths."""
    d = type(cfg).__module__.split(".")[2]
    cands = []
    for path, conf in sub_configs(cfg):
        for stem, name in classes.get(d, ()):
            cands.append((path, stem, name, conf))
    # the text model's config first: the config itself, then paths through a text config
    cands.sort(key=lambda c: (0 if not c[0] else 1 if "text_config" in c[0][-1:] else 2, len(c[0])))
    errors = []
    for path, stem, name, conf in cands:
        mod = importlib.import_module(f"transformers.models.{d}.{stem}")
        try:
            module = getattr(mod, name)(conf)
            run_class(module, [0, 1, 2], layer_types(conf)[0])
        except Exception as e:
            errors.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:90] if str(e) else ''}")
            continue
        return d, stem, name, path, conf
    raise LookupError("; ".join(errors[:2]) or "no text rotary class")


def _probe(model_fn, conf_dict, cls, row, positions, layer_type):
    """Whether posenc's reading of conf_dict (a text config) gives the class's own cos/sin."""
    from posenc.engine.answer.pipeline import compute

    conf = cls.from_dict(copy.deepcopy(conf_dict))
    cos, sin, form, scaling = run_class(model_fn(conf), positions, layer_type)
    from posenc.engine.models.registry import _zoo_record

    rec = _zoo_record({**row, "source": "probe", "text_path": []})
    d = rec.derive(conf_dict, layer_type)
    body = {**d.fields, ("position_ids" if isinstance(positions[0], list) else "positions"): positions}
    got = compute("rope", body)
    if cos.shape[1] * 2 == got["cos"].shape[1] and form == "pair":
        form = "half"
        # half width (GPT-OSS: cos(freqs) alone, applied to the two halves of a head): the
        # half-split layout's first half
        cos, sin = np.concatenate([cos, cos], axis=1), np.concatenate([sin, sin], axis=1)
    tol = tolerance(positions, got["attention_scaling"])
    return (
        close(got["cos"], cos, tol) and close(got["sin"], sin, tol),
        form,
        scaling,
        got["attention_scaling"],
    )


def derive_row(mt, classes):
    """(row, None) for a model type posenc reads, else (None, reason)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cfg = CONFIG_MAPPING[mt]()
    try:
        d, stem, name, path, conf = find(mt, cfg, classes)
    except LookupError as e:
        return None, f"no text rotary class runs on its config's defaults ({e})"
    mod = importlib.import_module(f"transformers.models.{d}.{stem}")
    klass = getattr(mod, name)
    cls = type(conf)
    base = conf.to_dict()
    row = {"source": f"models/{d}/{stem}.py ({name})", "text_path": list(path), **class_facts(conf)}
    if base.get("per_layer_config"):
        row["per_layer"] = True
    lts = layer_types(conf)
    section = _section(base, lts[0])
    own = getattr(klass(conf), "mrope_section", None)
    n_axes = _n_axes(klass)
    if section is None and own is not None:  # the class's own default when the config has none
        section = list(own)
        row["mrope_default"] = section
    elif section is None and n_axes is None and "mrope_section" in inspect.getsource(klass):
        return None, "multi-axis RoPE whose class reads an mrope_section posenc cannot find"
    positions = _positions(klass, conf)

    def matches(facts, d=base, pos=None):
        try:
            return all(_probe(klass, d, cls, {**row, **facts}, pos or positions, lt)[0] for lt in lts)
        except Exception:
            return False

    # the layout and the fraction's reading, from the defaults (multi-axis as one axis: every
    # axis the same position)
    cands = [
        {"layout": lay, "default_partial": dp}
        for lay in ("half_split", "interleaved")
        for dp in (False, True)
    ]
    cands = [c for c in cands if matches(c)]
    if not cands:
        try:
            _probe(klass, base, cls, {**row, "layout": "half_split"}, positions, lts[0])
            why = "its rotary class's cos/sin differ from posenc's reading of its defaults in both layouts"
        except Exception as e:
            why = f"posenc refuses its defaults ({str(e).splitlines()[0][:160]})"
        return None, why
    if all(_rope_type(base, lt) != "default" for lt in lts):
        cands = [c for c in cands if not c["default_partial"]]  # only the default type reads it
    if len({c["default_partial"] for c in cands}) > 1:
        # does its default rope honour partial_rotary_factor? run it again with the fraction at 0.5
        # (a multi-axis class that honours it needs its section scaled with it; one that does not,
        # the section as it is)
        probes = [_with_partial(base, 0.5)] + ([_with_partial(base, 0.5, section)] if section else [])
        cands = [c for c in cands if any(matches(c, p) for p in probes)]
        if len(cands) != 1:
            return None, "with partial_rotary_factor 0.5 its rotary width follows neither reading"
    row.update(cands[0])
    form = _probe(klass, base, cls, row, positions, lts[0])[1]
    if form != "pair":
        row["returns"] = form
    if section is not None or n_axes is not None:
        # multi-axis: sections dealt in blocks or interleaved (Qwen2-VL, Qwen3-VL), else by one of
        # rope_axes.DEALINGS, on different positions per axis
        axes = three_axes(positions, len(section) if section is not None else n_axes)
        inter = [
            m for m in (False, True) if section is not None and matches({"mrope_interleaved": m}, pos=axes)
        ]
        dealing = [n for n in rope_axes.DEALINGS if not inter and matches({"mrope_dealing": n}, pos=axes)]
        if not inter and not dealing:
            return None, f"multi-axis RoPE (mrope_section {section}) dealt by none of posenc's dealings"
        row.update({"mrope_interleaved": inter[0]} if inter else {"mrope_dealing": dealing[0]})
    if row.get("default_rope") is None:
        row.pop("default_rope", None)
    return row, None


def _positions(klass, conf):
    """POSITIONS, or those below max_position_embeddings for a class whose table stops there."""
    m = getattr(conf, "max_position_embeddings", None)
    src = inspect.getsource(klass)
    if m and "max_position_embeddings" in src and "create_sinusoidal_positions" in src:
        return [p for p in POSITIONS if p < m]
    return POSITIONS


def three_axes(positions, k=3):
    """k rows of different positions (one per axis), from the first 8 probe positions."""
    return [[p // (a + 1) + (a > 1) for p in positions[:8]] for a in range(k)]


def _n_axes(klass):
    """The number of position axes a class expands position_ids to, when it says it (NeoMME's 2)."""
    m = re.search(r"position_ids\.expand\((\d+),", inspect.getsource(klass))
    return int(m[1]) if m else None


def _blocks(d, lt):
    rp = d.get("rope_parameters") or {}
    return rp.get(lt, {}) if lt is not None else rp


def _rope_type(d, lt):
    b = _blocks(d, lt)
    return b.get("rope_type") or b.get("type") or "default"


def _section(d, lt):
    return _blocks(d, lt).get("mrope_section")


def _with_partial(d, prf, section=None):
    """The config with the fraction at prf (and, given the section in use, its multi-axis
    section scaled with it)."""
    d = copy.deepcopy(d)
    rp = d.get("rope_parameters") or {}
    for b in [b for b in rp.values() if b is not None] if rp and per_layer_type(rp) else [rp]:
        b["partial_rotary_factor"] = prf
        sec = section and (b.get("mrope_section") or section)
        if sec and all(s * prf == int(s * prf) for s in sec):
            b["mrope_section"] = [int(s * prf) for s in sec]
    d["rope_parameters"] = rp
    d["partial_rotary_factor"] = prf
    return d


def build(only=None):
    transformers = _quiet()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    from posenc.engine.models import registry

    classes = rotary_classes()
    models, unread = {}, {}
    for mt in sorted(CONFIG_MAPPING_NAMES):
        if only and mt not in only:
            continue
        d = CONFIG_MAPPING[mt].__module__.split(".")[2]
        if d not in classes or mt in registry.HAND_WRITTEN:
            continue
        try:
            row, why = derive_row(mt, classes)
        except Exception as e:  # the config class itself does not build on its defaults
            row, why = None, f"its config class does not build on its defaults ({type(e).__name__})"
        if row is not None:
            models[mt] = row
        else:
            unread[mt] = why
    return {"transformers": transformers.__version__, "models": models, "unread": unread}


def dumps(table) -> str:
    return json.dumps(table, indent=1, sort_keys=True) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the checked-in table is stale")
    ap.add_argument("--only", nargs="*", help="model types to derive (printed, nothing written)")
    args = ap.parse_args(argv)
    table = build(set(args.only) if args.only else None)
    text = dumps(table)
    if args.only:
        sys.stdout.write(text)
        return 0
    if args.check:
        if TABLE.read_text() != text:
            print(f"{TABLE} is stale: run python -m tests.tools.hf_zoo", file=sys.stderr)
            return 1
        return 0
    TABLE.write_text(text)
    print(f"{len(table['models'])} model types read, {len(table['unread'])} not read", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
