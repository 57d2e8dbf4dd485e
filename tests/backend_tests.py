"""The tests whose outcome depends on the kernel backend (POSENC_BACKEND), the ones CI runs twice.

.ci/run (the README's test command) runs the whole suite once on the C SIMD kernels
(POSENC_BACKEND=simd), then only these again under the numpy backend: ``pytest -m backend``.
tests/conftest.py marks every test whose node id starts with an entry below ``backend``.

Everything else runs once: with the kernels themselves proved on both backends against independent
float64 math (the kernel tests, each backend in its own pass), a test of the HTTP, gRPC, shared
memory, process or config layers above them tells nothing new when the bits beneath come from the
other backend; one end-to-end pass of a served numpy engine (the last entries) checks the fallback
as a user runs it. The model-config tests (tests/engine/test_hf_*.py, test_torch_*.py) run once
too: what they add to the families' math below is how a config becomes a spec and which rows a
model reads, none of which the backend computes; the rows themselves are the families' tables,
held to transformers' functions and float64 math on both backends here.
"""

from __future__ import annotations

# (node id prefix, why its outcome depends on the backend)
BACKEND_TESTS: list[tuple[str, str]] = [
    # the kernels: each backend against float64 references; the numpy param runs in the numpy pass,
    # the simd-<level> params in the simd pass (tests/engine/kernel_helpers.py)
    ("tests/engine/test_kernels_blocks.py", "the kernels, per backend"),
    ("tests/engine/test_kernels_inputs.py", "the kernels, per backend"),
    ("tests/engine/test_kernels_rounding.py", "the kernels, per backend"),
    ("tests/engine/test_lookup_kernel.py", "the lookup kernel, per backend"),
    # the tables' math through the pipeline (engine.answer.pipeline.compute), whose rows come from
    # the chosen backend's kernels (T5 and half-precision ALiBi take another path without C kernels)
    ("tests/engine/test_alibi.py", "ALiBi blocks: the numpy backend's path differs for float16"),
    ("tests/engine/test_t5.py", "T5 buckets: the numpy backend's path differs"),
    ("tests/engine/test_dtypes.py", "rounding to each dtype, through the backend's kernels"),
    ("tests/engine/test_rope_float64.py", "RoPE rows through the backend's sincos"),
    ("tests/engine/test_rope_forms.py", "RoPE rows through the backend's sincos"),
    ("tests/engine/test_rope_multiaxis.py", "multi-axis RoPE rows through the backend's sincos"),
    ("tests/engine/test_rope_grid.py", "frequencies as data through the backend's sincos and gathers"),
    ("tests/engine/test_rope_new_types.py", "RoPE rows through the backend's sincos"),
    ("tests/engine/test_rope_odd_width.py", "odd half widths through the backend's sincos and gathers"),
    ("tests/engine/test_rope_transformers.py", "RoPE rows against transformers' functions"),
    ("tests/engine/test_sinusoidal.py", "sinusoidal rows through the backend's kernels"),
    ("tests/engine/test_sinusoidal_grid.py", "2-D sin-cos grids through the backend's kernels"),
    ("tests/engine/test_selection_arrays.py", "selections of computed rows"),
    ("tests/engine/test_selection_ranges.py", "selections of computed rows"),
    ("tests/engine/test_spec_forms.py", "edge values computed"),
    # the pipeline's tables in shared memory and the readers of them
    ("tests/engine/test_store.py", "tables built by the backend, stored and read back"),
    ("tests/engine/test_c_reader.py", "the C reader's rows past a table are the backend's"),
    # a served numpy engine end to end: every family, v1 route and encoding (JSON, safetensors,
    # npz) against float64 references, and every family over KServe v2 REST and gRPC
    ("tests/integration/test_serve_http.py::test_every_family_in_every_format", "served, end to end"),
    ("tests/integration/test_kserve_infer.py::test_family_models_answer_what_v1_answers", "served over v2"),
]
