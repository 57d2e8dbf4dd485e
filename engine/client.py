"""``posenc.engine.client``, the public path of the co-located client (README.md and docs/ name
it): a re-export of engine/reader/client.py, where the code lives. Code inside the project
imports posenc.engine.reader.client.
"""

from .core.errors import EngineUnavailable
from .reader.client import (
    ASK_AGAIN_S,
    ASK_TIMEOUT_S,
    ASKED_SHOWN_S,
    MAX_HANDLES,
    MAX_PENDING_ASKS,
    NO_FILE_RECHECK_S,
    Client,
    TableView,
    connect,
)

__all__ = [
    "ASKED_SHOWN_S",
    "ASK_AGAIN_S",
    "ASK_TIMEOUT_S",
    "MAX_HANDLES",
    "MAX_PENDING_ASKS",
    "NO_FILE_RECHECK_S",
    "Client",
    "EngineUnavailable",
    "TableView",
    "connect",
]
