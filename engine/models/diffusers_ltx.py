"""diffusers rotary transformers read by _class_name:
LTX-Video, LTX-2 and Sana-WM (+ its LTX-2 refiner): coordinates normalised to a base in pixels and seconds.

Records as in diffusers_rope.py (the readings of diffusers_axes.py); diffusers_rope.CLASSES merges
this module's CLASSES, and its zoo test (beside tests/engine/test_diffusers_zoo.py) holds each
to the class's own module.
"""

from __future__ import annotations

CLASSES: dict[str, dict] = {}
