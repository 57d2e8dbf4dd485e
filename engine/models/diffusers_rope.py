"""diffusers transformer configs whose positions are rotary (read by ``_class_name``): each record
reads the config as the class's own code does (diffusers 0.42.1, models/transformers/*.py and
models/embeddings.py). registry.CLASSES holds them beside vision.CLASSES and diffusers_grid.CLASSES.
"""

from __future__ import annotations

CLASSES: dict[str, dict] = {}
