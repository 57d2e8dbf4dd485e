"""The README's run command as written: the venv's ``posenc serve`` with its default tables (no
``--tables``), only moved to a free port and a fresh namespace, answers correctly: each answer is
held to a float64 reference written from the documented formulas (tests/independent.py), never to
posenc's own compute."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import httpx
import pytest

from posenc.engine.core.formats import read_safetensors
from tests.independent import assert_answer
from tests.procs import REPO, Server, free_port, unique_namespace
from tests.service_cases import BIN, LLAMA3_8K
from tests.shm import shm_files

pytestmark = pytest.mark.slow


def readme_run_command() -> list[str]:
    """The last command of the README's "run the service" block: `.venv/bin/posenc serve`."""
    text = (REPO / "README.md").read_text()
    section = text.split("Run the service with its default tables", 1)[1]
    block = re.search(r"```sh\n(.*?)\n```", section, re.S).group(1)
    argv = shlex.split(block.split("&&")[-1])
    assert argv == [".venv/bin/posenc", "serve"], argv
    return argv


def test_readme_run_command_serves_the_default_tables(procs):
    exe, *args = readme_run_command()
    posenc = Path(sys.executable).parent / Path(exe).name  # the venv the suite runs in, as the README's
    assert posenc.is_file(), f"{posenc} is missing: install the project into this venv (pip install -e .)"
    namespace, port = unique_namespace(), free_port()
    argv = [
        str(posenc),
        *args,
        "--port",
        str(port),
        "--grpc-port",
        str(free_port()),
        "--namespace",
        namespace,
    ]
    s = Server(argv, procs.log_dir, "readme-serve", namespace, port, workers=0, config_path=None)
    procs.procs.append(s)
    try:
        s.wait_ready(timeout=120)
        with httpx.Client(base_url=s.url, timeout=30) as c:
            names = c.get("/v1/tables").text
            assert "llama-3.1-8b" in names, names  # the embedded default tables, not a test config
            cases = [
                ("rope", {"head_dim": 128, "rope_theta": 500000.0, "positions": [0, 1, 4096]}, {}),
                ("rope", {**LLAMA3_8K, "positions": [0, 4096, 131071, 200000], "dtype": "bfloat16"}, BIN),
                ("sinusoidal", {"d_model": 512, "positions": [0, 1, 511, 9000]}, {}),
                ("alibi", {"num_heads": 12, "query": [7], "key": {"start": 0, "stop": 8}}, {}),
                ("t5-buckets", {"query": {"start": 0, "stop": 4}, "key": [0, 1, 200]}, {}),
            ]
            for family, body, headers in cases:
                r = c.post(f"/v1/{family}", json=body, headers=headers)
                assert r.status_code == 200, (family, r.text)
                got = read_safetensors(r.content)[0] if headers else r.json()
                assert_answer(family, body, got, what=f"default tables {family}")
            # a configured table by name is Llama 3.1 8B's spec
            r = c.post("/v1/rope", json={"table": "llama-3.1-8b", "positions": [4096], "dtype": "bfloat16"})
            assert r.status_code == 200, r.text
            assert_answer(
                "rope",
                {**LLAMA3_8K, "positions": [4096], "dtype": "bfloat16"},
                r.json(),
                what="table llama-3.1-8b",
            )
    finally:
        rc = s.stop()
    assert rc == 0, s.logs()
    assert shm_files(namespace) == []
