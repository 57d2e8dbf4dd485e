"""``posenc serve`` as a process: killed workers and engine are survived, an invalid config stops it
naming the field, shutdown is clean, ``--attach-only`` waits for an engine; and the Python clients
and the README's curl examples against it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
from pathlib import Path

import httpx
import numpy as np
import pytest

from posenc.engine.answer.pipeline import compute
from posenc.engine.core.dtypes import bf16_bits_to_f32
from posenc.engine.core.formats import read_safetensors
from posenc.engine.reader.client import Client
from posenc.service.core.settings import Settings
from tests.independent import assert_answer
from tests.procs import REPO, wait_for
from tests.service_cases import BIN, CONFIG
from tests.shm import held_segments, shm_files


# -- faults ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_killed_worker_and_engine_are_survived(procs):
    s = procs.serve(CONFIG, workers=2)
    body = {"head_dim": 64, "positions": [5, 6]}
    ref = httpx.post(s.url + "/v1/rope", json=body, headers=BIN).content
    victim = s.worker_pids()[0]
    os.kill(victim, signal.SIGKILL)
    answered = []

    def twenty_answered():  # a connection the dead worker held fails; the other worker answers
        try:
            r = httpx.post(s.url + "/v1/rope", json=body, headers=BIN, timeout=30)
        except httpx.TransportError:
            return False
        assert r.content == ref
        answered.append(r.status_code)
        return len(answered) >= 20

    wait_for(twenty_answered, 60, 0.01, "20 answers after a worker was killed", seen=lambda: len(answered))
    engine = s.engine_pid()
    gen = Client(namespace=s.namespace).wait_ready()["generation"]
    os.kill(engine, signal.SIGKILL)
    for _ in range(10):  # mapped tables keep answering while the engine is gone
        assert httpx.post(s.url + "/v1/rope", json=body, headers=BIN).content == ref

    def restarted():
        m = Client(namespace=s.namespace).manifest(force=True)
        return m and m["generation"] != gen and s.engine_pid() not in (None, engine)

    wait_for(
        restarted,
        60,
        0.05,
        "a new engine's manifest",
        seen=lambda: (s.engine_pid(), s.output()[-2000:]),
    )
    new = {"head_dim": 40, "positions": [3]}  # an on-demand build through the new engine
    assert httpx.post(s.url + "/v1/rope", json=new, timeout=60).status_code == 200
    assert httpx.post(s.url + "/v1/rope", json=body, headers=BIN).content == ref
    # the new engine adopted the tables serve's keeper held for it (the same segments) and published them anew
    m = Client(namespace=s.namespace).manifest(force=True)
    held = held_segments(s.engine_pid(), s.namespace)
    assert set(e["file"] for e in m["tables"].values()) <= set(held)  # (head_dim 40 may be building)
    assert any(e.get("adopted") and f".seg.{gen}." in e["file"] for e in m["tables"].values()), m["tables"]
    assert s.stop() == 0, s.output()
    assert shm_files(s.namespace) == []


def test_invalid_table_config_stops_serve_with_the_field_named(procs):
    bad = {"tables": [{"family": "rope", "spec": {"head_dim": 64, "rope_scaling": {"rope_type": "yarn"}}}]}
    s = procs.serve(bad, workers=1, ready=False)
    assert s.wait(60) == 2
    assert "tables.0.spec.rope_scaling.factor" in s.output()
    assert "Traceback" not in s.output()
    assert shm_files(s.namespace) == []


# -- the Python HTTP client and the README's curl examples ---------------------------------------
def test_python_clients_return_the_reference_arrays(server):
    from posenc.service.client import AsyncPosencClient, PosencClient, PosencHTTPError

    body = {"head_dim": 64, "positions": [0, 9, 5000], "dtype": "bfloat16", "layout": "interleaved"}
    ref = compute("rope", body)
    with PosencClient(server.url) as c:
        out = c.rope(**body)
        raw = c.rope(raw=True, **body)
        with pytest.raises(PosencHTTPError) as e:
            c.alibi(num_heads=0, query=[1], key=[1])
        assert e.value.status == 422 and e.value.detail[0]["loc"] == ["body", "num_heads"]
        blocks = c.t5_buckets(query=[0, 1], key=[0, 1, 2])
    np.testing.assert_array_equal(out["cos"], bf16_bits_to_f32(ref["cos"]))
    assert raw["sin"].dtype == np.uint16 and raw["sin"].tobytes() == ref["sin"].tobytes()
    assert out["attention_scaling"] == 1.0
    assert blocks["buckets"].dtype == np.int32

    async def go():
        async with AsyncPosencClient(server.url) as c:
            return await asyncio.gather(
                c.sinusoidal(d_model=33, positions=[1, 2]), c.alibi(num_heads=12, query=[3], key=[0, 1, 2, 3])
            )

    sin_out, alibi_out = asyncio.run(go())
    assert (
        sin_out["encoding"].tobytes()
        == compute("sinusoidal", {"d_model": 33, "positions": [1, 2]})["encoding"].tobytes()
    )
    assert alibi_out["bias"].shape == (12, 1, 4)


def test_readme_curl_examples_work(server, tmp_path):
    """Each README curl command runs as written (only the port changed) and its answer, JSON or the
    file it writes, is the float64 reference of its body (tests/independent.py), not just a 200."""
    readme = (REPO / "README.md").read_text()
    commands = [c.replace("\\\n", " ") for c in re.findall(r"^curl .*?(?<!\\)$", readme, re.M | re.S)]
    assert len(commands) >= 3
    for cmd in commands:
        argv = [a.replace("localhost:8000", f"127.0.0.1:{server.port}") for a in shlex.split(cmd)]
        argv += ["--fail", "--output", str(tmp_path / "out.bin")] if "-o" not in argv else ["--fail"]
        argv = [str(tmp_path / a) if i and argv[i - 1] == "-o" else a for i, a in enumerate(argv)]
        r = subprocess.run(argv, capture_output=True, timeout=30)
        assert r.returncode == 0, (cmd, r.stderr)
        family = re.search(r"/v1/([a-z0-9-]+)", cmd).group(1)
        body = json.loads(argv[argv.index("-d") + 1])
        out = Path(
            argv[argv.index("-o") + 1] if "-o" in argv else argv[argv.index("--output") + 1]
        ).read_bytes()
        binary = any("x-safetensors" in a for a in argv)
        assert_answer(family, body, read_safetensors(out)[0] if binary else json.loads(out), what=cmd)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_single_worker_shutdown_is_clean_when_serve_exits(procs, sig):
    """With one worker uvicorn re-raises the caught signal on exit; posenc serve must still stop
    its engine and be clean by the time it has exited (not some time later)."""
    s = procs.serve({"length": 512, "tables": [{"family": "rope", "spec": {"head_dim": 16}}]}, workers=1)
    engine = s.engine_pid()
    rc = s.stop(sig)
    assert rc in (0, 130), s.output()
    assert shm_files(s.namespace) == []
    assert (
        not os.path.exists(f"/proc/{engine}")
        or "posenc.engine.process.main" not in open(f"/proc/{engine}/cmdline").read()
    )


def test_attach_only_is_not_ready_until_an_engine_publishes(procs):
    """`posenc serve --attach-only` (the Kubernetes pod's HTTP container): alive at once, 503 on
    /readyz while no engine serves its namespace, ready once one publishes its tables."""
    cfg = {"length": 256, "tables": [{"family": "sinusoidal", "spec": {"d_model": 16}}]}
    s = procs.serve(cfg, workers=1, args=("--attach-only",), ready=False)
    s.wait_alive()
    assert httpx.get(s.url + "/readyz").status_code == 503
    assert s.engine_pid() is None
    engine = procs.engine(s.config_path, s.namespace)
    s.wait_ready()
    body = {"d_model": 16, "positions": [3, 300]}
    r = httpx.post(s.url + "/v1/sinusoidal", json=body, headers=BIN)
    assert r.status_code == 200
    assert (
        read_safetensors(r.content)[0]["encoding"].tobytes()
        == compute("sinusoidal", body)["encoding"].tobytes()
    )
    assert s.stop() == 0, s.output()
    assert engine.stop() == 0, engine.logs()
    assert shm_files(s.namespace) == []


@pytest.mark.slow
def test_attach_only_stops_promptly_without_an_engine(procs):
    """`posenc serve --attach-only` whose engine never comes (the pod's engine container failing)
    must still stop on SIGTERM within its shutdown timeout."""
    cfg = {"length": 64, "tables": [{"family": "sinusoidal", "spec": {"d_model": 8}}]}
    s = procs.serve(cfg, workers=1, args=("--attach-only",), ready=False)
    s.wait_alive()
    assert s.stop(timeout=Settings().shutdown_timeout_s + 5) == 0, s.output()
