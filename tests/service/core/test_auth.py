"""The bearer token and CORS (service/core/auth.py) on the app ``posenc serve`` runs, driven in-process
(an engine process holds the tables): every way in (the raw-ASGI front's C shortcut, the full
path, the FastAPI routes behind it) refuses a /v1 request without the token, health and metrics
stay open, and CORS headers are the same whichever path answers. The same on a real server, with
the hot lane and TLS: tests/integration/test_serve_ops.py."""

from __future__ import annotations

import asyncio
import dataclasses
import hmac

import orjson
import pytest

from posenc.engine.core.errors import ConfigError
from posenc.service.core import auth as guard
from posenc.service.core.settings import Settings
from posenc.service.front.app import create_app
from posenc.service.front.front import FastFront
from posenc.service.shortcut import templates as replay
from tests.service_cases import ACCEPT_HDRS, reference_safetensors

TOKEN = "t0k.en-_~+/A=="
AUTH = (b"authorization", b"Bearer " + TOKEN.encode())
ORIGIN = "https://app.example"
BODY = {"head_dim": 64, "layout": "interleaved", "positions": [5, 2]}
CORS_HEADERS = ("access-control-allow-origin", "access-control-expose-headers", "vary")


async def call(app, method: str, path: str, headers=(), body: bytes = b""):
    """One request into an ASGI app: (status, {header: value}, body)."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(m):
        sent.append(m)

    await app(
        {
            "type": "http",
            "method": method,
            "path": path,
            "headers": list(headers),
            "query_string": b"",
            "root_path": "",
        },
        receive,
        send,
    )
    head = {k.decode(): v.decode() for k, v in sent[0]["headers"]}
    return sent[0]["status"], head, b"".join(m.get("body", b"") for m in sent[1:])


def run(app, *args, **kw):
    return asyncio.run(call(app, *args, **kw))


def app_for(settings, **changes):
    """The app with these settings, attached; the C shortcut on wherever service._hot is built."""
    s = dataclasses.replace(settings, shortcut="c" if replay.NATIVE else "off", **changes)
    app = create_app(s)
    front = app if isinstance(app, FastFront) else app.app  # under CORS: the middleware, then the front
    front.svc.attach_all()
    front.svc.ready = True  # what the lifespan's attach task sets
    return app, front


def counting_hot(front) -> list:
    """Record every call of the C shortcut as (family, answered?); it still answers."""
    calls, real = [], front.svc.hot

    def hot(*a, **k):
        out = real(*a, **k)
        calls.append((a[0], out is not None))
        return out

    front.svc.hot = hot
    return calls


# -- the check ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, guarded",
    [
        ("/v1/rope", True),
        ("/v1/tables", True),
        ("/v1", True),
        ("/v2", True),
        ("/v2/models/rope/infer", True),
        ("/healthz", False),
        ("/readyz", False),
        ("/metrics", False),
        ("/docs", False),
        ("/openapi.json", False),
        ("/v10/rope", False),
        ("/v2x", False),
        ("/", False),
    ],
)
def test_the_guarded_paths_are_v1_and_v2(path, guarded):
    assert guard.guarded(path) is guarded


@pytest.mark.parametrize(
    "value, ok",
    [
        (b"Bearer " + TOKEN.encode(), True),
        (b"bearer " + TOKEN.encode(), True),
        (b"BEARER  " + TOKEN.encode() + b" ", True),
        (b"Bearer " + TOKEN.encode() + b"x", False),
        (b"Bearer " + TOKEN.encode()[:-1], False),
        (b"Bearer", False),
        (b"Basic " + TOKEN.encode(), False),
        (TOKEN.encode(), False),
        (b"", False),
        (None, False),
    ],
)
def test_the_gate_takes_exactly_the_token(value, ok):
    assert guard.Gate(TOKEN).check(value) is ok


def test_the_comparison_is_constant_time_on_equal_length_digests(monkeypatch):
    seen, real = [], hmac.compare_digest
    monkeypatch.setattr(
        guard.hmac, "compare_digest", lambda a, b: seen.append((len(a), len(b))) or real(a, b)
    )
    gate = guard.Gate(TOKEN)
    assert gate.check(b"Bearer x") is False and gate.check(b"Bearer " + TOKEN.encode()) is True
    assert seen == [(32, 32), (32, 32)]


@pytest.mark.parametrize(
    "env, says",
    [
        ({"POSENC_AUTH_TOKEN": "two words"}, "POSENC_AUTH_TOKEN: not a bearer token"),
        ({"POSENC_AUTH_TOKEN": "tok\u00e9n"}, "POSENC_AUTH_TOKEN: not a bearer token"),
        ({"POSENC_TLS_CERT": "/c.pem"}, "give both or neither"),
        ({"POSENC_TLS_KEY": "/k.pem"}, "give both or neither"),
        ({"POSENC_CORS_ORIGINS": " , "}, "POSENC_CORS_ORIGINS: no origin"),
        ({"POSENC_LOG_FORMAT": "xml"}, "is not one of text, json"),
        ({"POSENC_ACCESS_LOG": "maybe"}, "POSENC_ACCESS_LOG: expected one of"),
    ],
)
def test_malformed_operator_settings_are_refused_naming_the_variable(env, says):
    with pytest.raises(ConfigError, match=says):
        Settings.from_env(env)


def test_operator_settings_read_and_export_and_the_token_stays_out_of_reprs():
    env = {
        "POSENC_AUTH_TOKEN": TOKEN,
        "POSENC_ACCESS_LOG": "yes",
        "POSENC_LOG_FORMAT": "json",
        "POSENC_CORS_ORIGINS": f"{ORIGIN}, http://localhost:3000",
        "POSENC_TLS_CERT": "c",
        "POSENC_TLS_KEY": "k",
    }
    s = Settings.from_env(env)
    assert (s.auth_token, s.access_log, s.log_format, s.tls_cert, s.tls_key) == (
        TOKEN,
        True,
        "json",
        "c",
        "k",
    )
    assert s.cors_origin_list == [ORIGIN, "http://localhost:3000"]
    out: dict[str, str] = {}
    s.export(out)
    assert Settings.from_env(out) == s and out["POSENC_ACCESS_LOG"] == "True"
    assert TOKEN not in repr(s) and Settings.from_env({"POSENC_ACCESS_LOG": "off"}).access_log is False


# -- the app -------------------------------------------------------------------------------------


def test_without_the_token_no_way_in_answers_and_health_stays_open(settings):
    app, front = app_for(settings, auth_token=TOKEN)
    raw = orjson.dumps(BODY)
    for _ in range(2):  # the full path learns the template (at its second answer)
        learn = run(app, "POST", "/v1/rope", ACCEPT_HDRS + [AUTH], raw)
    assert learn[0] == 200 and learn[2] == reference_safetensors("rope", BODY)
    calls, prepared = counting_hot(front), []
    real_prepare = front.svc.prepare
    front.svc.prepare = lambda *a: prepared.append(a) or real_prepare(*a)

    for headers, challenge in (
        ([], 'Bearer realm="posenc"'),
        ([(b"authorization", b"Bearer wrong")], 'Bearer realm="posenc", error="invalid_token"'),
        ([(b"authorization", b"Basic " + TOKEN.encode())], 'Bearer realm="posenc", error="invalid_token"'),
    ):
        for method, path, hdrs in (
            ("POST", "/v1/rope", ACCEPT_HDRS),
            ("POST", "/v1/rope", []),
            ("POST", "/v1/t5-buckets", []),
            ("GET", "/v1/tables", []),
        ):
            status, head, body = run(app, method, path, hdrs + headers, raw)
            assert status == 401 and head["www-authenticate"] == challenge, (path, headers)
            assert (
                head["content-type"] == "application/json" and "bearer token" in orjson.loads(body)["detail"]
            )
    assert calls == [] and prepared == []  # neither the C shortcut nor the full path ran

    for path in ("/healthz", "/readyz", "/metrics", "/docs", "/openapi.json"):
        assert run(app, "GET", path)[0] == 200, path
    status, _, body = run(
        app, "POST", "/v1/rope", ACCEPT_HDRS + [AUTH], orjson.dumps({**BODY, "positions": [9]})
    )
    assert status == 200 and body == reference_safetensors("rope", {**BODY, "positions": [9]})
    assert calls == ([("rope", True)] if replay.NATIVE else []) and prepared == []  # the shortcut answered
    assert run(app, "GET", "/v1/tables", [AUTH])[0] == 200
    assert run(app, "POST", "/v1/sinusoidal", [AUTH], b'{"d_model": 8, "positions": [1]}')[0] == 200


def test_no_token_means_no_gate(settings):
    app, front = app_for(settings)
    assert front.gate is None and app is front
    assert run(app, "GET", "/v1/tables")[0] == 200


def test_cors_preflight_and_headers_are_the_same_whichever_path_answers(settings):
    app, front = app_for(settings, auth_token=TOKEN, cors_origins=f"{ORIGIN},http://localhost:3000")
    assert front.lane is None and front.lane_state() == (
        "off",
        0,
    )  # no lane below ASGI under CORS (service/core/auth.py)
    origin = (b"origin", ORIGIN.encode())
    status, head, _ = run(
        app,
        "OPTIONS",
        "/v1/rope",
        [
            origin,
            (b"access-control-request-method", b"POST"),
            (b"access-control-request-headers", b"authorization, content-type"),
        ],
    )
    assert status == 200 and head["access-control-allow-origin"] == ORIGIN  # no token needed
    assert {"authorization", "content-type"} <= {
        h.strip().lower() for h in head["access-control-allow-headers"].split(",")
    }
    assert "POST" in head["access-control-allow-methods"]
    assert (
        run(
            app,
            "OPTIONS",
            "/v1/rope",
            [(b"origin", b"https://evil.example"), (b"access-control-request-method", b"POST")],
        )[0]
        == 400
    )

    raw = orjson.dumps(BODY)
    for _ in range(2):  # learn the template (at its second answer)
        run(app, "POST", "/v1/rope", ACCEPT_HDRS + [AUTH], raw)
    calls = counting_hot(front)
    answers = {
        "hot": run(app, "POST", "/v1/rope", ACCEPT_HDRS + [AUTH, origin], raw),
        "json": run(app, "POST", "/v1/rope", [AUTH, origin], raw),
        "401": run(app, "POST", "/v1/rope", ACCEPT_HDRS + [origin], raw),
        "422": run(app, "POST", "/v1/rope", [AUTH, origin], b'{"head_dim": 1, "positions": [1]}'),
        "tables": run(app, "GET", "/v1/tables", [AUTH, origin]),
        "healthz": run(app, "GET", "/healthz", [origin]),
    }
    assert [a[0] for a in answers.values()] == [200, 200, 401, 422, 200, 200]
    assert [c for c in calls if c[1]] == (
        [("rope", True)] if replay.NATIVE else []
    )  # "hot" was the shortcut's
    cors = {name: {h: a[1].get(h) for h in CORS_HEADERS} for name, a in answers.items()}
    assert cors["hot"] == {
        "access-control-allow-origin": ORIGIN,
        "access-control-expose-headers": "x-posenc-worker",
        "vary": "Origin",
    }
    assert all(c == cors["hot"] for c in cors.values()), cors
    other = run(app, "POST", "/v1/rope", ACCEPT_HDRS + [AUTH, (b"origin", b"https://evil.example")], raw)
    assert other[0] == 200 and "access-control-allow-origin" not in other[1]  # answered, not shared
