"""The shared reading of a model's ``config.json`` (docs/reference.md, "Named tables and model configs"):
posenc reads the config the way transformers 5.25's code for its ``model_type`` does.

A record (``RopeModel``, ``AlibiModel``) turns a config into ``Derived(fields, origin)``: ``fields``
are the family's ordinary spec fields (rope: head_dim, rope_theta, partial_rotary_factor,
rope_scaling, max_position_embeddings, original_max_position_embeddings, layout; alibi: num_heads,
max_bias), which the family's own parser then validates; ``origin`` maps each of them to where it
came from in the request (``("hf_config", "rotary_pct")``), so an invalid value is refused at the
config key the user wrote (``Derived.relocate``).

The record of each model type, and ``derive`` which picks it by ``model_type``, are in
``posenc.engine.models.registry``; this module holds the reading that most models share:

- a config key is read as transformers' config class reads it: under its own name or its
  ``attribute_map`` alias (GPT-J's ``n_embd`` is ``hidden_size``), the class's default when absent
  or null (``Config``);
- the rope parameters come from ``rope_scaling`` (transformers 4) or ``rope_parameters``
  (transformers 5), the first if both (``convert_rope_params_to_dict``); inside them ``type`` is
  ``rope_type``; ``rope_theta`` and ``partial_rotary_factor`` inside win over the top-level keys,
  which win over the class defaults (``setdefault`` in ``convert_rope_params_to_dict`` and
  ``standardize_rope_params``, transformers ``modeling_rope_utils.py``);
- a top-level ``original_max_position_embeddings`` overrides the one inside for yarn, llama3 and
  longrope (``standardize_rope_params``, which every rope function calls again once the config's
  own attributes are set);
- keys the rope type does not read are ignored, as transformers' functions ignore them;
- ``head_dim`` is ``head_dim`` (or the class default), else ``hidden_size // num_attention_heads``;
- Llama's ``compute_default_rope_parameters`` (and every model that copies it) ignores
  ``partial_rotary_factor``: the default type then rotates the whole head. GPT-NeoX, Phi, Phi-3
  and StableLM honour it (``default_partial``); every other rope type honours it everywhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ..core.errors import SpecError
from ..core.fields import is_int, json_repr, req_int, require_object
from ..tables import rope_axes as axes
from ..tables.rope_spec import HALF_SPLIT
from ..tables.rope_types import ROPE_TYPES

LOC = ("hf_config",)
PER_HEAD = "/head_dim"  # a legacy key that holds a rotary width, not a fraction


@dataclasses.dataclass
class Derived:
    fields: dict  # the family's spec fields
    origin: dict  # spec field -> its location in the request

    def relocate(self, e: SpecError) -> SpecError:
        """The family parser's error, moved to the config key the value came from."""
        head = self.origin.get(e.loc[0], LOC) if e.loc else LOC
        rest = e.loc[1:] if e.loc and e.loc[0] in self.origin else e.loc
        return SpecError((*head, *rest), e.msg, e.kind)


class Config:
    """A config.json as transformers' config class reads it: ``aliases`` is the class's
    ``attribute_map`` (canonical name -> the key the config stores), ``defaults`` the class's
    defaults of the keys posenc reads; a null value counts as absent."""

    def __init__(self, raw: Mapping, aliases: Mapping = {}, defaults: Mapping = {}):
        self.raw, self.aliases, self.defaults = raw, aliases, defaults

    def key(self, name: str) -> str:
        """The key a value is (or would be) read from."""
        stored = self.aliases.get(name)
        if stored is not None and self.raw.get(stored) is not None:
            return stored
        if self.raw.get(name) is not None or stored is None:
            return name
        return stored

    def get(self, name: str, default: Any = None) -> Any:
        v = self.raw.get(self.key(name))
        if v is None:
            v = self.defaults.get(name, default)
        return v

    def loc(self, name: str) -> tuple:
        return (*LOC, self.key(name))

    def int(self, name: str, lo: int = 1) -> int:
        k = self.key(name)
        v = req_int({k: self.get(name)}, k, LOC, lo=lo, required=False)
        if v is None:
            raise SpecError(
                self.loc(name), "field required (this model type has no default for it)", "missing"
            )
        return v

    def block(self, name: str) -> Mapping | None:
        v = self.raw.get(self.key(name))
        return None if v is None else require_object(v, self.loc(name))


def key_head_dim(key: str) -> Callable[[Config], tuple]:
    """The rotary head width is the config's ``key`` (DeepSeek-style attention: qk_rope_head_dim,
    which the config class copies into head_dim)."""
    return lambda cfg: (cfg.int(key), cfg.loc(key))


def standard_head_dim(cfg: Config) -> tuple[int, tuple]:
    """``getattr(config, "head_dim", None) or hidden_size // num_attention_heads`` (Llama)."""
    hd = cfg.get("head_dim")
    if hd is not None:
        if not is_int(hd) or hd < 1:
            raise SpecError(cfg.loc("head_dim"), f"must be a positive integer, got {json_repr(hd)}")
        return hd, cfg.loc("head_dim")
    return split_head_dim(cfg)


def split_head_dim(cfg: Config) -> tuple[int, tuple]:
    """``hidden_size // num_attention_heads`` (Falcon's only rule)."""
    return cfg.int("hidden_size") // cfg.int("num_attention_heads"), cfg.loc("hidden_size")


@dataclasses.dataclass(frozen=True)
class RopeModel:
    """How one model type's config gives its RoPE (the reading most models share; see the module
    docstring). Fields are transformers' facts for that model type."""

    source: str  # the transformers file whose code this follows
    defaults: Mapping = dataclasses.field(default_factory=dict)  # class defaults of the keys read
    aliases: Mapping = dataclasses.field(default_factory=dict)  # attribute_map
    default_theta: float = 10000.0  # RotaryEmbeddingConfigMixin.default_theta
    theta_key: str = "rope_theta"  # the top-level θ (GPT-NeoX: rotary_emb_base)
    partial_key: str = "partial_rotary_factor"  # the top-level fraction (GPT-NeoX: rotary_pct)
    partial_default: float | None = None  # BC default of the fraction (Phi 0.5, StableLM 0.25)
    default_partial: bool = False  # compute_default_rope_parameters honours the fraction
    layout: str = HALF_SPLIT  # the pairing of the cos/sin its rotary embedding returns
    head_dim: Callable[[Config], tuple] = standard_head_dim
    type_aliases: Mapping = dataclasses.field(default_factory=dict)  # model-specific rope_type renames
    # The config class's own rope_parameters when a config gives none (flat, or one per layer type):
    # what transformers' __post_init__ fills in. A top-level θ still wins over its rope_theta.
    default_rope: Mapping | None = None
    # Where the text model's config sits in a composite config (("text_config",), ("thinker_config",
    # "text_config")); () when the config is the text config itself. A config sent without that
    # level is read as the text config (its model_type says which).
    text_path: tuple = ()
    # Multi-axis RoPE (Qwen-VL's mrope_section in the rope parameters): None when the rotary class
    # has one axis, else whether it deals the frequencies interleaved (Qwen3-VL) or in sections.
    mrope_interleaved: bool | None = None
    mrope_default: tuple | None = None  # the class's own mrope_section when the config gives none
    # A dealing of its own (rope_axes.DEALINGS: ERNIE-4.5-VL's "paired", NeoMME's "alternating",
    # Qwen4-Exp's "interleaved" over fewer columns than d/2): the section becomes ``mrope_axes``.
    mrope_dealing: str | None = None
    # A heterogeneous config (transformers' per_layer_config: Gemma 4's full-attention layers have
    # their own head_dim): a layer type is read with the overrides of its first layer.
    per_layer: bool = False
    # What the rotary class hands its attention, for the torch drop-in: (cos, sin) at full width
    # (None), at half width ("half", GPT-OSS), or complex freqs_cis ("complex", Llama 4).
    returns: str | None = None
    # The config class computes head_dim in its __post_init__ by a rule of its own (not hidden_size //
    # num_attention_heads): a config without head_dim is refused rather than guessed.
    head_dim_saved: bool = False
    # The top-level keys its config class's convert_rope_params_to_dict reads into the rope
    # parameters (transformers 4 spellings): layer type ("" when one block) -> {rope field: key};
    # a key ending in "/head_dim" is a rotary width (MiniMax-M2's rotary_dim). ModernBERT:
    # {"full_attention": {"rope_theta": "global_rope_theta"}, "sliding_attention": {...}}.
    legacy: Mapping = dataclasses.field(default_factory=dict)

    def config(self, raw: Mapping) -> Config:
        return Config(raw, self.aliases, self.defaults)

    def check(self, cfg: Config) -> None:
        """Refuse a config of this model type whose positions are not rotary (Falcon with alibi)."""

    def rope_block(self, cfg: Config, layer_type: str | None) -> tuple[dict, tuple]:
        """(the rope parameters block, its location): rope_scaling, else rope_parameters, else the
        class default; a block of one entry per layer type gives the entry ``layer_type`` names."""
        for name in ("rope_scaling", "rope_parameters"):
            block = cfg.block(name)
            if block:
                if per_layer_type(block):
                    return layer_entry(block, cfg.loc(name), layer_type)
                check_flat_layer_type(cfg, layer_type)
                return dict(block), cfg.loc(name)
        where = cfg.loc("rope_parameters")
        if self.default_rope and per_layer_type(self.default_rope):
            block, where = layer_entry(self.default_rope, where, layer_type)
        else:
            check_flat_layer_type(cfg, layer_type)
            block = dict(self.default_rope or {})
        # the class default's θ and fraction yield to the config's top-level keys (setdefault)
        return {k: v for k, v in block.items() if k not in ("rope_theta", "partial_rotary_factor")}, where

    def derive(self, raw: Mapping, layer_type: str | None) -> Derived:
        raw, where_text = self.text_config(raw)
        d = self.derive_text(raw, layer_type)
        if where_text != LOC:  # the text config's keys sit under text_path
            d.origin = {
                k: (*where_text, *v[len(LOC) :]) if v[: len(LOC)] == LOC else v for k, v in d.origin.items()
            }
        return d

    @staticmethod
    def config_gives_rope(cfg: Config) -> bool:
        return bool(cfg.block("rope_scaling") or cfg.block("rope_parameters"))

    def default_entry(self, layer_type: str | None) -> Mapping:
        """The class default rope parameters of ``layer_type`` (of the one block when flat)."""
        rp = self.default_rope or {}
        if per_layer_type(rp):
            return rp.get(layer_type) or {}
        return rp

    def layer_names(self, raw: Mapping) -> list | None:
        """The layer types a per-layer-type config has rope parameters for (None when flat)."""
        cfg = self.config(self.text_config(raw)[0])
        for name in ("rope_scaling", "rope_parameters"):
            block = cfg.raw.get(cfg.key(name))
            if isinstance(block, Mapping) and block:
                return [k for k, v in block.items() if v is not None] if per_layer_type(block) else None
        rp = self.default_rope
        return [k for k, v in rp.items() if v is not None] if rp and per_layer_type(rp) else None

    def text_config(self, raw: Mapping) -> tuple[Mapping, tuple]:
        """(the text model's config, its location) in a composite config. Each composite class
        builds the text config it leaves out in a way of its own, so a composite config without it
        is refused, naming the key (the text config can also be sent by itself)."""
        where = LOC
        for key in self.text_path:
            sub = raw.get(key)
            where = (*where, key)
            if sub is None:
                raise SpecError(
                    where,
                    "field required: the text model's config, which holds its rope "
                    "parameters (or send that config by itself)",
                    "missing",
                )
            raw = require_object(sub, where)
        return raw, where

    def derive_text(self, raw: Mapping, layer_type: str | None) -> Derived:
        if self.per_layer and layer_type is not None:
            raw = layer_overrides(raw, layer_type)
        cfg = self.config(raw)
        self.check(cfg)
        block, where = self.rope_block(cfg, layer_type)
        if self.head_dim_saved and cfg.get("head_dim") is None:
            raise SpecError(
                cfg.loc("head_dim"),
                "field required: this model's config class computes it by a rule "
                "of its own; send the config as transformers saves it",
                "missing",
            )
        head_dim, hd_loc = self.head_dim(cfg)
        fields = {"head_dim": head_dim, "layout": self.layout}
        origin = {"head_dim": hd_loc, "rope_scaling": where, "layout": (*LOC, "model_type")}
        section = block.get("mrope_section")
        section = list(self.mrope_default) if section is None and self.mrope_default else section
        if self.mrope_interleaved is not None and section is not None and self.mrope_dealing is None:
            fields["mrope_section"] = section
            origin["mrope_section"] = (*where, "mrope_section")
            if self.mrope_interleaved:
                fields["mrope_interleaved"] = True
                origin["mrope_interleaved"] = (*LOC, "model_type")
        theta_key, theta_default = self.theta_fallback(layer_type)
        given = self.config_gives_rope(cfg)
        entry = {} if given else self.default_entry(layer_type)  # the class's own rope parameters
        top = cfg.raw if theta_key is not None else {}  # no top-level θ for this layer type
        theta, origin["rope_theta"] = first(
            ("rope_theta", block, where),
            (theta_key or "rope_theta", top, LOC),
            default=entry.get("rope_theta", theta_default),
        )
        fields["rope_theta"] = theta
        pkey, per_head = self.partial_source(layer_type)
        top = cfg.raw if pkey is not None else {}
        prf, origin["partial_rotary_factor"] = first(
            ("partial_rotary_factor", block, where),
            (pkey or "partial_rotary_factor", top, LOC),
            default=entry.get("partial_rotary_factor", self.partial_default),
        )
        if per_head and block.get("partial_rotary_factor") is None and cfg.raw.get(pkey) is not None:
            if not is_int(prf) or prf < 2:
                raise SpecError((*LOC, pkey), f"must be an integer >= 2, got {json_repr(prf)}")
            prf = prf / head_dim  # a rotary width (MiniMax-M2's rotary_dim): its fraction
        rope_type = self.rope_type(block)
        if rope_type == "default" and not self.default_partial:
            prf = None  # Llama's default frequencies span the whole head
        if prf is not None:
            fields["partial_rotary_factor"] = prf
        rt = ROPE_TYPES.get(rope_type) if isinstance(rope_type, str) else None
        scaling = {"rope_type": rope_type}
        if rt is not None:  # an unknown type goes on alone, for the parser to name
            scaling.update((k, v) for k, v in block.items() if k in rt.keys and v is not None)
            if rt.uses_original and cfg.get("original_max_position_embeddings") is not None:
                fields["original_max_position_embeddings"] = cfg.get("original_max_position_embeddings")
                origin["original_max_position_embeddings"] = cfg.loc("original_max_position_embeddings")
        fields["rope_scaling"] = scaling
        if cfg.get("max_position_embeddings") is not None:
            fields["max_position_embeddings"] = cfg.get("max_position_embeddings")
            origin["max_position_embeddings"] = cfg.loc("max_position_embeddings")
        if self.mrope_dealing is not None:
            self.deal(fields, origin, section, (*where, "mrope_section"), rt)
        return self.finish(cfg, block, Derived(fields, origin))

    def deal(self, fields: dict, origin: dict, section, loc: tuple, rt) -> None:
        """``mrope_axes`` from the section by the class's own dealing, at the rotary width the
        spec will have (left out when head_dim, the fraction or the type are not valid: the
        parser names them)."""
        head, prf = fields["head_dim"], fields.get("partial_rotary_factor", 1.0)
        if rt is None or not is_int(head) or isinstance(prf, bool) or not isinstance(prf, (int, float)):
            return
        h = (rt.width(head, prf) + 1) // 2
        if section is None and self.mrope_dealing != "alternating":
            raise SpecError(loc, "field required: how this multi-axis model deals its frequencies", "missing")
        try:
            if section is not None:
                section = axes.parse_int_list({"mrope_section": section}, "mrope_section", 1)
            fields["mrope_axes"] = axes.dealt(self.mrope_dealing, section, h) if h >= 1 else []
        except SpecError as e:
            raise SpecError((*loc, *e.loc[1:]), e.msg, e.kind) from None
        origin["mrope_axes"] = loc

    def theta_fallback(self, layer_type: str | None) -> tuple[str | None, float]:
        """(top-level key, class default) of θ when the rope block holds none; a config class
        with keys of its own for it (``legacy``) reads those alone (None: none for this layer type)."""
        if self.legacy:
            return self.legacy.get(layer_type or "", {}).get("rope_theta"), self.default_theta
        return self.theta_key, self.default_theta

    def partial_source(self, layer_type: str | None) -> tuple[str | None, bool]:
        """(top-level key of the fraction, whether it holds a rotary width to divide by head_dim)."""
        key = (
            self.legacy.get(layer_type or "", {}).get("partial_rotary_factor")
            if self.legacy
            else self.partial_key
        )
        if key is not None and key.endswith(PER_HEAD):
            return key[: -len(PER_HEAD)], True
        return key, False

    def rope_type(self, block: Mapping) -> Any:
        t = block.get("rope_type")
        t = block.get("type", "default") if t is None else t
        t = "default" if t is None else t
        return self.type_aliases.get(t, t) if isinstance(t, str) else t

    def finish(self, cfg: Config, block: Mapping, d: Derived) -> Derived:
        """A model type's last word on the derived fields (default: none)."""
        return d


def first(*sources, default=None) -> tuple[Any, tuple]:
    """The first present (non-null) value among (key, mapping, location) sources: transformers'
    chain of ``setdefault``s. Returns (value, location)."""
    for key, obj, where in sources:
        if obj.get(key) is not None:
            return obj[key], (*where, key)
    return default, (*sources[-1][2], sources[-1][0])


def per_layer_type(block: Mapping) -> bool:
    """transformers 5's nested rope_parameters: one block per layer type (Gemma 3, GPT-OSS...); a
    null one is a layer type without rotary embedding (Beam's and Ergo's NoPE full attention)."""
    vals = list(block.values())
    return any(isinstance(v, Mapping) for v in vals) and all(
        isinstance(v, Mapping) or v is None for v in vals
    )


def layer_entry(block: Mapping, where: tuple, layer_type: str | None) -> tuple[dict, tuple]:
    """The entry of a per-layer-type block that ``layer_type`` names (SpecError at layer_type)."""
    names = ", ".join(block)
    if layer_type is None:
        raise SpecError(
            ("layer_type",), f"required: this config has rope parameters per layer type ({names})", "missing"
        )
    if layer_type not in block:
        raise SpecError(("layer_type",), f"must be one of {names}, got {json_repr(layer_type)}")
    if block[layer_type] is None:
        rotary = ", ".join(k for k, v in block.items() if v is not None)
        raise SpecError(
            ("layer_type",),
            f"{layer_type} layers have no rotary embedding (null rope parameters); ask for {rotary}",
        )
    return dict(require_object(block[layer_type], (*where, layer_type))), (*where, layer_type)


def layer_overrides(raw: Mapping, layer_type: str) -> Mapping:
    """The config as its first layer of ``layer_type`` sees it: ``per_layer_config`` maps layer
    indices (as saved: "05") to the attributes that differ for that layer (HeterogeneousConfigMixin)."""
    per, types = raw.get("per_layer_config"), raw.get("layer_types")
    if per is None or types is None:
        missing = "per_layer_config" if per is None else "layer_types"
        raise SpecError(
            (*LOC, missing),
            "field required: this model's layers differ by type (their head_dim); "
            "send the config as transformers saves it",
            "missing",
        )
    per = require_object(per, (*LOC, "per_layer_config"))
    if not isinstance(types, list) or layer_type not in types:
        raise SpecError(
            ("layer_type",), f"names no layer of this config's layer_types, got {json_repr(layer_type)}"
        )
    first = types.index(layer_type)
    for key, over in per.items():
        if str(key).lstrip("0") == str(first).lstrip("0"):
            return {**raw, **require_object(over, (*LOC, "per_layer_config", key))}
    return raw


def check_flat_layer_type(cfg: Config, layer_type: str | None) -> None:
    """One rope block serves every layer: a layer_type may only name one of the config's own."""
    if layer_type is not None and layer_type not in (cfg.raw.get("layer_types") or ()):
        raise SpecError(
            ("layer_type",),
            "this config has one set of rope parameters for every layer; "
            "layer_type is only for a per-layer-type rope_parameters",
        )


@dataclasses.dataclass(frozen=True)
class AlibiModel:
    """How one model type's config gives its ALiBi biases: heads, and MPT's alibi_bias_max."""

    source: str
    defaults: Mapping = dataclasses.field(default_factory=dict)
    aliases: Mapping = dataclasses.field(default_factory=dict)
    # (whether this config's positions are alibi, the key that says so)
    uses: Callable[[Config], tuple] = lambda cfg: (True, ())
    # (max_bias, where it came from): the paper's 8 unless the config says otherwise (MPT)
    max_bias: Callable[[Config], tuple] = lambda cfg: (8.0, (*LOC, "model_type"))

    def derive(self, raw: Mapping, layer_type: str | None) -> Derived:
        cfg = Config(raw, self.aliases, self.defaults)
        if layer_type is not None:
            raise SpecError(("layer_type",), "ALiBi configs have no layer types")
        used, where = self.uses(cfg)
        if not used:
            raise SpecError(where, "this config does not use ALiBi (its positions are rotary or learned)")
        max_bias, where = self.max_bias(cfg)
        return Derived(
            {"num_heads": cfg.int("num_attention_heads"), "max_bias": max_bias},
            {"num_heads": cfg.loc("num_attention_heads"), "max_bias": where},
        )
