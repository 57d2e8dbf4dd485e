"""Errors (engine/core/errors.py, service/core/errors.py) and settings (engine/core/settings.py, and the
service's subclass in service/core/settings.py): each domain error's status and response bytes, written
out here as docs/reference.md gives them, and the one settings object that reads POSENC_* (no other
module of engine/, service/ or src/ reads the environment)."""

from __future__ import annotations

import ast
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from posenc.engine.core import errors
from posenc.engine.core.errors import (
    ConfigError,
    EngineRunning,
    EngineUnavailable,
    PosencError,
    SpecError,
    TooLarge,
    TooManyPositions,
)
from posenc.service.core import errors as service_errors
from posenc.service.core.errors import BodyTooLarge, NotAcceptable, error_response
from posenc.service.core.settings import CHOICES, ENV_PREFIX, Settings

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "exc, status, body",
    [
        (
            SpecError(("rope_scaling", "factor"), "must be > 1, got 0.5"),
            422,
            b'{"detail":[{"type":"value_error","loc":["body","rope_scaling","factor"],"msg":"must be > 1, got 0.5"}]}',
        ),
        (
            SpecError((), "JSON decode error: x", "json_invalid"),
            422,
            b'{"detail":[{"type":"json_invalid","loc":["body"],"msg":"JSON decode error: x"}]}',
        ),
        (
            TooLarge(67108865, 67108864),
            413,
            b'{"detail":"response would be 67108865 bytes, over the limit of 67108864 bytes (64 MiB); '
            b'ask for fewer positions or heads"}',
        ),
        (
            TooManyPositions("key", 1048577, 1048576),
            413,
            b'{"detail":"key: 1048577 positions, over the limit of 1048576 per request"}',
        ),
        (BodyTooLarge(4194304), 413, b'{"detail":"request body over the limit of 4194304 bytes"}'),
        (
            NotAcceptable("text/html", ["application/json", "application/x-npz"]),
            406,
            b'{"detail":"cannot produce any of \'text/html\'; available: application/json, application/x-npz"}',
        ),
        (
            EngineUnavailable("engine closed the connection"),
            503,
            b'{"detail":"engine closed the connection"}',
        ),
    ],
    ids=[
        "spec",
        "spec-body",
        "too-large",
        "too-many-positions",
        "body-too-large",
        "not-acceptable",
        "engine-unavailable",
    ],
)
def test_each_domain_error_maps_to_its_status_and_bytes(exc, status, body):
    assert exc.status == status
    assert error_response(exc) == (status, body)
    assert exc.exit_code == 2 if status < 500 else 1


def test_any_other_exception_is_logged_and_a_plain_500(caplog):
    with caplog.at_level(logging.ERROR):
        assert error_response(KeyError("boom")) == (500, b'{"detail":"internal error"}')
    assert "boom" in caplog.text
    assert EngineRunning("x").exit_code == 1 and ConfigError("x").exit_code == 1


def test_every_domain_error_is_a_posenc_error_with_a_status():
    found = {
        v
        for module in (errors, service_errors)
        for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, Exception)
    }
    assert len(found) >= 12
    for cls in found:
        assert issubclass(cls, PosencError), cls
        assert isinstance(cls.status, int) and 400 <= cls.status <= 599, cls


def test_settings_read_every_field_from_its_variable():
    env = {
        "POSENC_PORT": "9001",
        "POSENC_BACKEND": "numpy",
        "POSENC_SHORTCUT": "off",
        "POSENC_BUILD_TIMEOUT_S": "2.5",
        "POSENC_SHM_GROUP": "",
        "POSENC_UNRELATED": "x",
    }
    s = Settings.from_env(env, namespace="t")
    assert (s.port, s.backend, s.shortcut, s.build_timeout_s, s.shm_group, s.namespace) == (
        9001,
        "numpy",
        "off",
        2.5,
        None,
        "t",
    )
    out: dict[str, str] = {"POSENC_SHM_GROUP": "stale"}
    s.export(out)
    assert "POSENC_SHM_GROUP" not in out
    assert Settings.from_env(out) == s
    assert s.override(port=None, workers=3) == Settings.from_env({**out, "POSENC_WORKERS": "3"})


@pytest.mark.parametrize(
    "name, value, says",
    [
        ("BACKEND", "bogus", "is not one of auto, numpy, simd"),
        ("SHORTCUT", "python", "is not one of auto, c, off"),
        ("PORT", "80a", "expected a number"),
        ("PORT", "0", "must be in 1..65535"),
        ("MAX_POSITIONS", "0", "must be >= 1"),
        ("LOG_LEVEL", "loud", "is not one of"),
    ],
)
def test_a_malformed_setting_is_refused_naming_its_variable(name, value, says):
    with pytest.raises(ConfigError, match=says) as e:
        Settings.from_env({ENV_PREFIX + name: value})
    assert str(e.value).startswith(ENV_PREFIX + name)
    assert isinstance(e.value, ValueError)


def test_the_choices_are_the_ones_documented():
    assert CHOICES["backend"] == ("auto", "numpy", "simd")
    assert CHOICES["shortcut"] == ("auto", "c", "off")
    docs = (ROOT / "docs" / "deploy.md").read_text()
    for f in ("backend", "shortcut"):
        assert f"`{ENV_PREFIX}{f.upper()}`" in docs


def _environment_reads(path: Path) -> list[str]:
    """os.environ / os.getenv / environ uses in a module, as 'file:line'."""
    tree = ast.parse(path.read_text(), str(path))
    hits = []
    for node in ast.walk(tree):
        name = (
            node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        )
        if name in ("environ", "getenv", "environb", "getenvb"):
            hits.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return hits


def test_only_the_settings_module_reads_the_environment():
    stray = [
        hit
        for top in ("engine", "service", "src")
        for path in sorted((ROOT / top).rglob("*.py"))
        if path != ROOT / "engine" / "core" / "settings.py"
        for hit in _environment_reads(path)
    ]
    assert stray == []


def test_a_bad_variable_stops_the_cli_at_start_naming_it(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "POSENC_MEMORY_BUDGET_BYTES": "2GiB"}
    p = subprocess.run(
        [sys.executable, "-m", "posenc", "engine", "--dry-run"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode != 0
    assert "POSENC_MEMORY_BUDGET_BYTES: expected a number, got '2GiB'" in p.stderr


# -- the shortcut setting (service/shortcut/templates.py) ------------------------------------------------------


def test_the_shortcut_setting_picks_c_or_off(monkeypatch):
    from posenc.engine import kernels
    from posenc.service.shortcut import templates as replay

    assert replay.shortcut_in_use("off") == "off"
    want_auto = "c" if replay.NATIVE and kernels.BACKEND == "simd" else "off"
    assert replay.shortcut_in_use("auto") == want_auto
    if replay.NATIVE:
        assert replay.shortcut_in_use("c") == "c"
    monkeypatch.setattr(replay, "_hot", None)
    monkeypatch.setattr(replay, "_MISSING", ImportError("no _hot here"))
    assert replay.shortcut_in_use("auto") == "off"
    with pytest.raises(ConfigError, match="POSENC_SHORTCUT=c but posenc.service.shortcut._hot is not built"):
        replay.shortcut_in_use("c")


def test_tables_show_the_shortcut_in_use_and_off_means_no_c_call():
    from posenc.service.front.app import create_app

    front = create_app(Settings(namespace="posenc-test-no-engine", shortcut="off"))
    assert front.svc.shortcut == "off" and not front.c_shortcut
    assert front.svc.tables()["shortcut"] == "off"
    front.svc.hot = lambda *a: pytest.fail("the C shortcut ran with shortcut=off")
    import asyncio

    sent = []

    async def receive():
        return {"type": "http.request", "body": b'{"head_dim": 64, "positions": [1]}', "more_body": False}

    async def send(m):
        sent.append(m)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/rope",
        "headers": [(b"accept", b"application/json")],
    }
    asyncio.run(front(scope, receive, send))
    # no engine to build the table from: the full path answered, computing the rows exactly
    assert sent[0]["status"] == 200, sent
    import orjson

    from posenc.engine.answer.pipeline import compute

    got = orjson.loads(sent[1]["body"])
    want = compute("rope", {"head_dim": 64, "positions": [1]})["cos"]
    assert (np.asarray(got["cos"], np.float32) == want).all()
