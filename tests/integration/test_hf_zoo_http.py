"""The zoo over HTTP: a real ``posenc serve`` answers ``/v1/rope`` with every zoo model type's
config as transformers saves it (``cfg.to_dict()``, sent as Python's json writes it), and its cos/sin
are the model's own rotary class's (within docs/reference.md's tolerance), for positions up to and
past the table the engine builds for the new spec; ``GET /v1/models`` lists every model type read."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from posenc.engine.core.formats import read_safetensors
from posenc.engine.models import registry
from tests.engine.test_hf_zoo import ROWS, _check, _class_and_conf
from tests.procs import Procs
from tests.shm import shm_files
from tests.tools import hf_zoo

BIN = {"accept": "application/x-safetensors"}


@pytest.fixture(scope="module")
def http(tmp_path_factory, request):
    procs = Procs(tmp_path_factory.mktemp("zoo"))
    s = procs.serve(None, workers=1)

    def stop():
        assert s.stop() == 0, s.output()
        procs.cleanup()
        assert shm_files(s.namespace) == []

    request.addfinalizer(stop)
    with httpx.Client(base_url=s.url, timeout=60) as c:
        yield c


@pytest.mark.parametrize("mt", sorted(ROWS))
def test_every_zoo_model_over_http(http, mt):
    klass, cfg, conf = _class_and_conf(mt)
    lt = hf_zoo.layer_types(conf)[-1]
    positions = hf_zoo._positions(klass, conf)
    cos, sin, _, scaling = hf_zoo.run_class(klass(conf), positions, lt)
    body = {"hf_config": cfg.to_dict(), "positions": positions, **({"layer_type": lt} if lt else {})}
    r = http.post("/v1/rope", content=json.dumps(body).encode(), headers=BIN)  # NaN/Infinity as written
    assert r.status_code == 200, (mt, r.text[:300])
    arrays, meta = read_safetensors(r.content)
    got = {
        "cos": arrays["cos"].astype(np.float64),
        "sin": arrays["sin"].astype(np.float64),
        "attention_scaling": float(arrays["attention_scaling"]),
    }
    _check(got, cos, sin, scaling, positions, f"{mt} over HTTP")


def test_models_lists_what_the_server_reads(http):
    r = http.get("/v1/models")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text
    got = r.json()
    assert got["transformers"] == registry.ZOO["transformers"]
    assert got["model_types"] == {
        mt: {f: rec.source for f, rec in by.items()} for mt, by in registry.MODELS.items()
    }
    assert set(got["diffusers_classes"]) == set(registry.CLASSES)
    assert got["not_read"] == registry.UNREAD
    assert set(ROWS) <= set(got["model_types"])
