"""The system shared-memory extension through ``tritonclient.utils.shared_memory``: regions the
client owns, registered over either transport and used over either (every HTTP worker and the
gRPC process share the registry), outputs written at the asked offset, inputs read from it, and
a clear 400 / INVALID_ARGUMENT for a region too small, unknown, or not the client's to give."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from tests.integration.kserve_cases import bits, clients_of, v1_answer

pytestmark = pytest.mark.slow
MODULES = {"rest": httpclient, "grpc": grpcclient}
SIZE = 1 << 16


@pytest.fixture
def clients(v2server):
    with clients_of(v2server) as c:
        yield c
        c["rest"].unregister_system_shared_memory()


@pytest.fixture
def region():
    """A region of the test's own: (name, key, handle)."""
    tag = uuid.uuid4().hex[:8]
    name, key = f"out-{tag}", f"/posenc_test_{tag}"
    h = shm.create_shared_memory_region(name, key, SIZE)
    yield name, key, h
    shm.destroy_shared_memory_region(h)


def _positions(module, values):
    i = module.InferInput("positions", [len(values)], "INT64")
    i.set_data_from_numpy(np.array(values, dtype=np.int64))
    return i


@pytest.mark.parametrize("register_on, infer_on", [("grpc", "rest"), ("rest", "grpc"), ("rest", "rest")])
def test_outputs_land_in_the_clients_region(clients, region, register_on, infer_on):
    name, key, h = region
    clients[register_on].register_system_shared_memory(name, key, SIZE)
    m = MODULES[infer_on]
    spec = '{"head_dim": 16, "dtype": "bfloat16"}'
    positions = [0, 5, 2047, 9000]
    ref = v1_answer(clients["http"], "rope", {"head_dim": 16, "dtype": "bfloat16", "positions": positions})
    for _attempt in range(4):  # several requests: the HTTP workers each map the region themselves
        cos, sin = m.InferRequestedOutput("cos"), m.InferRequestedOutput("sin")
        cos.set_shared_memory(name, 128, offset=1024)
        sin.set_shared_memory(name, 128, offset=4096)
        r = clients[infer_on].infer(
            "rope", [_positions(m, positions)], outputs=[cos, sin], parameters={"spec": spec}
        )
        out = r.get_output("cos")
        params = (
            out["parameters"]
            if isinstance(out, dict)
            else {k: v.int64_param or v.string_param for k, v in out.parameters.items()}
        )
        assert params["shared_memory_region"] == name and params["shared_memory_byte_size"] == 128
        for o, offset in (("cos", 1024), ("sin", 4096)):
            got = shm.get_contents_as_numpy(h, np.uint16, [4, 16], offset=offset)
            np.testing.assert_array_equal(got, ref[o])
        shm.set_shared_memory_region(h, [np.zeros(SIZE // 4, np.float32)])  # clear for the next try


def test_inputs_come_from_the_region(clients, region):
    name, key, h = region
    clients["grpc"].register_system_shared_memory(name, key, SIZE)
    q, k = np.array([[7], [9]], np.int32), np.array([[0, 3, 7], [1, 8, 9]], np.int32)
    shm.set_shared_memory_region(h, [q, k])
    for t, m in MODULES.items():
        ins = [m.InferInput("query", [2, 1], "INT32"), m.InferInput("key", [2, 3], "INT32")]
        ins[0].set_shared_memory(name, q.nbytes)
        ins[1].set_shared_memory(name, k.nbytes, offset=q.nbytes)
        r = clients[t].infer("bloom-alibi", ins)
        for row in range(2):
            ref = v1_answer(
                clients["http"], "alibi", {"num_heads": 16, "query": q[row].tolist(), "key": k[row].tolist()}
            )
            np.testing.assert_array_equal(bits(r.as_numpy("bias"))[row], ref["bias"])


def test_status_register_twice_and_unregister(clients, region):
    name, key, _ = region
    clients["rest"].register_system_shared_memory(name, key, 4096, offset=512)
    assert clients["rest"].get_system_shared_memory_status() == [
        {"name": name, "key": key, "offset": 512, "byte_size": 4096}
    ]
    st = clients["grpc"].get_system_shared_memory_status(name)
    assert (
        st.regions[name].key == key and st.regions[name].byte_size == 4096 and st.regions[name].offset == 512
    )
    for t in MODULES:
        with pytest.raises(InferenceServerException) as e:
            clients[t].register_system_shared_memory(name, key, 16)
        assert "already registered" in e.value.message()
    clients["grpc"].unregister_system_shared_memory(name)
    assert clients["rest"].get_system_shared_memory_status() == []
    clients["rest"].unregister_system_shared_memory(name)  # unknown: no error, as in Triton


@pytest.mark.parametrize("transport", MODULES)
def test_refusals(clients, region, v2server, transport):
    name, key, _ = region
    c, m = clients[transport], MODULES[transport]
    code = "400" if transport == "rest" else "StatusCode.INVALID_ARGUMENT"

    def refused(call, words):
        with pytest.raises(InferenceServerException) as e:
            call()
        assert e.value.status() == code and words in e.value.message(), e.value.message()

    refused(lambda: c.register_system_shared_memory("x", "/posenc_no_such_region", 16), "unable to open")
    refused(lambda: c.register_system_shared_memory("x", key, SIZE, offset=8), "past the end")
    refused(
        lambda: c.register_system_shared_memory("x", f"/{v2server.namespace}.manifest.json", 16),
        "posenc's own files",
    )
    refused(
        lambda: c.register_system_shared_memory("x", "/../etc/passwd", 16), "must name a POSIX shared memory"
    )
    c.register_system_shared_memory(name, key, 256)

    def ask(region_name, size, offset=0):
        o = m.InferRequestedOutput("cos")
        o.set_shared_memory(region_name, size, offset=offset)
        return lambda: c.infer(
            "rope", [_positions(m, [1, 2])], outputs=[o], parameters={"spec": '{"head_dim": 64}'}
        )

    refused(
        ask(name, 100),
        "outputs[0].parameters.shared_memory_byte_size: the output is 512 bytes, more than the 100",
    )
    refused(ask(name, 256, offset=128), "is past the end of region")
    refused(
        ask("nope", 512), "outputs[0].parameters.shared_memory_region: unknown shared memory region 'nope'"
    )
    refused(lambda: c.get_system_shared_memory_status("nope"), "unknown shared memory region")
