"""Handles for the specs a row lookup does not answer: ALiBi and T5 blocks (``query`` and ``key``),
multi-axis RoPE (``position_ids``), or any spec asked with other selections than ``positions``.

    h = Client().handle("alibi", {"num_heads": 12, "dtype": "bfloat16"})
    h.lookup(query=[4095], key=range(4096))            # {"bias": [12, 1, 4096], "slopes": [12]}
    h = Client().handle("rope", {"head_dim": 128, "mrope_section": [16, 24, 24]}, selections=("position_ids",))
    h.lookup(position_ids=[[0, 1, 2], [0, 1, 1], [0, 1, 2]])

``Client.handle`` returns the row Handle (engine/reader/lookup.py: one C call) for a spec whose selection is
``positions`` alone, and a SelectionHandle otherwise: its spec's fields are checked once, each lookup
answers exactly what ``posenc.engine.compute`` answers for the spec and its selections (bit
for bit, on both sides of the stored table's end) through the pipeline from the mapped table (the
blocks' own C kernels fill them), and ``out=`` takes preallocated numpy arrays (the answer is copied
into them). Selections are lists, ranges, numpy arrays or torch tensors, as the pipeline takes them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..answer import pipeline
from ..core.errors import SpecError
from ..tables import FAMILIES
from .lookup import Handle


def handle_for(client, family: str, spec: Mapping, max_bytes, selections: tuple | None = None):
    """The handle ``Client.handle`` returns (see the module doc)."""
    fam = FAMILIES.get(family)
    names = tuple(selections) if selections else fam.selections if fam is not None else ("positions",)
    if names == ("positions",) and fam is not None and fam.selections == ("positions",):
        return Handle(client, family, spec, max_bytes)
    return SelectionHandle(client, family, spec, max_bytes, names)


def _plain(v):
    """A selection as the pipeline's JSON form takes it: lists of ints (torch and numpy arrays,
    ranges converted); anything else as it is, for the pipeline to refuse by name."""
    if hasattr(v, "detach") and hasattr(v, "numpy"):  # a torch tensor, without importing torch
        v = v.detach().cpu().numpy()
    if isinstance(v, np.ndarray) and v.dtype.kind in "iu":
        return v.tolist()
    if isinstance(v, range):
        return list(v)
    return v


class SelectionHandle:
    """One resolved spec whose selections are named (``lookup(**selections, out=None)``)."""

    def __init__(self, client, family: str, spec: Mapping, max_bytes, selections: tuple):
        self.client, self.family, self.spec, self.max_bytes = client, family, dict(spec), max_bytes
        self.selections = selections
        fam = FAMILIES.get(family)
        if fam is None:
            raise SpecError(("family",), f"unknown family {family!r} (one of {', '.join(FAMILIES)})")
        known = set(fam.selection_fields)
        unknown = [k for k in selections if k not in known]
        if unknown:
            raise SpecError((unknown[0],), f"not a selection of {family} ({', '.join(sorted(known))})")
        taken = [k for k in self.spec if k in known]
        if taken:
            raise SpecError((taken[0],), "a handle's spec holds no selection: give it to lookup()")
        fam.parse_spec({k: v for k, v in self.spec.items() if k != "dtype"})  # the spec's fields, once

    def lookup(self, out: Mapping | None = None, **selections) -> dict:
        """compute(family, {**spec, **selections}), served from shared memory; ``out``: {array name:
        a preallocated C-contiguous numpy array} the answer's arrays are copied into (returned)."""
        missing = [k for k in self.selections if k not in selections]
        if missing or set(selections) - set(self.selections):
            name = missing[0] if missing else sorted(set(selections) - set(self.selections))[0]
            raise SpecError((name,), f"lookup takes {', '.join(self.selections)}")
        req = self.client.resolve(self.family, {**self.spec, **{k: _plain(v) for k, v in selections.items()}})
        pipeline.check(req, self.max_bytes)
        got = self.client.answer(req)
        if out is None:
            return got
        for k, o in out.items():
            if (
                k not in got
                or not isinstance(o, np.ndarray)
                or o.shape != np.shape(got[k])
                or o.dtype != np.asarray(got[k]).dtype
                or not o.flags.c_contiguous
                or not o.flags.writeable
            ):
                raise SpecError(
                    ("out", k),
                    f"must be a writable C-contiguous {np.asarray(got[k]).dtype} array of "
                    f"shape {list(np.shape(got[k]))}"
                    if k in got
                    else "not an array of the answer",
                )
            o[...] = got[k]
        return {**got, **out}
