"""The store: sealed shared-memory segments, the manifest's files and the table log
(segments.py), and descriptors passed over Unix sockets (fdpass.py). Used by the engine process,
which writes it, and by the readers, which map it; imports nothing else of the engine.
"""
