"""posenc.torch.RotaryEmbedding reading a running engine's shared tables: the configured table
(named by its config.json), on-demand tables for other dtypes, rows past the engine's length,
and a model with the module swapped in."""

from __future__ import annotations

import signal

import pytest
import torch
import transformers

from posenc.engine.reader.client import Client
from posenc.torch import RotaryEmbedding
from tests.procs import Procs, unique_namespace
from tests.shm import assert_no_leftovers

TINY = dict(
    hidden_size=64,
    num_attention_heads=4,
    num_hidden_layers=2,
    intermediate_size=128,
    vocab_size=128,
    initializer_range=0.2,
    max_position_embeddings=256,
    rope_scaling={
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32,
    },
)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    ns = unique_namespace()
    procs = Procs(tmp_path_factory.mktemp("torch-engine"))
    config = transformers.LlamaConfig(**TINY)
    eng = procs.engine(
        {"length": 1024, "tables": [{"name": "tiny-llama", "family": "rope", "hf_config": config.to_dict()}]},
        ns,
    )
    yield ns, config
    eng.stop(signal.SIGTERM)
    procs.cleanup()
    assert_no_leftovers(ns)


def _pair(ns, config):
    shared = RotaryEmbedding(config, namespace=ns)
    local = RotaryEmbedding(config, client=Client(namespace=unique_namespace()))
    return shared, local


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_shared_rows_are_the_local_rows(engine, dtype):
    ns, config = engine
    shared, local = _pair(ns, config)
    x = torch.zeros(1, dtype=dtype)
    pos = torch.tensor([[0, 1, 31, 1023], [1024, 5000, 2, 3]])  # past the engine's 1024 rows too
    a, b = shared(x, pos), local(x, pos)
    assert shared.source == "shared" and local.source == "local"
    for u, v in zip(a, b):
        assert u.dtype == dtype and u.shape == (2, 4, 16) and torch.equal(u, v)


def test_the_configured_table_is_the_one_read(engine):
    ns, config = engine
    shared, _ = _pair(ns, config)
    shared(torch.zeros(1), torch.tensor([[0, 1]]))
    table = next(iter(shared._tables.values()))
    assert table.view.segment.entry["name"] == "tiny-llama" and table.view.segment.entry["pinned"]


def test_swapped_model_reads_the_engine(engine):
    ns, config = engine
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 128, (2, 40), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = model(ids).logits
        model.model.rotary_emb = RotaryEmbedding(model.config, namespace=ns)
        got = model(ids).logits
    assert model.model.rotary_emb.source == "shared"
    assert (got - want).abs().max() <= 1e-4
