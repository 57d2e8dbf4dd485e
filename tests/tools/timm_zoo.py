"""Writes engine/models/timm_zoo.json, the rope module of every timm model (the version the test extra
pins) that has one, from timm's own registry:

    .venv/bin/python -m tests.tools.timm_zoo            # regenerate engine/models/timm_zoo.json
    .venv/bin/python -m tests.tools.timm_zoo --check    # exit 1 if engine/models/timm_zoo.json is stale

Every model of ``timm.list_models()`` whose module's source mentions a rotary embedding is created
on the meta device (no weights, no memory) with timm's rope classes' constructors wrapped, and the
arguments its model function gives the rope module are recorded, as data (``module``: the class,
``args``: its keyword arguments, ``file``: the model's module). posenc reads the classes it has a
reading of (engine/models/timm_vit.py); every other model with a rope module is listed under
``unread`` with the reason (``RotaryEmbeddingMixed`` learns its frequencies: they are weights).
tests/engine/test_timm_zoo.py builds each module from these arguments and holds posenc's answer to
it; this tool only records what timm's registry says. posenc never imports timm at run time.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[2]
TABLE = ROOT / "engine" / "models" / "timm_zoo.json"
# the rope classes posenc reads, and why it leaves the others
READ = ("RotaryEmbedding", "RotaryEmbeddingCat", "RotaryEmbeddingDinoV3", "Gemma4RotaryEmbedding2D")
WHY = {
    "RotaryEmbeddingMixed": "RotaryEmbeddingMixed learns its frequencies per block and head "
    "(the freqs parameter, loaded from the weights): no config gives them",
}


def rope_classes():
    """The rope module classes timm defines: {name: class}."""
    import timm.layers.pos_embed_sincos as pes
    import timm.models.gemma4_vit as g4

    names = ("RotaryEmbedding", "RotaryEmbeddingCat", "RotaryEmbeddingDinoV3", "RotaryEmbeddingMixed")
    out = {n: getattr(pes, n) for n in names}
    out["RotaryEmbeddingMRope"] = pes.RotaryEmbeddingMRope
    out["Gemma4RotaryEmbedding2D"] = g4.Gemma4RotaryEmbedding2D
    return out


def _plain(v):
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return float(v)
    return v


def capture(names=None) -> dict:
    """{model name: [(class name, kwargs)]} of the rope modules each model's function builds."""
    import timm
    import torch
    from timm.models import _registry

    warnings.filterwarnings("ignore")
    seen: list = []
    patched = []
    for cls in rope_classes().values():
        orig = cls.__init__

        def wrap(self, *a, __orig=orig, __cls=cls, **kw):
            if a:
                raise TypeError(f"{__cls.__name__} built with positional arguments {a}: record them by name")
            if type(self) is __cls:
                seen.append((__cls.__name__, kw))
            __orig(self, *a, **kw)

        cls.__init__ = wrap
        patched.append((cls, orig))
    out = {}
    try:
        for model in names or timm.list_models():
            mod = _registry._model_to_module.get(model)
            src = pathlib.Path(sys.modules[f"timm.models.{mod}"].__file__)
            text = src.read_text().lower()
            if "rope" not in text and "rotary" not in text:
                continue
            seen.clear()
            with torch.device("meta"):
                timm.create_model(model, pretrained=False)
            if seen:
                out[model] = (f"models/{src.name}", list(seen))
    finally:
        for cls, orig in patched:
            cls.__init__ = orig
    return out


def build(names=None) -> dict:
    import timm

    models, unread = {}, {}
    for model, (file, built) in sorted(capture(names).items()):
        if len(built) != 1:
            unread[model] = f"{len(built)} rope modules ({', '.join(c for c, _ in built)})"
            continue
        cls, kw = built[0]
        args = {k: _plain(v) for k, v in sorted(kw.items()) if k not in ("device", "dtype")}
        if cls not in READ:
            unread[model] = WHY.get(cls, f"posenc has no reading of {cls}")
            continue
        dim = args.get("dim", args.get("head_dim"))
        if dim % 4:
            unread[model] = f"{cls} of dim {dim}: timm's two axes cover {dim // 4 * 4} of its dims"
            continue
        models[model] = {"file": file, "module": cls, "args": args}
    return {"timm": timm.__version__, "models": models, "unread": unread}


def dumps(table) -> str:
    return json.dumps(table, indent=1, sort_keys=True) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the checked-in table is stale")
    args = ap.parse_args(argv)
    text = dumps(build())
    if args.check:
        if not TABLE.exists() or TABLE.read_text() != text:
            print(f"{TABLE} is stale: run python -m tests.tools.timm_zoo", file=sys.stderr)
            return 1
        return 0
    TABLE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
