"""The math core: what a request is and how its answer is laid out, with no process, store,
reader or model config in it. Errors (errors.py), the strict JSON readers (fields.py, jsonread.py),
selections (selection.py), dtypes and the one rounding (dtypes.py), the answer containers
(formats.py, encode.py), and the settings (settings.py, here because the kernels choose their
backend from it at import). The families (engine/tables/) and kernels (engine/kernels/) sit beside
it, in the same layer; they import only this package and each other.
"""
