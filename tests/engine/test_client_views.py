"""TableView's zero-copy full-width RoPE views, against the library's own full-width rows."""

import numpy as np
import pytest

from posenc.engine import store
from posenc.engine.client import TableView
from posenc.engine import pipeline
from posenc.engine.compute import compute


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rope_full_is_a_zero_copy_view_equal_to_compute(tmp_path, layout, dtype):
    spec = {"head_dim": 32, "rope_theta": 500000.0}
    t = pipeline.parse("rope", {**spec, "positions": [0], "dtype": dtype}, length=64).table
    arrays, meta = t.build()
    path = str(tmp_path / "seg")
    info = store.write_segment(path, arrays)
    view = TableView(store.Segment(path, {**info, "family": "rope", "dtype": dtype, "length": 64,
                                          "meta": meta}), generation=1)
    full = view.rope_full("cos", layout)
    assert np.shares_memory(full, view.cos) and not full.flags.writeable
    ref = compute("rope", {**spec, "positions": {"start": 0, "stop": 64}, "dtype": dtype, "layout": layout})
    assert full.reshape(64, 32).tobytes() == ref["cos"].tobytes()
    with pytest.raises(ValueError):
        full[0, 0, 0] = 1
