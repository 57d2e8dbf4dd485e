"""The gRPC server's TLS and bearer token (service/v2/grpc_auth.py), through tritonclient's gRPC
client against a real ``posenc serve``: TLS with a certificate made here (the HTTPS flags), the
token (POSENC_AUTH_TOKEN) as ``authorization`` metadata, UNAUTHENTICATED without it or with
another, on every method the service has (unary, streamed, shared memory) and on one it has not;
the standard health service stays open."""

from __future__ import annotations

import queue

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.integration.kserve_cases import wait_grpc_ready
from tests.integration.test_serve_ops import make_certificates
from tests.procs import Procs, child_env
from tests.service_cases import CONFIG

pytestmark = pytest.mark.slow
TOKEN = "grpc-test-token_0123456789"
AUTH = {"authorization": f"Bearer {TOKEN}"}
SPEC = '{"head_dim": 64}'


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("grpc-auth")
    reg = Procs(folder)
    ca, cert, key = make_certificates(folder)
    env = child_env({"POSENC_AUTH_TOKEN": TOKEN, "POSENC_SHORTCUT": "c"})
    s = reg.serve(CONFIG, workers=1, args=["--tls-cert", cert, "--tls-key", key], env=env, ca=ca, grpc=True)
    s.ca_file = ca
    try:
        with open(ca, "rb") as f:
            wait_grpc_ready(
                s, credentials=grpc.ssl_channel_credentials(f.read()), metadata=tuple(AUTH.items())
            )
        yield s
    finally:
        assert s.stop() == 0, s.output()
        reg.cleanup()


def client(s) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(s.grpc_url, ssl=True, root_certificates=s.ca_file)


def infer(c, positions, headers):
    i = grpcclient.InferInput("positions", [len(positions)], "INT64")
    i.set_data_from_numpy(np.asarray(positions, np.int64))
    return c.infer("rope", [i], parameters={"spec": SPEC}, headers=headers)


def test_tls_and_the_token_answer(server):
    c = client(server)
    for p in ([3, 1], [7, 2], [9, 4]):  # the later ones through the shortcut
        r = infer(c, p, AUTH)
        assert r.as_numpy("cos").shape == (2, 64)
    assert c.is_model_ready("rope", headers=AUTH)
    assert c.get_server_metadata(headers=AUTH).name == "posenc"
    c.close()


@pytest.mark.parametrize(
    "headers, why",
    [
        (None, "missing bearer token"),
        ({"authorization": "Bearer wrong"}, "invalid bearer token"),
        ({"authorization": TOKEN}, "invalid bearer token"),
    ],
)
def test_calls_without_the_token_are_unauthenticated(server, headers, why):
    c = client(server)
    calls = [
        lambda: infer(c, [3, 1], headers),
        lambda: infer(c, [7, 2], headers),
        lambda: c.is_model_ready("rope", headers=headers),
        lambda: c.get_server_metadata(headers=headers),
        lambda: c.get_model_metadata("rope", headers=headers),
        lambda: c.get_system_shared_memory_status(headers=headers),
        lambda: c.unregister_system_shared_memory(headers=headers),
        lambda: c.get_model_repository_index(headers=headers),
    ]  # a method posenc does not serve
    for call in calls:
        with pytest.raises(InferenceServerException) as e:
            call()
        assert e.value.status() == "StatusCode.UNAUTHENTICATED" and why in e.value.message(), e.value
    c.close()


def test_a_stream_without_the_token_is_unauthenticated(server):
    c = client(server)
    got = queue.Queue()
    c.start_stream(lambda result, error: got.put((result, error)), headers={"authorization": "Bearer nope"})
    i = grpcclient.InferInput("positions", [1], "INT64")
    i.set_data_from_numpy(np.asarray([1], np.int64))
    try:
        c.async_stream_infer("rope", [i], parameters={"spec": SPEC})
    except InferenceServerException:  # the server refused the stream before the request went: the
        pass  # callback has the refusal either way
    result, error = got.get(timeout=30)
    assert result is None and "UNAUTHENTICATED" in str(error.status())
    c.stop_stream()
    c.close()


def test_health_stays_open_and_plaintext_is_refused(server):
    with open(server.ca_file, "rb") as f:
        creds = grpc.ssl_channel_credentials(f.read())

    with grpc.secure_channel(server.grpc_url, creds) as ch:  # without the token
        r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert r.status == health_pb2.HealthCheckResponse.SERVING
    with grpc.insecure_channel(server.grpc_url) as ch:  # the port speaks TLS only
        with pytest.raises(grpc.RpcError) as e:
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
