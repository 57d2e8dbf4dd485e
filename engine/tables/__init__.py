"""The family registry: one ``Family`` object per table family, each in its own module, which
owns everything about that family (base.py says what). Every list of families in posenc (HTTP
routes, metric labels, the CLI's choices, the engine's table config, the clients, the docs) is
derived from ``FAMILIES``; adding a family is one new module and one line here.
"""

from __future__ import annotations

from . import alibi, rope, sinusoidal, sinusoidal_grid, t5
from .base import FAMILIES, Family, TableDef

FAMILIES.update(
    (f.name, f) for f in (rope.FAMILY, sinusoidal.FAMILY, sinusoidal_grid.FAMILY, alibi.FAMILY, t5.FAMILY)
)

__all__ = ["FAMILIES", "Family", "TableDef"]
