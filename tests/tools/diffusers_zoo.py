"""Writes engine/models/diffusers_zoo.json, the catalogue of every transformer class of the pinned
diffusers (the test extra's pin) and the positional embedding each one carries, from diffusers' own
code:

    .venv/bin/python -m tests.tools.diffusers_zoo            # regenerate engine/models/diffusers_zoo.json
    .venv/bin/python -m tests.tools.diffusers_zoo --check    # exit 1 if the catalogue is stale

Every ``ModelMixin`` + ``ConfigMixin`` class defined in a ``diffusers.models.transformers`` module is
built from its ``__init__`` defaults on the meta device (no weights are allocated) and its modules,
parameters and buffers are read for positions; its module's source is read for the positional
functions of ``diffusers.models.embeddings`` it calls. Each class's row holds:

- ``file``: its module under ``diffusers/models/transformers/``;
- ``kind``: ``rotary`` (a rotary module or function), ``parameter-frequencies`` (rotary frequencies
  held as a parameter, loaded from the weights), ``sin-cos`` (a fixed sin-cos table, a buffer or a
  ``get_*_sincos_pos_embed`` call), ``learned`` (a positional table held as a parameter), or ``none``;
  ``kinds`` all of those found, the first being ``kind``;
- ``modules``: attribute -> class of each positional module the built model holds, with the plain
  (non-tensor) attributes each one keeps (``axes_dim``, ``theta``, ``rope_dim``...): the facts a
  record reads the config for;
- ``functions``: the positional functions its module calls;
- ``defaults``: the ``__init__`` defaults (the keys a ``config.json`` saves), JSON-able ones;
- ``built``: false where the class does not build on its defaults (its modules are then unknown and
  ``kind`` comes from its source alone).

posenc's records (engine/models/diffusers_rope.py, diffusers_grid.py, vision.py) say how a config is
read; tests/engine/test_diffusers_zoo.py holds the records to each class's own positional module and
the catalogue to a fresh run of this tool. posenc never imports diffusers at run time.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import pathlib
import pkgutil
import re
import sys
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[2]
TABLE = ROOT / "engine" / "models" / "diffusers_zoo.json"
KINDS = ("rotary", "parameter-frequencies", "sin-cos", "learned", "none")
# a module whose class name says it is positional
POSITIONAL = re.compile(r"rope|rotary|posembed|positionalembed|positionembed", re.I)
# positional functions of diffusers.models.embeddings (or a module's own copy), and their kind
FUNCTIONS = {
    "get_1d_rotary_pos_embed": "rotary",
    "apply_rotary_emb": "rotary",
    "get_2d_rotary_pos_embed": "rotary",
    "get_2d_rotary_pos_embed_lumina": "rotary",
    "get_3d_rotary_pos_embed": "rotary",
    "get_3d_rotary_pos_embed_allegro": "rotary",
    "get_1d_sincos_pos_embed_from_grid": "sin-cos",
    "get_2d_sincos_pos_embed": "sin-cos",
    "get_3d_sincos_pos_embed": "sin-cos",
}
# a parameter or buffer whose own name says it is positional (not "post_...", "pose_...")
POS_NAME = re.compile(r"^(pos|pos_\w+|positional\w*|position_\w+)$")
# a transformer module that takes rotary embeddings built elsewhere (its pipeline) or builds them
ROTARY_SOURCE = re.compile(r"\b(\w*rotary_emb\w*|freqs_cis|apply_rope|rope_\w+|\w+_rope)\b")
# what the classes whose __init__ defaults leave a size None (HunyuanDiT's in_channels...) are built
# with, to see their modules; a row records them under "built_with"
FILL = {
    "in_channels": 4,
    "out_channels": 4,
    "patch_size": 2,
    "caption_channels": 64,
    "cross_attention_dim": 64,
    "text_embed_dim_t5": 64,
    "llama_layers": [0],
    "num_kv_heads": 2,
    "sample_size": 8,
}


# Why each rotary class posenc does not read is not read (a rotary class left out of the records and
# missing here is written as "not read: no reason given", which the zoo test refuses).
REASONS = {
    "MochiTransformer3DModel": "its frequencies are a parameter (pos_frequencies), loaded from its weights",
}


def _quiet():
    warnings.filterwarnings("ignore")
    import diffusers
    from diffusers.utils import logging

    logging.set_verbosity_error()
    return diffusers


def classes() -> dict:
    """name -> class of every transformer class diffusers defines, sorted by name."""
    diffusers = _quiet()
    import diffusers.models.transformers as pkg

    out = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
        for name, c in vars(mod).items():
            if (
                inspect.isclass(c)
                and c.__module__ == mod.__name__
                and issubclass(c, diffusers.ModelMixin)
                and issubclass(c, diffusers.ConfigMixin)
            ):
                out[name] = c
    return dict(sorted(out.items()))


def _jsonable(v):
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)) and all(isinstance(x, (bool, int, float, str)) for x in v):
        return list(v)
    return ...  # not data


def defaults(cls) -> dict:
    out = {}
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is p.empty:
            continue
        v = _jsonable(p.default)
        if v is not ...:
            out[name] = v
    return out


def _module_facts(module) -> dict:
    facts = {}
    for k, v in sorted(vars(module).items()):
        if k.startswith("_") or k == "training":
            continue
        v = _jsonable(v)
        if v is not ...:
            facts[k] = v
    return facts


def _source_kinds(cls) -> tuple[list, list]:
    """The positional functions the class's module calls, and the kinds they say."""
    src = inspect.getsource(inspect.getmodule(cls))
    called = sorted(f for f in FUNCTIONS if re.search(rf"\b{f}\(", src))
    kinds = [FUNCTIONS[f] for f in called]
    if re.search(r"^(class \w*(Rope|Rotary)\w*|def rope)\b", src, re.M | re.I) or ROTARY_SOURCE.search(src):
        kinds.append("rotary")
    return called, kinds


def _module_kind(m) -> str:
    """rotary or sin-cos: what a positional module's own class computes."""
    src = inspect.getsource(type(m))
    if re.search(r"rope|rotary", type(m).__name__, re.I) or re.search(r"rotary|freqs|\.cos\(|polar", src):
        return "rotary"
    return "sin-cos" if "sincos" in src or "sin(" in src else "learned"


def _build(cls):
    """The class built on the meta device from its defaults (or with FILL's sizes where a default is
    None and the class needs it), and the arguments it took beyond its defaults."""
    import torch

    sig = inspect.signature(cls.__init__).parameters
    for kw in ({}, {k: v for k, v in FILL.items() if k in sig and sig[k].default is None}):
        try:
            with torch.device("meta"):
                return cls(**kw), kw
        except Exception:
            continue
    return None, {}


def row(cls) -> dict:
    functions, kinds = _source_kinds(cls)
    out = {
        "file": inspect.getmodule(cls).__name__.rsplit(".", 1)[1] + ".py",
        "functions": functions,
        "defaults": defaults(cls),
    }
    model, kw = _build(cls)
    out["built"] = model is not None
    if kw:
        out["built_with"] = kw
    built = []  # what the built model holds comes first: its kind is the model's own by default
    if model is not None:
        mods = {}
        for name, m in model.named_modules():  # outermost positional modules only
            if (
                name
                and POSITIONAL.search(type(m).__name__)
                and not _conditioning(name)
                and not any(name.startswith(f"{k}.") for k in mods)
            ):
                mods[name] = {"class": type(m).__name__, "kind": _module_kind(m), "facts": _module_facts(m)}
        out["modules"] = dict(sorted(mods.items()))
        built += [v["kind"] for v in mods.values()]
        params = [n for n, _ in model.named_parameters() if _positional_name(n) and not _conditioning(n)]
        buffers = [n for n, _ in model.named_buffers() if _positional_name(n) and "freq" not in n]
        built += ["parameter-frequencies" for n in params if "freq" in n]
        built += ["sin-cos" for _ in buffers]
        built += ["learned" for n in params if "freq" not in n]
        out["parameters"] = sorted(params)
        out["buffers"] = sorted(buffers)
    found = list(dict.fromkeys([*built, *kinds]))
    out["kinds"] = found or ["none"]
    out["kind"] = out["kinds"][0]
    return out


def _conditioning(name: str) -> bool:
    """A module of the timestep or text conditioning (a timestep's sinusoidal embedding, an attention
    pooler's table): not the tokens' positions."""
    return any(re.match(r"time|pooler|caption|context", part) for part in name.split(".")[:-1])


def _positional_name(name: str) -> bool:
    """A parameter or buffer named as positional (``pos_embed``, ``pos_embedding.weight``, ...); a
    patch embedding's projection (``pos_embed.proj.weight``) is not."""
    parts = name.split(".")
    if POS_NAME.match(parts[-1]):
        return True
    return len(parts) >= 2 and parts[-1] == "weight" and bool(POS_NAME.match(parts[-2]))


def build() -> dict:
    diffusers = _quiet()
    from posenc.engine.models import registry

    rows = {name: row(c) for name, c in classes().items()}
    unread = {
        name: REASONS.get(name, "not read: no reason given")
        for name, r in rows.items()
        if r["kind"] == "rotary" and "rope" not in registry.CLASSES.get(name, {})
    }
    return {"diffusers": diffusers.__version__, "classes": rows, "unread": unread}


# how a class's positional module hands its attention the rotation, where it is not cos and sin
FORMS = {
    "AnyFlowTransformer3DModel": "complex `freqs_cis`",
    "Lumina2Transformer2DModel": "complex `freqs_cis`",
    "ZImageTransformer2DModel": "complex `freqs_cis`",
    "BriaFibo2Transformer2DModel": "complex `freqs_cis`",
    "HiDreamImageTransformer2DModel": "2x2 rotation matrices [[cos, −sin], [sin, cos]] per pair",
    "QwenImageTransformer2DModel": "complex `freqs_cis`: the image's, then the caption's",
    "NucleusMoEImageTransformer2DModel": "complex `freqs_cis`: the image's, then the caption's",
    "QwenImage21Transformer2DModel": "complex `freqs_cis`: the caption's, then the image's",
    "ErnieImageTransformer2DModel": "raw angles [a0, a0, a1, a1, …] (its attention pairs k with k + d/2)",
    "StableAudio3DiTModel": "raw angles cat(freqs, freqs)",
    "HeliosTransformer3DModel": "cos then sin, stacked on one axis",
    **dict.fromkeys(
        ("Kandinsky5Transformer3DModel", "Kandinsky6Transformer3DModel", "Kandinsky6SRTransformer3DModel"),
        "2x2 rotation matrices [[cos, −sin], [sin, cos]] per pair",
    ),
    "LuminaNextDiT2DModel": "complex `freqs_cis`",
    "PRXTransformer2DModel": "2x2 rotation matrices [[cos, −sin], [sin, cos]] per pair",
    "JoyImageEditTransformer3DModel": "cos, sin: the image's, then (rope_type mrope) the caption's",
    "WanAnimate2Transformer3DModel": "complex `freqs` that its rope_apply multiplies the head's pairs by",
    "AnyFlowFARTransformer3DModel": "complex `freqs`: the compressed frames', then the full ones'",
    "AllegroTransformer3DModel": "(cos, sin) tables per axis and each token's (t, h, w) rows in them",
    "SanaWMTransformer3DModel": "complex `freqs`",
}


def _reads(record) -> str:
    """What a record reads of the config, said from its fields."""

    if getattr(record, "reads", None):  # a record that says it itself (diffusers_more.py)
        return record.reads
    theta = f"`{record.theta}`" if isinstance(getattr(record, "theta", None), str) else None
    kind = type(record).__name__
    if kind == "SequenceRope":
        keys = ", ".join(f"`{k}`" for k in record.defaults if k != record.theta)
        return f"1-D, θ {theta or f'{record.theta:g}'}, rotary width from {keys}, half-split"
    if kind == "SectionRope":
        if record.shared:
            return "`rope_freq_dim` frequencies shared by (t, h, w), θ `rope_theta`, half-split"
        scaled = "; rows i·`rope_axes_dim`[0]//height" if record.scaled_key else ""
        return f"rows then columns, d/4 frequencies each, θ 10000, half-split over the head{scaled}"
    if kind == "VideoCropRope":
        return (
            "frames, rows, columns over d/4, 3d/8, 3d/8; rows and columns a crop of a (60, 90) // "
            "patch_size base, fractional, θ 10000"
        )
    if kind == "CropRope":
        return "its pipeline's crop of a 32-patch base (512 px): columns then rows, fractional, θ 10000"
    if kind == "InterleavedMrope":
        return (
            "Qwen3-VL's interleaved mrope: `rope_axes_dim` (or `rope_scaling.mrope_section`), θ `rope_theta`"
        )
    if kind == "CenteredRope" and record.text_first:
        return (
            "axes `axes_dims_rope`, θ 10000, the caption at i on every axis, then the image at frame `text`, "
            "rows and columns centred, interleaved"
        )
    if kind == "CenteredRope":
        return "axes `axes_dims_rope`, θ 10000, rows and columns centred on the image, interleaved"
    axes = f"`{record.axes}`" if isinstance(record.axes, str) else "from `attention_head_dim` (Wan)"
    return f"axes {axes}, θ {theta or f'{record.theta:g}'}, {record.layout}"


def _positions(record) -> str:
    keys = record.grid_keys
    if record.positions == "sequence":
        return "`positions`"
    if record.positions in ("centred", "crop", "scaled", "normalised"):
        return "`grid` (" + ", ".join(keys) + ")"
    if keys is None:
        return "`position_ids`"
    return "`grid` (" + ", ".join(keys) + ") or `position_ids`"


def reference_section() -> str:
    """docs/reference.md's table of the diffusers rotary classes read (tests/tools/reference.py)."""
    from posenc.engine.models import diffusers_rope as dr

    rows = ["| class | reads | positions | its module hands attention |", "|---|---|---|---|"]
    for name, by in sorted(dr.CLASSES.items()):
        record = by["rope"]
        rows.append(f"| `{name}` | {_reads(record)} | {_positions(record)} | {FORMS.get(name, 'cos, sin')} |")
    return "\n".join(rows)


def dumps(table) -> str:
    return json.dumps(table, indent=1, sort_keys=True) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the checked-in catalogue is stale")
    args = ap.parse_args(argv)
    table = build()
    text = dumps(table)
    if args.check:
        if not TABLE.exists() or TABLE.read_text() != text:
            print(f"{TABLE} is stale: run python -m tests.tools.diffusers_zoo", file=sys.stderr)
            return 1
        return 0
    TABLE.write_text(text)
    counts = {}
    for r in table["classes"].values():
        counts[r["kind"]] = counts.get(r["kind"], 0) + 1
    print(
        f"{len(table['classes'])} classes: {counts}; {len(table['unread'])} rotary not read", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
