"""``TableView``: one table in shared memory as read-only numpy arrays (and torch tensors over the
same memory), what ``Client.table`` and ``Client.attach`` return (engine/reader/client.py)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

from ..core.dtypes import BFLOAT16
from ..store import segments as store
from ..tables import FAMILIES
from ..tables.rope_spec import DEFAULT_LAYOUT, HALF_SPLIT


class TableView:
    """One table in shared memory: read-only numpy views of its arrays."""

    def __init__(self, seg: store.Segment, generation: int, cap: int = 0):
        self.segment = seg
        self.family = seg.entry["family"]
        self.dtype = seg.entry["dtype"]
        self.generation = generation
        self.meta = seg.entry.get("meta", {})
        self.length = int(seg.entry["length"])
        # an on-demand table shorter than the engine's longest: a request past it asks it to grow
        self.growable = not seg.entry.get("pinned", True) and self.length < cap
        for name, a in seg.arrays.items():
            setattr(self, name, a)
        FAMILIES[self.family].attach(self)

    if TYPE_CHECKING:  # the arrays are attributes by name (cos, sin, encoding, ...), set above

        def __getattr__(self, name: str) -> np.ndarray: ...

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        return self.segment.arrays

    def torch(self, name: str):
        """A torch tensor viewing the same shared memory (bfloat16 tables come back as
        torch.bfloat16). torch has no read-only tensors: the mapping is PROT_READ, so a write
        through this tensor faults the writing process and can never change the table."""
        import torch

        a = self.segment.arrays[name]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "The given NumPy array is not writable"
            t = torch.from_numpy(a)
        if self.dtype == BFLOAT16 and a.dtype == np.uint16:
            t = t.view(torch.bfloat16)
        return t

    def rope_full(self, name: str, layout: str = DEFAULT_LAYOUT) -> np.ndarray:
        """Zero-copy full-width view of a half-width rope array, shaped [N, 2, d/2] (half_split)
        or [N, d/2, 2] (interleaved) with a 0 stride; ``.reshape(N, d)`` makes the usual
        [N, d] (a copy)."""
        h = self.segment.arrays[name]
        n, w = h.shape
        if layout == HALF_SPLIT:
            return np.lib.stride_tricks.as_strided(
                h, (n, 2, w), (h.strides[0], 0, h.strides[1]), writeable=False
            )
        return np.lib.stride_tricks.as_strided(h, (n, w, 2), (h.strides[0], h.strides[1], 0), writeable=False)
