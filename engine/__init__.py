"""posenc engine: exact positional-encoding tables, shared memory, co-located client."""

__version__ = "0.1.0"


def kernels_info() -> dict:
    """The kernel backend in use (numpy or the C SIMD extension) and its CPU features."""
    from . import kernels

    return kernels.info()
