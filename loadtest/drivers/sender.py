"""Which sender the probe runs: the C one (loadtest/_sender.c, built by setup.py) where it is built,
else the Python loop (loadtest/drivers/pyloop.py). Both take the same arguments and return the same arrays:

    run(host, port, requests, rate, total, hard_stop_s, connections)
        -> (scheduled, queued, resets, latency_ns, lag_ns, rx_ns, status)   (numpy arrays)

``POSENC_PROBE_SENDER=python`` forces the Python loop (to compare the two).
"""

from __future__ import annotations

import os

import numpy as np

from . import pyloop

try:
    from .. import _sender
except ImportError:  # not built: no compiler at install time, or not Linux
    _sender = None


def name() -> str:
    """ "c" or "python": the sender ``run`` uses now."""
    if _sender is None or os.environ.get("POSENC_PROBE_SENDER") == "python":
        return "python"
    return "c"


def run(
    host: str, port: int, requests: list[bytes], rate: float, total: int, hard_stop_s: float, connections: int
):
    fn = _sender.run if name() == "c" else pyloop.run
    scheduled, queued, resets, lat, lag, rx, status = fn(
        host, port, list(requests), float(rate), int(total), float(hard_stop_s), int(connections)
    )
    return (
        scheduled,
        queued,
        resets,
        np.frombuffer(lat, np.int64),
        np.frombuffer(lag, np.int64),
        np.frombuffer(rx, np.int64),
        np.frombuffer(status, np.uint16),
    )
