"""One request (spec + selections + dtype, the JSON of docs/reference.md) -> named arrays, computed
exactly without shared memory: the pipeline's parse -> check -> arrays (engine/answer/pipeline.py).

    compute(family, request, max_bytes=64 MiB) -> dict[str, np.ndarray | float]

rope: cos, sin [n, d] (dtype), inv_freq [d/2] float32, attention_scaling (float)
sinusoidal: encoding [n, d_model]; alibi: bias [h, nq, nk], slopes [h] float32;
t5-buckets: buckets [nq, nk] int32. bfloat16 arrays are uint16 bit patterns (engine.dtypes).
Raises SpecError (422) for invalid input and TooLarge (413) before allocating anything.
"""

from .answer.pipeline import DEFAULT_MAX_BYTES, compute

__all__ = ["DEFAULT_MAX_BYTES", "compute"]
