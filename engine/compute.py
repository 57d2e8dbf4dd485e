"""One request (spec + selections + dtype, the JSON of docs/reference.md) -> named arrays, computed
exactly without shared memory: the pipeline's parse -> check -> arrays (engine/answer/pipeline.py).

    compute(family, request, max_bytes=64 MiB) -> dict[str, np.ndarray | float]

The arrays of a family's answer are its ``outputs`` (``posenc.engine.tables.FAMILIES[family].returns``
says them in a line; docs/reference.md has a table per family). bfloat16 arrays are uint16 bit
patterns (engine.dtypes).
Raises SpecError (422) for invalid input and TooLarge (413) before allocating anything.
"""

from .answer.pipeline import DEFAULT_MAX_BYTES, compute

__all__ = ["DEFAULT_MAX_BYTES", "compute"]
