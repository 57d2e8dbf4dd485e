"""posenc: exact positional encodings (RoPE, sinusoidal, ALiBi, T5 buckets), precomputed into
shared memory and served fast.

    posenc.engine    specs, the family registry, float64 references, kernels, shared memory,
                     the engine process and the co-located zero-copy client
    posenc.service   the HTTP front (raw ASGI hot path + FastAPI) over the engine's tables
    posenc.loadtest  load tests (needs the ``loadtest`` extra)
    posenc.cli       the ``posenc`` command

Importing ``posenc`` imports nothing else: each layer is imported where it is used.
"""

__version__ = "0.1.0"
