"""The Client's zero-copy full-width RoPE views of a real engine's table, against the library's own
full-width rows (through the public Client, not the table definitions behind it)."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.engine.answer.pipeline import compute

SPEC = {"head_dim": 32, "rope_theta": 500000.0}


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rope_full_is_a_zero_copy_view_equal_to_compute(procs, ns, layout, dtype):
    eng = procs.engine({"length": 64, "tables": [{"family": "rope", "spec": SPEC, "dtypes": [dtype]}]}, ns)
    view = eng.client().table("rope", SPEC, dtype=dtype)
    full = view.rope_full("cos", layout)
    assert np.shares_memory(full, view.cos) and not full.flags.writeable
    ref = compute("rope", {**SPEC, "positions": {"start": 0, "stop": 64}, "dtype": dtype, "layout": layout})
    assert full.reshape(64, 32).tobytes() == ref["cos"].tobytes()
    with pytest.raises(ValueError):
        full[0, 0, 0] = 1
    assert eng.stop() == 0
