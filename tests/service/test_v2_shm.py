"""The shared-memory registry (service/v2/shm.py) in process: what one process registers the
others see, outputs land at the offset asked, and a client that shrinks its object after
registering gets a 400, not a server killed by SIGBUS."""

from __future__ import annotations

import os
import uuid

import numpy as np
import pytest

from posenc.service.v2.errors import BadRequest
from posenc.service.v2.shm import Regions, remove_registry

SHM = "/dev/shm"


@pytest.fixture
def ns(tmp_path):
    ns = f"ptest-{uuid.uuid4().hex[:8]}"
    yield ns
    remove_registry(SHM, ns)


@pytest.fixture
def region():
    key = f"posenc_test_{uuid.uuid4().hex[:8]}"
    path = os.path.join(SHM, key)
    with open(path, "wb") as f:
        f.truncate(4096)
    yield "/" + key, path
    os.unlink(path)


def test_another_process_sees_registrations_and_writes_land(ns, region):
    key, path = region
    a, b = Regions(SHM, ns), Regions(SHM, ns)    # two server processes
    a.register("r", key, 1024, 2048)
    assert b.status() == [{"name": "r", "key": key, "offset": 1024, "byte_size": 2048}]
    out = np.arange(6, dtype=np.float32).reshape(2, 3)
    b.write("r", 100, 24, out, "outputs[0].parameters")
    got = np.fromfile(path, np.float32, 6, offset=1024 + 100)
    np.testing.assert_array_equal(got, out.reshape(-1))
    assert a.read("r", 100, 24, "inputs[0].parameters") == out.tobytes()
    a.unregister("r")
    with pytest.raises(BadRequest, match="unknown shared memory region 'r'"):
        b.write("r", 0, 24, out, "outputs[0].parameters")


def test_a_shrunk_object_is_refused_not_a_crash(ns, region):
    key, path = region
    r = Regions(SHM, ns)
    r.register("r", key, 0, 4096)
    r.write("r", 0, 16, np.zeros(4, np.float32), "outputs[0].parameters")   # mapped now
    os.truncate(path, 8)
    with pytest.raises(BadRequest, match="smaller than when it was registered"):
        r.write("r", 0, 16, np.ones(4, np.float32), "outputs[0].parameters")


@pytest.mark.parametrize("key, words", [
    ("", "must name a POSIX shared memory object"), ("/a/b", "must name"), ("..", "must name"),
    ("/posenc.seg.1.abc", "posenc's own files"), ("ns-1.manifest.json", "posenc's own files"),
    ("/posenc_test_absent", "unable to open"),
])
def test_keys_refused(ns, key, words):
    with pytest.raises(BadRequest, match=words):
        Regions(SHM, ns).register("r", key, 0, 8)
