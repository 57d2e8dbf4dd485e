"""The readers: the co-located ``Client`` (client.py; ``posenc.engine.client`` re-exports it),
its resolved lookups (lookup.py) and the handles for other selections (selections.py), and the C
reader of docs/shm-format.md (posenc_shm.h, posenc_shm.c, with a C++ example). Readers map what
the store holds and ask the engine over its socket; they never import the engine process.
"""
