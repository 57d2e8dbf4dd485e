"""timm's rotary ViTs (read by the ``architecture`` a timm ``config.json`` names, the registered
model name): each record holds the rope module's parameters the registered model function passes
(timm 1.0.31). registry.ARCHITECTURES holds them.
"""

from __future__ import annotations

ARCHITECTURES: dict[str, dict] = {}
