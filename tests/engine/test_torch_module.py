"""posenc.torch.RotaryEmbedding, with no engine running (its own tables, same bits as the
engine's): against every supported model's own rotary embedding, transformers' dynamic/longrope
behaviour across calls, and swapped into small random-weight transformers models, whose logits
must stay the stock model's (float32: within 1e-4; bfloat16: shape and dtype)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from posenc.engine.reader.client import Client
from posenc.torch import RotaryEmbedding, _gathered, _gathered_on
from tests.engine.hf_published import ROPE
from tests.engine.test_hf_config import LAYER_TYPES, _hf_config, _rotary_class, hf_tol

NO_ENGINE = "ptest-none"  # a namespace no engine serves: the module builds its own tables


def rotary(config, **kw):
    return RotaryEmbedding(config, client=Client(namespace=NO_ENGINE), **kw)


def _pairs(a, b):
    return list(zip(a, b)) if isinstance(a, tuple) else [(a, b)]


@pytest.mark.parametrize("name,layer_type", [(n, lt) for n in ROPE for lt in LAYER_TYPES.get(n, (None,))])
def test_module_matches_the_models_own(name, layer_type):
    cfg = _hf_config(ROPE[name])
    mt = ROPE[name]["model_type"]
    positions = (
        [0, 1, 5, 100, 1000, 2000] if mt in ("gptj", "codegen") else [0, 1, 5, 100, 1000, 4096, 5000, 9000]
    )
    pos = torch.tensor([positions, positions[::-1]])
    stock, ours = _rotary_class(mt)(cfg), rotary(cfg)
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.zeros(1, dtype=dtype)
        with torch.no_grad():
            want = stock(x, pos, layer_type) if layer_type else stock(x, pos)
        got = ours(x, pos, layer_type) if layer_type else ours(x, pos)
        assert ours.source == "local"
        for w, g in _pairs(want, got):
            assert g.shape == w.shape and g.dtype == (w.dtype if mt not in ("olmo", "olmo2") else dtype)
            if dtype == torch.float32:
                w, g = (torch.view_as_real(t) if t.is_complex() else t for t in (w, g))
                tol = torch.tensor(
                    hf_tol(
                        positions,
                        ours.attention_scaling
                        if layer_type is None
                        else getattr(ours, f"{layer_type}_attention_scaling"),
                    )
                )
                tol = tol.reshape(1, -1, *([1] * (w.dim() - 2)))
                assert ((g[0] - w[0]).abs() <= tol[0]).all(), name


def _dynamic_config():
    return transformers.LlamaConfig(
        hidden_size=256,
        num_attention_heads=4,
        max_position_embeddings=32,
        rope_scaling={"rope_type": "dynamic", "factor": 2.0},
    )


def test_dynamic_keeps_transformers_state_across_calls():
    """Frequencies grow with the longest sequence seen and reset below max_position_embeddings
    (dynamic_rope_update), call after call."""
    cfg = _dynamic_config()
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    stock, ours = LlamaRotaryEmbedding(cfg), rotary(cfg)
    x = torch.zeros(1)
    for n in (20, 48, 40, 33, 64, 20, 40):
        pos = torch.arange(n)[None]
        want, got = stock(x, pos), ours(x, pos)
        for w, g in zip(want, got):
            assert (g - w).abs().max() < 1e-5, n


def test_longrope_switches_at_every_call():
    cfg = transformers.Phi3Config(
        hidden_size=64,
        num_attention_heads=4,
        max_position_embeddings=256,
        original_max_position_embeddings=32,
        rope_scaling={
            "type": "longrope",
            "short_factor": [1.0 + k / 8 for k in range(8)],
            "long_factor": [1.0 + k for k in range(8)],
        },
    )
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    stock, ours = Phi3RotaryEmbedding(cfg), rotary(cfg)
    x = torch.zeros(1)
    for n in (10, 40, 10, 33, 32):
        pos = torch.arange(n)[None]
        for w, g in zip(stock(x, pos), ours(x, pos)):
            assert (g - w).abs().max() < 1e-5, n


def test_rows_past_its_table_are_computed():
    cfg = transformers.LlamaConfig(hidden_size=256, num_attention_heads=4)
    ours = rotary(cfg)
    x = torch.zeros(1)
    ours(x, torch.tensor([[0, 1]]))  # a 4096-row table
    big = torch.tensor([[3, 5000, 2**21, 7]])  # past it, and past any private table
    cos, sin = ours(x, big)
    from posenc.engine.answer.pipeline import compute

    want = compute("rope", {"head_dim": 64, "positions": big[0].tolist()})
    np.testing.assert_array_equal(cos[0].numpy(), want["cos"])
    np.testing.assert_array_equal(sin[0].numpy(), want["sin"])


@pytest.mark.parametrize("layout,model_type", [("half_split", None), ("interleaved", None), ("half", "gptj")])
def test_device_gather_equals_the_kernel_gather(layout, model_type):
    """The other-device path (index_select over a zero-stride view) run on CPU tensors gives the
    kernel path's bits, rows past the table included."""
    ours = rotary(transformers.LlamaConfig(hidden_size=256, num_attention_heads=4))
    spec = ours.specs[None]
    t = ours._table(spec, None, None, "bfloat16", 10)
    pos = torch.tensor([0, 7, 4095, 4096, 9000, 3])
    a = _gathered(t, pos, "bfloat16", layout, torch.device("cpu"))
    b = _gathered_on(t, pos, layout, "bfloat16")
    for u, v in zip(a, b):
        assert u.dtype == torch.bfloat16 and torch.equal(u, v)


# -- swapped into small random-weight models --------------------------------------------------

TINY = dict(
    hidden_size=64,
    num_attention_heads=4,
    num_hidden_layers=2,
    intermediate_size=128,
    vocab_size=128,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    initializer_range=0.2,
)  # weights large enough that positions move the logits
MODELS = {
    "llama-llama3": (
        transformers.LlamaConfig,
        dict(
            TINY,
            max_position_embeddings=256,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            },
        ),
    ),
    "qwen2-yarn": (
        transformers.Qwen2Config,
        dict(
            TINY,
            max_position_embeddings=256,
            num_key_value_heads=2,
            rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
        ),
    ),
    "phi3-longrope": (
        transformers.Phi3Config,
        dict(
            TINY,
            max_position_embeddings=256,
            original_max_position_embeddings=32,
            rope_scaling={
                "type": "longrope",
                "short_factor": [1.0 + k / 8 for k in range(8)],
                "long_factor": [1.0 + k for k in range(8)],
            },
        ),
    ),
    "gpt-neox-partial": (
        transformers.GPTNeoXConfig,
        dict(TINY, rotary_pct=0.25, max_position_embeddings=256),
    ),
    "mistral": (
        transformers.MistralConfig,
        dict(TINY, max_position_embeddings=256, num_key_value_heads=2, rope_theta=1e6),
    ),
}


def _model(name):
    cls, kw = MODELS[name]
    torch.manual_seed(0)
    config = cls(**kw)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    return model, config


def _swap(model, config=None):
    owner = model.gpt_neox if hasattr(model, "gpt_neox") else model.model
    owner.rotary_emb = rotary(config or model.config)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_swapped_into_a_model_logits_stay(name):
    model, _ = _model(name)
    ids = torch.randint(0, 128, (2, 48), generator=torch.Generator().manual_seed(1))  # 48 > 32: long contexts
    with torch.no_grad():
        want = model(ids).logits
        _swap(model)
        got = model(ids).logits
    assert got.shape == want.shape and got.dtype == torch.float32
    assert (got - want).abs().max() <= 1e-4, (got - want).abs().max()
    other = model.config.to_dict()  # the test can fail: another θ moves the logits
    other["rope_parameters"] = {**other["rope_parameters"], "rope_theta": 50.0}
    with torch.no_grad():
        _swap(model, other)
        assert (model(ids).logits - want).abs().max() > 1e-2
    model = model.to(torch.bfloat16)
    with torch.no_grad():
        bf = model(ids).logits
    assert bf.shape == want.shape and bf.dtype == torch.bfloat16 and torch.isfinite(bf.float()).all()


def test_swapped_generation_matches():
    """Greedy decoding step by step (one position per call after the prompt): the same tokens."""
    model, _ = _model("llama-llama3")
    ids = torch.randint(0, 128, (1, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=12, do_sample=False)
        _swap(model)
        got = model.generate(ids, max_new_tokens=12, do_sample=False)
    assert torch.equal(got, want)


def test_an_answer_kept_by_the_caller_is_never_overwritten():
    """Large outputs reuse the previous call's block only when nothing holds it any more."""
    ours = rotary(transformers.LlamaConfig(hidden_size=4096, num_attention_heads=32))
    x = torch.zeros(1)
    first = ours(x, torch.arange(4096).repeat(2, 1))
    kept = [t.clone() for t in first]
    second = ours(x, torch.arange(4096, 8192).repeat(2, 1))
    assert all(torch.equal(a, b) for a, b in zip(first, kept))
    assert first[0].data_ptr() != second[0].data_ptr()
    ptr = second[0].data_ptr()
    del first, second
    third = ours(x, torch.arange(4096).repeat(2, 1))
    assert third[0].data_ptr() == ptr and all(torch.equal(a, b) for a, b in zip(third, kept))


# -- SinusoidalEmbedding --------------------------------------------------------------------


def test_sinusoidal_is_distilberts_and_swaps_in():
    from posenc.torch import SinusoidalEmbedding

    cfg = transformers.DistilBertConfig(
        dim=64,
        n_heads=4,
        n_layers=2,
        hidden_dim=128,
        vocab_size=100,
        sinusoidal_pos_embds=True,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    model = transformers.DistilBertModel(cfg).eval()
    ours = SinusoidalEmbedding(64, num_positions=512)
    assert torch.equal(ours.weight, model.embeddings.position_embeddings.weight.detach())
    ids = torch.randint(0, 100, (2, 40), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        want = model(ids).last_hidden_state
        model.embeddings.position_embeddings = ours
        assert torch.equal(model(ids).last_hidden_state, want)


def test_sinusoidal_concat_is_marians_and_grows():
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    from posenc.torch import SinusoidalEmbedding

    marian = MarianSinusoidalPositionalEmbedding(1024, 48)
    ours = SinusoidalEmbedding(48, layout="concat", num_positions=16)
    pos = torch.tensor([[0, 5, 1023], [7, 300, 2]])
    assert torch.equal(ours(pos), marian.create_weight()[pos])  # past its 16 rows: grown
    assert ours.weight.shape[0] == 1024


def test_module_moves_casts_and_copies_like_any_module():
    """After a large forward (an output block is kept for reuse): .to(dtype) casts only the
    inv_freq buffer, and copy.deepcopy gives a module that answers the same."""
    import copy

    ours = rotary(transformers.LlamaConfig(hidden_size=4096, num_attention_heads=32))
    x, pos = torch.zeros(1), torch.arange(4096).repeat(2, 1)
    want = ours(x, pos)
    assert [n for n, _ in ours.named_buffers()] == ["inv_freq"]
    ours.to(torch.bfloat16)
    assert ours.inv_freq.dtype == torch.bfloat16
    twin = copy.deepcopy(ours)
    assert twin.source is None and all(torch.equal(a, b) for a, b in zip(twin(x, pos), want))
