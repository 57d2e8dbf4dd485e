"""Model configs whose positions are fixed functions, not rotations (docs/reference.md, "Named
tables and model configs"; docs/models.md lists them): what one record is. The records
themselves are buckets.py (transformers 5.24's T5 family, ``t5-buckets``:
``_relative_position_bucket`` and its copies) and sinusoidal.py (the models with a fixed
sinusoidal position table, ``sinusoidal``); registry.MODELS holds them beside the rope ones.

A record (``FixedModel``) reads a config as the model's own code does: which keys, under which
``attribute_map`` alias, the config class's default when a key is absent, and which sub-config
holds them (Pix2Struct's ``text_config``, MusicGen's ``decoder``). Where a model has several
stacks that differ (T5's bidirectional encoder, unidirectional decoder) the request's
``layer_type`` names one, and is required when the config has more than one; a stack without a
table of the family (Whisper's learned decoder positions) is refused there, with the reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ..core.errors import SpecError
from ..core.fields import json_repr, require_object
from .config import LOC, Config, Derived

MODEL_TYPE = (*LOC, "model_type")


def _moved(loc: tuple, where: tuple) -> tuple:
    """A location read inside a sub-config (``where``), as the request spells it."""
    return (*where, *loc[len(LOC) :]) if loc[: len(LOC)] == LOC and where != LOC else loc


@dataclasses.dataclass(frozen=True)
class FixedModel:
    """How one model type's config gives a fixed table: ``read(cfg, layer)`` returns (spec
    fields, where each came from); ``layer`` is ``layers[layer_type]`` (T5: bidirectional)."""

    source: str  # the transformers file whose code this follows
    read: Callable[[Config, Any], tuple]
    defaults: Mapping = dataclasses.field(default_factory=dict)  # class defaults of the keys read
    aliases: Mapping = dataclasses.field(default_factory=dict)  # attribute_map
    layers: Mapping = dataclasses.field(default_factory=dict)  # layer_type -> read's argument; {}: none
    refused_layers: Mapping = dataclasses.field(default_factory=dict)  # layer_type -> why it has no table
    sub: str | None = None  # the sub-config the keys live in
    refuse: Callable[[Config], None] | None = None  # raises where the config turns the table off

    def layer(self, layer_type: str | None) -> Any:
        names = [*self.layers, *self.refused_layers]
        if layer_type is None:
            if len(self.layers) > 1:
                raise SpecError(
                    ("layer_type",),
                    f"required: this model's tables differ by stack "
                    f"({', '.join(self.layers)}); send layer_type {' or '.join(map(repr, self.layers))}",
                    "missing",
                )
            return next(iter(self.layers.values()), None)
        if layer_type in self.refused_layers:
            raise SpecError(("layer_type",), self.refused_layers[layer_type])
        if layer_type not in self.layers:
            if not names:
                raise SpecError(
                    ("layer_type",), "this config has no layer types (one table serves the model)"
                )
            raise SpecError(
                ("layer_type",), f"must be one of {', '.join(map(repr, names))}, got {json_repr(layer_type)}"
            )
        return self.layers[layer_type]

    def derive(self, raw: Mapping, layer_type: str | None) -> Derived:
        arg = self.layer(layer_type)
        where = LOC
        if self.sub is not None:  # the composite config: its sub-config, or the class's default one
            where = (*LOC, self.sub)
            raw = {} if raw.get(self.sub) is None else require_object(raw[self.sub], where)
        cfg = Config(raw, self.aliases, self.defaults)
        try:
            if self.refuse is not None:
                self.refuse(cfg)
            fields, origin = self.read(cfg, arg)
        except SpecError as e:
            raise SpecError(_moved(e.loc, where), e.msg, e.kind) from None
        return Derived(fields, {k: _moved(v, where) for k, v in origin.items()})

    def text_model(self) -> FixedModel:
        """The same record for the sub-config's own model type (its keys at the top level)."""
        return dataclasses.replace(self, sub=None)
