"""Model configs as published with the models (transformers 4 spellings: ``rope_scaling``,
``type``, ``rotary_pct``, ...): the rope- and alibi-relevant keys of each config.json, with the
published values (LongRoPE factor lists are stand-ins of the published lengths and ranges).
Keys that carry no positional information are left out: posenc ignores them and transformers'
config classes fill their defaults."""

from __future__ import annotations


def _factors(n: int, lo: float, hi: float) -> list[float]:
    """n increasing factors from lo to hi (the shape of Phi-3's LongRoPE lists)."""
    return [lo + (hi - lo) * (k / (n - 1)) ** 2 for k in range(n)]


# name -> (config.json keys, layer types to ask for (None: the config has one rope))
ROPE = {
    "llama-3.1-8b": {
        "model_type": "llama",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
    },
    "mistral-7b-v0.1": {
        "model_type": "mistral",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 32768,
        "rope_theta": 10000.0,
        "sliding_window": 4096,
    },
    "mixtral-8x7b": {
        "model_type": "mixtral",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
    },
    "qwen2.5-7b-yarn": {
        "model_type": "qwen2",
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"},
    },
    "qwen1.5-moe-a2.7b": {
        "model_type": "qwen2_moe",
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "max_position_embeddings": 8192,
        "rope_theta": 1000000.0,
    },
    "qwen3-8b": {
        "model_type": "qwen3",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
    },
    "qwen3-30b-a3b": {
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000.0,
    },
    "phi-2": {
        "model_type": "phi",
        "hidden_size": 2560,
        "num_attention_heads": 32,
        "partial_rotary_factor": 0.4,
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
    },
    "phi-3-mini-128k": {
        "model_type": "phi3",
        "hidden_size": 3072,
        "num_attention_heads": 32,
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "rope_scaling": {
            "type": "longrope",
            "short_factor": _factors(48, 1.0, 3.0),
            "long_factor": _factors(48, 1.08, 60.0),
        },
    },
    "phi-3.5-moe": {
        "model_type": "phimoe",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
        "rope_theta": 10000.0,
        "rope_scaling": {
            "type": "longrope",
            "short_factor": _factors(64, 1.0, 3.0),
            "long_factor": _factors(64, 1.05, 40.0),
            "short_mscale": 1.243163121016122,
            "long_mscale": 1.243163121016122,
            "original_max_position_embeddings": 4096,
        },
    },
    "gemma-7b": {
        "model_type": "gemma",
        "hidden_size": 3072,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "head_dim": 256,
        "max_position_embeddings": 8192,
        "rope_theta": 10000.0,
    },
    "gemma-2-9b": {
        "model_type": "gemma2",
        "hidden_size": 3584,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 256,
        "max_position_embeddings": 8192,
        "rope_theta": 10000.0,
    },
    "gemma-3-4b": {
        "model_type": "gemma3_text",
        "hidden_size": 2560,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "num_hidden_layers": 34,
        "max_position_embeddings": 131072,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024,
    },
    "pythia-6.9b": {
        "model_type": "gpt_neox",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "rotary_pct": 0.25,
        "rotary_emb_base": 10000,
        "max_position_embeddings": 2048,
    },
    "gpt-j-6b": {"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 64, "n_positions": 2048},
    # Salesforce/codegen-350M-mono
    "codegen-350m-mono": {
        "model_type": "codegen",
        "n_embd": 1024,
        "n_head": 16,
        "n_layer": 20,
        "rotary_dim": 32,
        "n_positions": 2048,
        "n_ctx": 2048,
    },
    "stablelm-2-1.6b": {
        "model_type": "stablelm",
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "partial_rotary_factor": 0.25,
        "rope_theta": 10000,
        "max_position_embeddings": 4096,
    },
    "starcoder2-7b": {
        "model_type": "starcoder2",
        "hidden_size": 4608,
        "num_attention_heads": 36,
        "num_key_value_heads": 4,
        "max_position_embeddings": 16384,
        "rope_theta": 1000000.0,
    },
    "olmo-7b": {
        "model_type": "olmo",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
    },
    "olmo-2-7b": {
        "model_type": "olmo2",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "max_position_embeddings": 4096,
        "rope_theta": 500000,
    },
    "command-r": {
        "model_type": "cohere",
        "hidden_size": 8192,
        "num_attention_heads": 64,
        "max_position_embeddings": 131072,
        "rope_theta": 8000000.0,
    },
    "deepseek-v2-lite": {
        "model_type": "deepseek_v2",
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "kv_lora_rank": 512,
        "q_lora_rank": None,
        "max_position_embeddings": 163840,
        "rope_theta": 10000,
        "rope_scaling": {
            "beta_fast": 32,
            "beta_slow": 1,
            "factor": 40,
            "mscale": 0.707,
            "mscale_all_dim": 0.707,
            "original_max_position_embeddings": 4096,
            "type": "yarn",
        },
    },
    "deepseek-v3": {
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "num_attention_heads": 128,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "max_position_embeddings": 163840,
        "rope_theta": 10000,
        "rope_scaling": {
            "beta_fast": 32,
            "beta_slow": 1,
            "factor": 40,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
            "type": "yarn",
        },
    },
    "granite-3.0-8b": {
        "model_type": "granite",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 4096,
        "rope_theta": 10000.0,
    },
    "falcon-7b": {
        "model_type": "falcon",
        "hidden_size": 4544,
        "num_attention_heads": 71,
        "alibi": False,
        "max_position_embeddings": 2048,
    },
}
LAYER_TYPES = {"gemma-3-4b": ("full_attention", "sliding_attention")}

ALIBI = {
    "bloom-560m": {"model_type": "bloom", "hidden_size": 1024, "n_head": 16},
    "bloom-7b1": {"model_type": "bloom", "hidden_size": 4096, "n_head": 32},
    "mpt-7b": {
        "model_type": "mpt",
        "d_model": 4096,
        "n_heads": 32,
        "attn_config": {"alibi": True, "alibi_bias_max": 8, "attn_impl": "torch"},
    },
    "falcon-rw-1b": {"model_type": "falcon", "hidden_size": 2048, "num_attention_heads": 32, "alibi": True},
}


# Published configs of zoo model types (engine/models/zoo.json), one for each family of quirks the zoo's
# rows carry, with the positional keys as their config.json holds them (tests/engine/test_hf_zoo.py).
ZOO = {
    # openai/gpt-oss-20b: yarn by default, half-width cos/sin applied to the two halves of a head
    "gpt-oss-20b": {
        "model_type": "gpt_oss",
        "hidden_size": 2880,
        "num_attention_heads": 64,
        "head_dim": 64,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
        "rope_theta": 150000,
        "rope_scaling": {
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "rope_type": "yarn",
            "truncate": False,
        },
    },
    # meta-llama/Llama-4-Scout-17B-16E: composite (text_config), llama3 scaling, complex freqs_cis
    "llama-4-scout": {
        "model_type": "llama4",
        "text_config": {
            "model_type": "llama4_text",
            "hidden_size": 5120,
            "num_attention_heads": 40,
            "head_dim": 128,
            "num_key_value_heads": 8,
            "max_position_embeddings": 10485760,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "factor": 16.0,
                "high_freq_factor": 1.0,
                "low_freq_factor": 1.0,
                "original_max_position_embeddings": 8192,
                "rope_type": "llama3",
            },
        },
    },
    # THUDM/glm-4-9b-chat-hf: partial_rotary_factor honoured by the default type
    "glm-4-9b-chat-hf": {
        "model_type": "glm",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "head_dim": 128,
        "num_key_value_heads": 2,
        "partial_rotary_factor": 0.5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 131072,
    },
    # Qwen/Qwen3-Next-80B-A3B-Instruct: a hybrid (linear attention) model, a quarter of the head rotates
    "qwen3-next-80b-a3b": {
        "model_type": "qwen3_next",
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "head_dim": 256,
        "num_key_value_heads": 2,
        "partial_rotary_factor": 0.25,
        "rope_theta": 10000000,
        "max_position_embeddings": 262144,
    },
    # answerdotai/ModernBERT-base: per layer type, from transformers 4's global/local θ keys
    "modernbert-base": {
        "model_type": "modernbert",
        "hidden_size": 768,
        "num_attention_heads": 12,
        "max_position_embeddings": 8192,
        "global_rope_theta": 160000.0,
        "local_rope_theta": 10000.0,
        "global_attn_every_n_layers": 3,
        "num_hidden_layers": 22,
    },
    # CohereForAI/c4ai-command-r7b-12-2024: interleaved pairs
    "command-r7b": {
        "model_type": "cohere2",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "rope_theta": 50000.0,
        "max_position_embeddings": 8192,
    },
    # allenai/OLMoE-1B-7B-0924
    "olmoe-1b-7b": {
        "model_type": "olmoe",
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "max_position_embeddings": 4096,
        "rope_theta": 10000.0,
    },
    # MiniMaxAI/MiniMax-M2: partial rotary as a rotary width (rotary_dim)
    "minimax-m2": {
        "model_type": "minimax_m2",
        "hidden_size": 3072,
        "num_attention_heads": 48,
        "head_dim": 128,
        "rotary_dim": 64,
        "rope_theta": 5000000,
        "max_position_embeddings": 196608,
    },
}
