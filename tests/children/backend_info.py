"""Print the kernel backend a fresh interpreter selects: ``BACKEND FEATURES info``.

Run by path with POSENC_BACKEND set by the test; an unknown value must fail the import.
"""

import posenc.engine.kernels as k

print(k.BACKEND, ",".join(k.FEATURES), k.info())
