"""posenc engine: exact positional-encoding tables, shared memory, co-located client."""

__version__ = "0.1.0"
