"""diffusers transformer configs whose positions are an absolute sin-cos table (read by
``_class_name``): each record reads the config as the class's own patch embedding does (diffusers
0.42.1, models/embeddings.py). registry.CLASSES holds them beside vision.CLASSES and
diffusers_rope.CLASSES.
"""

from __future__ import annotations

CLASSES: dict[str, dict] = {}
