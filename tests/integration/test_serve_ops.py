"""What an operator turns on, on real `posenc serve` processes: TLS with a certificate made here,
the bearer token through every way in (the full path, the raw-ASGI C shortcut and the hot lane),
CORS, JSON logs and the access log (hot requests included), `posenc serve --help`, and /docs
rendered by a real browser with no network when one is installed.

Three servers, one worker each unless said (a template learnt on a connection is its worker's):
- tls: HTTPS, a token, the lane on;
- cors: a token and CORS (which turns the lane off, so hot requests meet the raw front's shortcut);
- logs: JSON logs and the access log, two workers, the lane setting on.
The C shortcut runs in all (POSENC_SHORTCUT=c, also under the numpy backend).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import shutil
import subprocess

import httpx
import pytest

from posenc.service.shortcut import templates as replay
from tests.procs import PYTHON, Procs, child_env, wait_for
from tests.service_cases import BIN, CONFIG, reference_safetensors

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not replay.NATIVE, reason="the hot paths need the C shortcut (service._hot)"),
]

TOKEN = "ops-test-token_0123456789"
AUTH = {"authorization": f"Bearer {TOKEN}"}
ORIGIN = "https://app.example"
HOT = {"head_dim": 64, "positions": [3, 1]}
CORS_HEADERS = ("access-control-allow-origin", "access-control-expose-headers", "vary")


def make_certificates(folder) -> tuple[str, str, str]:
    """A CA and a server certificate for 127.0.0.1 signed by it: (ca, cert, key) PEM paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def cert(subject, key, issuer, issuer_key, ca: bool):
        b = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
            )
        )
        if ca:
            b = b.add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
        else:
            b = b.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        return b.sign(issuer_key, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "posenc test CA")])
    ca = cert(ca_name, ca_key, ca_name, ca_key, True)
    leaf = cert(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]), key, ca_name, ca_key, False
    )
    paths = [folder / "ca.pem", folder / "cert.pem", folder / "key.pem"]
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return tuple(str(p) for p in paths)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ops")
    reg = Procs(folder)
    ca, cert, key = make_certificates(folder)
    env = child_env({"POSENC_SHORTCUT": "c", "POSENC_AUTH_TOKEN": TOKEN})  # the token from the environment
    out = {
        "tls": reg.serve(CONFIG, workers=1, args=["--tls-cert", cert, "--tls-key", key], env=env, ca=ca),
        "cors": reg.serve(
            CONFIG, workers=1, args=["--cors-origins", f"{ORIGIN}, http://localhost:3000"], env=env
        ),
        "logs": reg.serve(
            CONFIG,
            workers=2,
            args=["--log-format", "json", "--access-log", "--log-level", "info"],
            env=child_env({"POSENC_SHORTCUT": "c"}),
        ),
    }
    try:
        yield out
    finally:
        for s in out.values():
            assert s.stop() == 0, s.output()
        reg.cleanup()


def client(server, **headers) -> httpx.Client:
    return httpx.Client(base_url=server.url, verify=server.verify, timeout=30, headers=headers)


def lane_answers(c: httpx.Client) -> int:
    t = c.get("/v1/tables", headers=AUTH).json()
    assert t["shortcut"] == "c"
    return t["lane_answers"] if t["lane"] == "on" else -1


# -- TLS -----------------------------------------------------------------------------------------


def test_tls_serves_https_with_the_certificate_given(servers):
    s = servers["tls"]
    with client(s) as c:
        assert c.get("/readyz").status_code == 200
        r = c.post("/v1/rope", json=HOT, headers=AUTH)
        assert r.status_code == 200 and r.json()["cos"][0][0] != 0
    with pytest.raises(httpx.ConnectError):  # not a certificate the system trusts: it is ours
        httpx.get(s.url + "/healthz", timeout=5)
    with pytest.raises(httpx.HTTPError):  # and no plain HTTP on that port
        httpx.get(s.url.replace("https:", "http:") + "/healthz", timeout=5)


def test_the_images_healthcheck_probes_over_https_when_tls_is_on(servers, tmp_path):
    from tests.integration.test_deploy_image import healthcheck_command

    s = servers["tls"]
    cmd = [PYTHON, *healthcheck_command()[1:]]
    procs = Procs(tmp_path)
    p = procs.run(cmd, env=child_env({"POSENC_PORT": str(s.port), "POSENC_TLS_CERT": "/etc/posenc/tls.crt"}))
    assert p.returncode == 0, p.stderr
    p = procs.run(cmd, env=child_env({"POSENC_PORT": str(s.port)}))  # plain HTTP to an HTTPS port
    assert p.returncode != 0


def test_a_certificate_that_does_not_load_stops_serve_naming_it(tmp_path):
    bad = tmp_path / "cert.pem"
    bad.write_text("not a certificate\n")
    p = Procs(tmp_path).posenc(
        "serve", "--port", "1", "--tls-cert", str(bad), "--tls-key", str(bad), timeout=60
    )
    assert p.returncode != 0 and f"POSENC_TLS_CERT={bad}" in p.stderr and "cannot load" in p.stderr, p.stderr


# -- the token -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tls", "cors"])
def test_without_the_token_v1_is_refused_and_health_stays_open(servers, name):
    with client(servers[name]) as c:
        for path in ("/healthz", "/readyz", "/metrics", "/docs", "/openapi.json"):
            assert c.get(path).status_code == 200, path
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": f"Basic {TOKEN}"}):
            for method, path, body in (
                ("GET", "/v1/tables", None),
                ("POST", "/v1/rope", HOT),
                ("POST", "/v1/alibi", {"num_heads": 12, "query": [1], "key": [0]}),
            ):
                r = c.request(method, path, json=body, headers=headers)
                assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer"), (
                    path,
                    r.text,
                )
                assert "bearer token" in r.json()["detail"]
        assert c.get("/v1/tables", headers=AUTH).status_code == 200
        assert c.post("/v1/t5-buckets", json={"query": [0], "key": [1]}, headers=AUTH).json() == {
            "buckets": [[17]]
        }


@pytest.mark.parametrize("name, lane", [("tls", True), ("cors", False)])
def test_the_hot_paths_answer_only_with_the_token(servers, name, lane):
    """tls: the hot lane below ASGI answers with the token and never without it; cors: the lane is
    off and the raw front's C shortcut answers (byte-identical to the reference either way)."""
    with client(servers[name], **BIN) as c:
        want = reference_safetensors("rope", HOT)
        assert c.post("/v1/rope", json=HOT, headers=AUTH).content == want  # learns the template
        before = lane_answers(c)
        assert (before >= 0) is lane
        for _ in range(5):
            r = c.post("/v1/rope", json=HOT, headers=AUTH)
            assert r.status_code == 200 and r.content == want
        for headers in ({}, {"authorization": "Bearer x" + TOKEN}):
            for _ in range(3):
                r = c.post("/v1/rope", json=HOT, headers=headers)
                assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        assert lane_answers(c) - before == (5 if lane else 0)


def test_the_http_clients_send_the_token_over_https(servers):
    import asyncio

    import numpy as np

    from posenc.service.client import AsyncPosencClient, PosencClient, PosencHTTPError

    s = servers["tls"]
    with PosencClient(s.url, token=TOKEN, verify=s.verify) as c:
        out = c.rope(**HOT)
        assert out["cos"].shape == (2, 64) and np.isfinite(out["cos"]).all()
    with PosencClient(s.url, verify=s.verify) as c, pytest.raises(PosencHTTPError) as e:
        c.rope(**HOT)
    assert e.value.status == 401 and "bearer token" in e.value.detail

    async def go():
        async with AsyncPosencClient(s.url, token=TOKEN, verify=s.verify) as c:
            return await c.t5_buckets(query=[0], key=[1])

    assert asyncio.run(go())["buckets"].tolist() == [[17]]


# -- CORS ----------------------------------------------------------------------------------------


def test_cors_preflight_and_the_same_headers_on_every_answer(servers):
    with client(servers["cors"], origin=ORIGIN) as c:
        r = c.options(
            "/v1/rope",
            headers={
                "access-control-request-method": "POST",
                "access-control-request-headers": "authorization,content-type",
            },
        )
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == ORIGIN
        assert "authorization" in r.headers["access-control-allow-headers"].lower()
        assert (
            c.options(
                "/v1/rope",
                headers={"origin": "https://evil.example", "access-control-request-method": "POST"},
            ).status_code
            == 400
        )
        c.post("/v1/rope", json=HOT, headers={**AUTH, **BIN})  # learns the template
        answers = [
            c.post("/v1/rope", json=HOT, headers={**AUTH, **BIN}),  # the C shortcut
            c.post("/v1/rope", json=HOT, headers=AUTH),  # the full path, JSON
            c.post("/v1/rope", json=HOT),  # 401
            c.post("/v1/rope", json={"head_dim": 1, "positions": [1]}, headers=AUTH),  # 422
            c.get("/healthz"),
        ]
        assert [r.status_code for r in answers] == [200, 200, 401, 422, 200]
        seen = [{h: r.headers.get(h) for h in CORS_HEADERS} for r in answers]
        assert seen[0] == {
            "access-control-allow-origin": ORIGIN,
            "access-control-expose-headers": "x-posenc-worker",
            "vary": "Origin",
        }
        assert all(x == seen[0] for x in seen), seen


# -- logs ----------------------------------------------------------------------------------------


def test_json_logs_and_the_access_log_records_hot_requests(servers):
    s = servers["logs"]
    n = 20
    with client(s, **BIN) as c:
        # one connection, so one worker: its lane's count before and after this test's requests (a
        # delta: the module's other tests may have sent this shared server anything before)
        lane_before = c.get("/v1/tables").json()["lane_answers"]
        for _ in range(n):  # the first sight per worker is the full path's
            assert c.post("/v1/rope", json=HOT).content == reference_safetensors("rope", HOT)
        c.post("/v1/rope", json={"head_dim": 1, "positions": [1]})
        answers = [c.get("/v1/tables").json() for _ in range(4)]
    # the lane stood aside (the access log needs every request through uvicorn's protocol)
    assert all(t["lane_answers"] == lane_before and t["shortcut"] == "c" for t in answers), (
        lane_before,
        [t["lane_answers"] for t in answers],
    )

    def records():
        lines = [ln for ln in (s.stdout() + s.stderr()).splitlines() if ln.strip()]
        return [json.loads(ln) for ln in lines]  # every line is one JSON object

    access = lambda: [r for r in records() if r["logger"] == "uvicorn.access"]  # noqa: E731
    wait_for(lambda: len(access()) >= n + 5, 10, 0.05, "access log lines")
    hot = [r for r in access() if (r["method"], r["path"], r["status"]) == ("POST", "/v1/rope", 200)]
    assert len(hot) == n and [r for r in access() if r["status"] == 422][0]["path"] == "/v1/rope"
    recs = records()
    assert all({"ts", "level", "logger", "pid", "msg"} <= set(r) for r in recs)
    loggers = {r["logger"] for r in recs}
    assert {"posenc.engine", "posenc.service", "uvicorn.error", "uvicorn.access"} <= loggers, loggers
    assert any(r["logger"] == "posenc.service" and r["msg"].startswith("ready:") for r in recs)


# -- the command line and the docs ---------------------------------------------------------------


def test_serve_help_names_every_operator_option(tmp_path):
    p = Procs(tmp_path).posenc("serve", "--help")
    assert p.returncode == 0
    for flag in (
        "--tls-cert",
        "--tls-key",
        "--auth-token",
        "--cors-origins",
        "--log-format",
        "--access-log",
        "POSENC_AUTH_TOKEN",
        "POSENC_TLS_CERT",
        "POSENC_CORS_ORIGINS",
        "POSENC_LOG_FORMAT",
        "POSENC_ACCESS_LOG",
    ):
        assert flag in p.stdout, flag


def test_docs_render_in_a_browser_from_this_server_alone(servers):
    """Swagger UI really renders every operation and the schemas, in a browser that can reach
    nothing else (it is started with every other host mapped away)."""
    assert shutil.which("chromium"), (
        "chromium is not installed: `apt-get install -y chromium` (.ci/run installs it)"
    )
    s = servers["cors"]
    p = subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=20000",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "--dump-dom",
            s.url + "/docs",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    dom = p.stdout
    paths = {f"/v1/{f}" for f in ("rope", "sinusoidal", "alibi", "t5-buckets", "tables")} | {
        "/healthz",
        "/readyz",
    }
    for path in paths:
        assert f'data-path="{path}"' in dom, (path, p.stderr[-2000:])
    assert "RopeRequest" in dom and "ValidationError" in dom and "Authorize" in dom
