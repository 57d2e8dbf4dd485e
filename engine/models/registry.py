"""The model types posenc reads configs of: ``MODELS``, model_type -> {family: record}, and
``derive``, which reads a config through its model type's record:

    derive("rope", config, layer_type=None) -> Derived(fields, origin)   (hf_config.Derived)

Each record says which transformers 5.24 file it follows (``source``, relative to
``transformers/``) and what that file's config class and rotary embedding (or ALiBi builder) do
differently from the shared reading in posenc.engine.models.config. ``defaults`` are the config
class's defaults of the keys posenc reads, used when a config leaves them out (the tests hold
them to the classes themselves). docs/models.md lists these records.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
from collections.abc import Mapping
from typing import Any

from ..core.errors import SpecError
from ..core.fields import is_number, json_repr, require_object
from ..tables.rope_spec import INTERLEAVED
from . import buckets, diffusers_grid, diffusers_rope, sinusoidal, timm_vit, vision
from . import grid as model_grid
from .config import (
    LOC,
    AlibiModel,
    Config,
    Derived,
    RopeModel,
    check_flat_layer_type,
    key_head_dim,
    split_head_dim,
)


@dataclasses.dataclass(frozen=True)
class FalconRope(RopeModel):
    """Falcon: rotary unless ``alibi`` is true; head_dim is always hidden_size // num_attention_heads
    (a property of FalconConfig); the legacy ``n_embed`` is hidden_size."""

    def check(self, cfg):
        if cfg.get("alibi", False) is not False:
            raise SpecError(
                cfg.loc("alibi"),
                "this Falcon config uses ALiBi, not rotary positions (alibi: true); ask /v1/alibi",
            )


@dataclasses.dataclass(frozen=True)
class PerLayerTypeRope(RopeModel):
    """Gemma 3: rope parameters per layer type (Gemma3TextConfig.convert_rope_params_to_dict). The
    transformers 4 form gives ``rope_theta`` (full attention, default 1e6), ``rope_local_base_freq``
    (sliding attention, default 1e4) and ``rope_scaling``, which applies to full attention only."""

    layer_thetas: Mapping = dataclasses.field(
        default_factory=lambda: {
            "full_attention": ("rope_theta", 1_000_000.0),
            "sliding_attention": ("rope_local_base_freq", 10_000.0),
        }
    )

    def rope_block(self, cfg, layer_type):
        rp = cfg.block("rope_parameters") or {}
        entries, where = {}, {}
        for lt in self.layer_thetas:
            entry = rp.get(lt)
            entries[lt] = dict(require_object(entry, (*cfg.loc("rope_parameters"), lt))) if entry else {}
            where[lt] = (*cfg.loc("rope_parameters"), lt)
        legacy = cfg.block("rope_scaling")
        if legacy:
            entries["full_attention"].update(legacy)
            where["full_attention"] = cfg.loc("rope_scaling")
        if layer_type is None:
            raise SpecError(
                ("layer_type",),
                f"required: this config has rope parameters per layer type ({', '.join(entries)})",
                "missing",
            )
        if layer_type not in entries:
            raise SpecError(
                ("layer_type",), f"must be one of {', '.join(entries)}, got {json_repr(layer_type)}"
            )
        return entries[layer_type], where[layer_type]

    def theta_fallback(self, layer_type):
        return self.layer_thetas[layer_type]


@dataclasses.dataclass(frozen=True)
class FixedTableRope(RopeModel):
    """GPT-J: ``create_sinusoidal_positions(n_positions, rotary_dim)`` with θ fixed at 10000 and no
    scaling (its config's rope keys are never read); the first ``rotary_dim`` dims of each head
    rotate, in pairs (2k, 2k+1) (``rotate_every_two``). Its table stops at n_positions; posenc
    computes rows past it exactly."""

    def derive(self, raw, layer_type):
        cfg = self.config(raw)
        check_flat_layer_type(cfg, layer_type)
        head_dim, hd_loc = split_head_dim(cfg)
        if "rotary_dim" in raw and raw["rotary_dim"] is None:
            raise SpecError(
                cfg.loc("rotary_dim"),
                "null: GPT-J then rotates hidden_size dims per head, "
                "more than a head holds; give the rotary width",
            )
        r = cfg.int("rotary_dim")
        if r > head_dim:
            raise SpecError(
                cfg.loc("rotary_dim"), f"must be <= head_dim = n_embd // n_head = {head_dim}, got {r}"
            )
        fields = {
            "head_dim": head_dim,
            "partial_rotary_factor": r / head_dim,
            "rope_theta": 10000.0,
            "layout": self.layout,
            "max_position_embeddings": cfg.int("max_position_embeddings"),
        }
        if int(head_dim * (r / head_dim)) != r:  # the fraction does not round-trip: give d itself
            fields.update(head_dim=r, partial_rotary_factor=1.0)
        return Derived(
            fields,
            {
                "head_dim": hd_loc,
                "partial_rotary_factor": cfg.loc("rotary_dim"),
                "max_position_embeddings": cfg.loc("max_position_embeddings"),
            },
        )


@dataclasses.dataclass(frozen=True)
class PhimoeRope(RopeModel):
    """Phi-3.5-MoE: ``PhimoeRotaryEmbedding.forward`` recomputes its frequencies with no sequence
    length, so longrope always uses ``short_factor``, and scales cos/sin by ``short_mscale`` or
    ``long_mscale`` (past original_max_position_embeddings) instead of the longrope attention
    factor. posenc gives that as longrope with long_factor = short_factor and attention_factor =
    the mscale, which needs the two mscales equal (they are in the published config)."""

    def finish(self, cfg, block, d):
        scaling = d.fields["rope_scaling"]
        if scaling["rope_type"] == "default":
            return d
        where = d.origin["rope_scaling"]
        if scaling["rope_type"] != "longrope":
            raise SpecError((*where, "rope_type"), "Phi-MoE's rotary embedding supports default and longrope")
        short, long = block.get("short_mscale"), block.get("long_mscale")
        for key, v in (("short_mscale", short), ("long_mscale", long)):
            if not is_number(v):
                raise SpecError(
                    (*where, key), f"must be a number (PhimoeConfig requires it), got {json_repr(v)}"
                )
        if long != short:
            raise SpecError(
                (*where, "long_mscale"),
                f"differs from short_mscale ({short}): the scale would "
                "switch with the sequence length, which a spec cannot say",
            )
        if "short_factor" in scaling:
            scaling["long_factor"] = scaling["short_factor"]
        scaling["attention_factor"] = short
        return d


def _mpt_attn(cfg: Config) -> Mapping:
    return cfg.block("attn_config") or {}


def _mpt_uses(cfg):
    # MptAttentionConfig.alibi defaults to True
    return _mpt_attn(cfg).get("alibi", True) is not False, (*cfg.loc("attn_config"), "alibi")


def _mpt_max_bias(cfg):
    # MptAttentionConfig.alibi_bias_max (default 8), as docs/reference.md reads it. transformers' MptModel
    # calls build_mpt_alibi_tensor without it (always 8); the published MPT configs all say 8.
    v = _mpt_attn(cfg).get("alibi_bias_max")
    if v is None:
        return 8.0, (*LOC, "attn_config")
    if not is_number(v):
        raise SpecError((*cfg.loc("attn_config"), "alibi_bias_max"), f"must be a number, got {json_repr(v)}")
    return float(v), (*cfg.loc("attn_config"), "alibi_bias_max")


def _falcon_uses(cfg):
    return cfg.get("alibi", False) is True, cfg.loc("alibi")


def _llama_like(model: str, cls: str, **kw) -> RopeModel:
    return RopeModel(source=f"models/{model}/modeling_{model}.py ({cls}RotaryEmbedding)", **kw)


def _sizes(hidden: int, heads: int, max_pos: int, **more) -> dict:
    return {"hidden_size": hidden, "num_attention_heads": heads, "max_position_embeddings": max_pos, **more}


_NEOX = dict(default_partial=True)  # compute_default_rope_parameters honours partial_rotary_factor
# DeepseekV2Config / DeepseekV3Config.__post_init__: head_dim = qk_rope_head_dim (the rotated part of
# each query/key head; the rest, qk_nope_head_dim, has no positions)
_QK_ROPE = key_head_dim("qk_rope_head_dim")

MODELS: dict[str, dict[str, RopeModel | AlibiModel]] = {
    "llama": {"rope": _llama_like("llama", "Llama", defaults=_sizes(4096, 32, 2048))},
    "mistral": {"rope": _llama_like("mistral", "Mistral", defaults=_sizes(4096, 32, 131072))},
    "mixtral": {
        "rope": _llama_like(
            "mixtral", "Mixtral", defaults=_sizes(4096, 32, 131072), default_theta=1_000_000.0
        )
    },
    "qwen2": {"rope": _llama_like("qwen2", "Qwen2", defaults=_sizes(4096, 32, 32768))},
    "qwen2_moe": {"rope": _llama_like("qwen2_moe", "Qwen2Moe", defaults=_sizes(2048, 16, 32768))},
    "qwen3": {"rope": _llama_like("qwen3", "Qwen3", defaults=_sizes(4096, 32, 32768, head_dim=128))},
    "qwen3_moe": {"rope": _llama_like("qwen3_moe", "Qwen3Moe", defaults=_sizes(2048, 32, 32768))},
    "phi": {"rope": _llama_like("phi", "Phi", defaults=_sizes(2048, 32, 2048), partial_default=0.5, **_NEOX)},
    # Phi3Config renames legacy "su" and "yarn" to longrope, and its top-level
    # original_max_position_embeddings (class default 4096) overrides the one inside.
    "phi3": {
        "rope": _llama_like(
            "phi3",
            "Phi3",
            defaults=_sizes(3072, 32, 4096, original_max_position_embeddings=4096),
            type_aliases={"su": "longrope", "yarn": "longrope"},
            **_NEOX,
        )
    },
    "phimoe": {
        "rope": PhimoeRope(
            source="models/phimoe/modeling_phimoe.py (PhimoeRotaryEmbedding)",
            defaults=_sizes(4096, 32, 131072),
            default_theta=1_000_000.0,
        )
    },
    "gemma": {"rope": _llama_like("gemma", "Gemma", defaults=_sizes(3072, 16, 8192, head_dim=256))},
    "gemma2": {"rope": _llama_like("gemma2", "Gemma2", defaults=_sizes(2304, 8, 8192, head_dim=256))},
    "gemma3_text": {
        "rope": PerLayerTypeRope(
            source="models/gemma3/modeling_gemma3.py (Gemma3RotaryEmbedding)",
            defaults=_sizes(2304, 8, 131072, head_dim=256),
        )
    },
    # GPTNeoXConfig reads θ from rotary_emb_base and the fraction from rotary_pct (default 0.25)
    "gpt_neox": {
        "rope": _llama_like(
            "gpt_neox",
            "GPTNeoX",
            defaults=_sizes(6144, 64, 2048),
            theta_key="rotary_emb_base",
            partial_key="rotary_pct",
            partial_default=0.25,
            **_NEOX,
        )
    },
    "gptj": {
        "rope": FixedTableRope(
            source="models/gptj/modeling_gptj.py (GPTJRotaryEmbedding, create_sinusoidal_positions)",
            aliases={
                "hidden_size": "n_embd",
                "num_attention_heads": "n_head",
                "max_position_embeddings": "n_positions",
            },
            defaults=_sizes(4096, 16, 2048, rotary_dim=64),
            layout=INTERLEAVED,
        )
    },
    # CodeGen's rotary embedding and attention are GPT-J's (create_sinusoidal_positions, rotary_dim)
    "codegen": {
        "rope": FixedTableRope(
            source="models/codegen/modeling_codegen.py (CodeGenRotaryEmbedding, create_sinusoidal_positions)",
            aliases={
                "hidden_size": "n_embd",
                "num_attention_heads": "n_head",
                "max_position_embeddings": "n_positions",
            },
            defaults=_sizes(4096, 16, 2048, rotary_dim=64),
            layout=INTERLEAVED,
        )
    },
    "stablelm": {
        "rope": _llama_like(
            "stablelm", "StableLm", defaults=_sizes(2560, 32, 4096), partial_default=0.25, **_NEOX
        )
    },
    "starcoder2": {"rope": _llama_like("starcoder2", "Starcoder2", defaults=_sizes(3072, 24, 4096))},
    "olmo": {"rope": _llama_like("olmo", "Olmo", defaults=_sizes(4096, 32, 2048))},
    "olmo2": {"rope": _llama_like("olmo2", "Olmo2", defaults=_sizes(4096, 32, 2048))},
    # CohereRotaryEmbedding: repeat_interleave(freqs, 2) instead of cat -> pairs (2k, 2k+1)
    "cohere": {
        "rope": _llama_like(
            "cohere", "Cohere", defaults=_sizes(8192, 64, 8192), default_theta=500_000.0, layout=INTERLEAVED
        )
    },
    # DeepseekV2RotaryEmbedding returns polar(1, freqs) (half width, complex); apply_rotary_emb
    # pairs (2k, 2k+1) through view_as_complex: interleaved
    "deepseek_v2": {
        "rope": _llama_like(
            "deepseek_v2",
            "DeepseekV2",
            defaults=_sizes(4096, 32, 2048, qk_rope_head_dim=64),
            head_dim=_QK_ROPE,
            layout=INTERLEAVED,
        )
    },
    # DeepseekV3RotaryEmbedding returns Llama's half-split cos/sin; with rope_interleave the
    # attention de-interleaves q and k itself (apply_rotary_pos_emb_interleave)
    "deepseek_v3": {
        "rope": _llama_like(
            "deepseek_v3",
            "DeepseekV3",
            defaults=_sizes(7168, 128, 4096, qk_rope_head_dim=64),
            head_dim=_QK_ROPE,
        )
    },
    "granite": {"rope": _llama_like("granite", "Granite", defaults=_sizes(4096, 32, 2048))},
    "falcon": {
        "rope": FalconRope(
            source="models/falcon/modeling_falcon.py (FalconRotaryEmbedding)",
            aliases={"hidden_size": "n_embed"},
            defaults=_sizes(4544, 71, 2048),
            head_dim=split_head_dim,
        ),
        # build_alibi_tensor (Falcon's copy casts the slopes to bfloat16; posenc's are exact)
        "alibi": AlibiModel(
            source="models/falcon/modeling_falcon.py (build_alibi_tensor)",
            defaults={"num_attention_heads": 71},
            uses=_falcon_uses,
        ),
    },
    "bloom": {
        "alibi": AlibiModel(
            source="models/bloom/modeling_bloom.py (build_alibi_tensor, _get_alibi_slopes)",
            aliases={"num_attention_heads": "n_head"},
            defaults={"num_attention_heads": 8},
        )
    },
    "mpt": {
        "alibi": AlibiModel(
            source="models/mpt/modeling_mpt.py (build_mpt_alibi_tensor)",
            aliases={"num_attention_heads": "n_heads"},
            defaults={"num_attention_heads": 16},
            uses=_mpt_uses,
            max_bias=_mpt_max_bias,
        )
    },
}


# One config per family for the docs (Llama 3.1 8B's and MPT-7B's positional keys, as published).
EXAMPLES = {
    "rope": {
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
    "alibi": {
        "model_type": "mpt",
        "d_model": 4096,
        "n_heads": 32,
        "attn_config": {"alibi": True, "alibi_bias_max": 8},
    },
}


MODELS.update(vision.MODELS)
EXAMPLES.update(vision.EXAMPLES)
# the fixed tables' records (fixed.py): model type -> {family: record}
FIXED: dict[str, dict] = {}
for _family, _records in (("t5-buckets", buckets.BUCKETS), ("sinusoidal", sinusoidal.SINUSOIDAL)):
    for _mt, _record in _records.items():
        FIXED.setdefault(_mt, {})[_family] = _record
MODELS.update(FIXED)
EXAMPLES.update({"t5-buckets": buckets.EXAMPLE, "sinusoidal": sinusoidal.EXAMPLE})
# family -> the layer_type its example needs
EXAMPLE_LAYER_TYPES = {"t5-buckets": buckets.EXAMPLE_LAYER_TYPE}
# diffusers configs: by _class_name; timm configs: by the architecture (the registered model name)
CLASSES: dict[str, dict] = {}  # _class_name -> {family: record}: a class may carry two (OmniGen)
for _records in (vision.CLASSES, diffusers_rope.CLASSES, diffusers_grid.CLASSES):
    for _name, _by in _records.items():
        CLASSES.setdefault(_name, {}).update(_by)
ARCHITECTURES = timm_vit.ARCHITECTURES
# the key a config names its model by, and the records that key reads (model_type when none is present)
BY_KEY = {"model_type": MODELS, "_class_name": CLASSES, "architecture": ARCHITECTURES}

# The model types above are read by records written for them; every other rotary model type of
# transformers is read by the shared reading with the facts engine/models/zoo.json holds for it
# (generated from transformers' own classes by tests/tools/hf_zoo.py).
HAND_WRITTEN = frozenset(MODELS)
ZOO = json.loads((pathlib.Path(__file__).with_name("zoo.json")).read_text())
UNREAD: dict[str, str] = ZOO["unread"]  # rotary model types posenc does not read, and why


def _zoo_record(row: dict) -> RopeModel:
    row = {**row, "text_path": tuple(row["text_path"])}
    key = row.pop("head_dim_key", None)
    if key is not None:
        row["head_dim"] = key_head_dim(key)
    return RopeModel(**row)


for _mt, _row in ZOO["models"].items():
    MODELS.setdefault(_mt, {})["rope"] = _zoo_record(_row)


def supported(family: str) -> list[str]:
    """The model types (and diffusers classes) whose positions are of ``family``, as the docs list them."""
    return [t for records in BY_KEY.values() for t, by in records.items() if family in by]


def derive(family: str, config: Any, layer_type: Any = None, grid: Any = None) -> Derived:
    """The spec fields a model config gives ``family`` (SpecError at ``hf_config...``); a vision or
    video model's token ``grid`` (models/grid.py) gives its positions too."""
    config = require_object(config, LOC)
    if layer_type is not None and not isinstance(layer_type, str):
        raise SpecError(("layer_type",), f"must be a string, got {json_repr(layer_type)}", "string_type")
    names = supported(family)
    if not names:
        given = sorted({f for records in BY_KEY.values() for by in records.values() for f in by})
        raise SpecError(LOC, f"model configs give {', '.join(given)} specs, not {family}")
    key = next((k for k in BY_KEY if k in config), "model_type")
    mt = config.get(key)
    entry = BY_KEY[key].get(mt, {}) if isinstance(mt, str) else {}
    if family not in entry:
        if mt is None:
            why = "field required"
        elif entry:
            why = f"{json_repr(mt)} models have {' and '.join(entry)} positions, not {family}"
        elif isinstance(mt, str) and mt in UNREAD:
            why = f"{json_repr(mt)} is a rotary model type posenc does not read ({UNREAD[mt]})"
        elif isinstance(mt, str) and mt in diffusers_grid.UNREAD:
            why = f"{json_repr(mt)} is a diffusers class posenc does not read ({diffusers_grid.UNREAD[mt]})"
        elif isinstance(mt, str) and mt in diffusers_rope.UNREAD:
            why = f"{json_repr(mt)} is a rotary diffusers class posenc does not read ({diffusers_rope.UNREAD[mt]})"
        elif isinstance(mt, str) and mt in timm_vit.UNREAD:
            why = f"{json_repr(mt)} is a rotary timm model posenc does not read ({timm_vit.UNREAD[mt]})"
        elif key == "architecture":
            example = timm_vit.EXAMPLE["architecture"]
            why = f"{json_repr(mt)} is not a timm model posenc reads ({len(ARCHITECTURES)}, e.g. {example})"
        else:
            why = f"{json_repr(mt)} is not a model type posenc knows"
        shown = ", ".join(names) if len(names) <= 40 else f"{', '.join(names[:8])} and {len(names) - 8} more"
        raise SpecError(
            (*LOC, key),
            f"{why}; send the {family} spec fields instead of hf_config, or a config "
            f"of a model type posenc reads (GET /v1/models): {shown}",
            "missing" if mt is None else "value_error",
        )
    return model_grid.derive(entry[family], config, layer_type, grid)


@functools.cache
def catalogue() -> bytes:
    """``GET /v1/models``: every model type (and diffusers class) hf_config reads, with the file
    each family's reading follows, and the rotary model types it does not read, with the reason."""

    def sources(by):
        return {family: record.source for family, record in by.items()}

    return json.dumps(
        {
            "transformers": ZOO["transformers"],
            "model_types": {mt: sources(by) for mt, by in sorted(MODELS.items())},
            "diffusers_classes": {name: sources(by) for name, by in sorted(CLASSES.items())},
            "diffusers_learned_not_read": dict(sorted(diffusers_grid.UNREAD.items())),
            "diffusers_rotary_not_read": dict(sorted(diffusers_rope.UNREAD.items())),
            "timm": timm_vit.ZOO["timm"],
            "timm_architectures": {name: sources(by) for name, by in sorted(ARCHITECTURES.items())},
            "timm_not_read": dict(sorted(timm_vit.UNREAD.items())),
            "not_read": dict(sorted(UNREAD.items())),
        }
    ).encode()
