"""The README's KServe v2 example runs as written against `posenc serve` (only its ports changed
to the test server's), in a fresh interpreter, and prints what the README says it prints."""

from __future__ import annotations

import re
import sys

import pytest

from tests.integration.kserve_cases import wait_grpc_ready
from tests.procs import REPO
from tests.service_cases import LLAMA3_8K

pytestmark = pytest.mark.slow


def readme_example() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("### KServe v2", 1)[1].split("\n### ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return code


def test_readme_example_runs(procs):
    config = {"length": 8192, "tables": [{"name": "llama-3.1-8b", "family": "rope", "spec": LLAMA3_8K}]}
    s = procs.serve(config, workers=1, grpc=True)
    wait_grpc_ready(s)
    code = readme_example()
    assert "localhost:8000" in code and "localhost:8001" in code
    code = code.replace("localhost:8000", f"127.0.0.1:{s.port}").replace("localhost:8001", s.grpc_url)
    r = procs.run([sys.executable, "-c", code], timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "(2, 4, 128) [1.]"
