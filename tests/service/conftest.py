"""Fixtures of the in-process service tests: one engine process holding the tables of
tests/service_cases.CONFIG (the service's data comes from shared memory; everything else runs in
this process), and a Service attached to it that has learnt the rope templates."""

from __future__ import annotations

import pytest

from posenc.service.core.settings import Settings
from posenc.service.front.service import Service
from tests.procs import Procs, unique_namespace
from tests.service.hot_helpers import HOT_SPECS
from tests.service_cases import ACCEPT_HDRS, BIN, CONFIG, orjson_dumps
from tests.shm import assert_no_leftovers


@pytest.fixture(scope="session")
def engine(tmp_path_factory):
    reg = Procs(tmp_path_factory.mktemp("service-engine"))
    eng = reg.engine(CONFIG, unique_namespace())
    try:
        yield eng
    finally:
        rc = eng.stop()
        reg.cleanup()
        assert rc == 0, eng.logs()
        assert_no_leftovers(eng.namespace)


@pytest.fixture
def settings(engine) -> Settings:
    return Settings(namespace=engine.namespace)


@pytest.fixture(scope="module")
def learnt(engine):
    """A Service in this process, attached to the engine, that has answered each of HOT_SPECS
    twice through the full path (so both shortcuts know their templates: a key is learnt at its
    second answer, service/shortcut/store.py)."""
    svc = Service(Settings(namespace=engine.namespace))
    svc.hot("rope", b"{}", ACCEPT_HDRS)  # first sight of the manifest
    for spec in HOT_SPECS:
        for _ in range(2):
            svc.execute(svc.prepare("rope", orjson_dumps({**spec, "positions": [5]}), BIN["accept"]))
    return svc
