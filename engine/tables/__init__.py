"""Table families: one module per family, each with the same surface (STYLE.md §1-3):

    parse(request) -> (frozen spec, {selection name: Selection})
    compute(spec, selections, dtype) -> {array name: ndarray | float}   (numpy float64 reference)
    output_nbytes(spec, *selection sizes, dtype) -> int
    FIELDS, SELECTIONS

Every allowed family name exists once, here; the CLI, the HTTP routes and the docs read it.
"""

from types import ModuleType

from . import alibi, rope, sinusoidal, t5

FAMILIES: dict[str, ModuleType] = {
    "rope": rope,
    "sinusoidal": sinusoidal,
    "alibi": alibi,
    "t5-buckets": t5,
}

# Families whose float arrays take a dtype (t5-buckets is always int32).
HAS_DTYPE = {name: "dtype" in mod.FIELDS for name, mod in FAMILIES.items()}
