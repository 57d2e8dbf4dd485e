"""posenc.torch: a transformers model's rotary embedding, read from posenc's tables.

    from posenc.torch import RotaryEmbedding
    model.model.rotary_emb = RotaryEmbedding(model.config)

``RotaryEmbedding(config, device=None)`` is a drop-in for the ``rotary_emb`` of every model type
posenc reads configs of (docs/models.md): ``forward(x, position_ids)`` returns what that model's
own ``*RotaryEmbedding`` returns, ``(cos, sin)`` of shape [batch, seq, rotary width] in
``x.dtype`` on ``x.device`` with ``attention_scaling`` applied, in the pairing layout its attention
expects (GPT-J's half-width ``(sin, cos)`` and DeepSeek-V2's complex ``freqs_cis`` too); a config
with rope parameters per layer type (Gemma 3) takes ``forward(x, position_ids, layer_type)``.

Where the rows come from: when a posenc engine runs (its manifest is in ``shm_dir`` under
``namespace``), the shared half-width tables, mapped read-only (the engine builds a table it does
not have yet, once, for every process); otherwise a table of the same bits built here from
posenc's float64 reference, grown as positions grow. Either way a forward is one gather that
writes the full-width rows straight into a freshly allocated output (posenc's ``rope_expand``
kernel on CPU; one ``index_select`` over a zero-stride view on other devices, with the table copied
to that device once). Rows past a table, and dynamic NTK frequencies past
max_position_embeddings, are computed exactly (float64, rounded once). ``source`` says which.

The answers are exact where transformers' own are float32 (its angles p · inv_freq are float32
products, off by about 3–8e-8 · p), so a model's logits move by that rounding: measured within
7.7e-7 of the stock model's in float32 at positions < 64 and 4.2e-6 at positions ≈ 9,000, with the
same greedy tokens; not bit-identical (docs/reference.md, "Precision against transformers").

Dynamic NTK and LongRoPE follow the sequence length as transformers does: LongRoPE picks its
short or long factors from max(position_ids) + 1 at every call; dynamic NTK keeps transformers'
state (the frequencies grow with the longest sequence seen and go back to the original ones once
a sequence is shorter than max_position_embeddings, ``dynamic_rope_update``).

Qwen2-VL, Qwen2.5-VL and Qwen3-VL text models (multimodal RoPE, ``mrope_section``), and those
with a dealing of their own (``mrope_axes``: ERNIE-4.5-VL, Qwen3-Omni, Qwen4-Exp; NeoMME's two
axes) take ``position_ids`` of shape [k, batch, seq] (t, h, w; [batch, seq] means every axis at that
position, as their rotary classes expand it): each column is gathered from the same table at its
axis's position (on the CPU; the rows then move to ``x.device``).

``TimmRope(architecture, feat_shape)`` stands for a timm ViT's ``rope`` module (``model.rope =
TimmRope(name, model.rope.feat_shape)``): ``get_embed(shape)`` is timm's ``[sin | cos]`` of the patch
grid, from posenc's answer for that model and ``grid`` (docs/reference.md, "Token grids").

``DiffusersPosEmbed(model)`` stands for the positional module of the diffusers transformers whose
pipelines hand them token ids (Flux and its copies: ``DIFFUSERS_POS_EMBED``): ``forward(ids)`` is
the module's ``(cos, sin)``, from posenc's answer for the class's config and those ids.

``SinusoidalEmbedding(d_model, layout=...)`` gives fixed sinusoidal position embeddings
(``forward(position_ids)`` -> [..., d_model]), a drop-in for DistilBERT's
``embeddings.position_embeddings`` (interleaved) and the values of Marian's (concat).

torch is an optional extra (``pip install 'posenc[torch]'``); nothing else in posenc imports it.
"""

from __future__ import annotations

try:
    import torch
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError("posenc.torch needs torch: pip install 'posenc[torch]'") from exc

import sys

import numpy as np

from posenc.engine import kernels
from posenc.engine.answer import pipeline
from posenc.engine.core.dtypes import BFLOAT16, FLOAT16, FLOAT32
from posenc.engine.core.errors import PosencError
from posenc.engine.models import registry
from posenc.engine.reader.client import Client
from posenc.engine.tables import rope as _rope
from posenc.engine.tables import rope_axes as _axes
from posenc.engine.tables import rope_spec as _rope_spec
from posenc.engine.tables import sinusoidal as _sinusoidal

# torch dtype -> the table dtype that serves it (others read float32 tables and cast)
TABLE_DTYPES = {torch.float32: FLOAT32, torch.float16: FLOAT16, torch.bfloat16: BFLOAT16}
LOCAL_ROWS = (4096, 1 << 20)  # a private table starts at, and never grows past, these rows
REUSE_BYTES = 1 << 20  # outputs from this size on reuse the previous call's block when free
# model types whose rotary embedding hands its attention half-width rows instead of full-width
# (cos, sin): model_type -> (what it returns from half-width cos and sin, whether in x.dtype)
HALF_OUTPUTS = {
    "gptj": (lambda cos, sin: (sin, cos), True),  # GPTJRotaryEmbedding
    "codegen": (lambda cos, sin: (sin, cos), False),  # CodeGenRotaryEmbedding (fp32)
    "deepseek_v2": (lambda cos, sin: torch.complex(cos, sin), False),  # polar(1, freqs)·scaling
}
# the zoo's rows say the same of theirs (engine/models/zoo.json "returns")
_RETURNS = {"half": (lambda cos, sin: (cos, sin), True), "complex": HALF_OUTPUTS["deepseek_v2"]}
HALF_OUTPUTS.update(
    {mt: _RETURNS[row["returns"]] for mt, row in registry.ZOO["models"].items() if row.get("returns")}
)
PER_LAYER_TYPES = ("full_attention", "sliding_attention")  # if a per-layer config does not list its own


def _config_dict(config) -> dict:
    if hasattr(config, "to_dict"):
        return config.to_dict()
    if isinstance(config, dict):
        return config
    raise TypeError(
        f"config must be a transformers config or a config.json dict, got {type(config).__name__}"
    )


class _Table:
    """One frequency set's half-width cos/sin tables (numpy, CPU) in one dtype, and copies of them
    on other devices."""

    def __init__(
        self, cos: np.ndarray, sin: np.ndarray, inv64: np.ndarray, scaling: float, source: str, view=None
    ):
        self.cos, self.sin, self.inv64, self.scaling, self.source = cos, sin, inv64, scaling, source
        self.rows = cos.shape[0]
        self.view = view  # keeps a shared mapping alive
        self.on: dict = {}  # device -> (cos, sin) torch tensors

    def device_pair(self, device):
        pair = self.on.get(device)
        if pair is None:
            pair = self.on[device] = tuple(_tensor(a).to(device) for a in (self.cos, self.sin))
        return pair


def _tensor(a: np.ndarray, dtype: str | None = None):
    """A torch tensor over a numpy array (bfloat16 bit patterns come back as torch.bfloat16)."""
    t = torch.from_numpy(a) if a.flags.writeable else torch.from_numpy(a.copy())
    return t.view(torch.bfloat16) if a.dtype == np.uint16 else t


class RotaryEmbedding(torch.nn.Module):
    """A drop-in for a transformers model's ``rotary_emb`` (see the module docstring)."""

    def __init__(
        self,
        config,
        device=None,
        *,
        client: Client | None = None,
        shm_dir: str = "/dev/shm",
        namespace: str = "posenc",
    ):
        super().__init__()
        self.config = config
        self._raw = _config_dict(config)
        self.model_type: str = str(self._raw.get("model_type", ""))
        self.client = client if client is not None else Client(shm_dir, namespace)
        self.specs = self._parse_all()  # layer type (None: the config has one) -> RopeSpec
        for lt, spec in self.specs.items():  # what transformers' modules show, per layer type
            inv, scaling = _rope_spec.frequencies(
                spec, spec.type.seq_len_of(spec, spec.type.stable_variants(spec)[0])
            )
            prefix = "" if lt is None else f"{lt}_"
            setattr(self, f"{prefix}attention_scaling", scaling)
            self.register_buffer(
                f"{prefix}inv_freq", torch.tensor(inv, dtype=torch.float32, device=device), persistent=False
            )
        first = next(iter(self.specs.values()))
        self.rope_type = first.rope_type
        self.max_seq_len_cached = self.original_max_seq_len = first.max_position_embeddings
        self._tables: dict = {}  # (layer type, variant, dtype) -> _Table
        self._dynamic: dict = {}  # layer type -> transformers' max_seq_len_cached
        self._shared: bool | None = None
        self.source: str | None = None  # "shared" or "local" once a table is read
        self._blocks: dict = {}  # (shape, dtype) -> the last large output block

    def _output(self, shape, dtype) -> np.ndarray:
        """The output block of a gather: the previous call's block of this shape when nothing
        holds it any more (no caller's tensor views it), else a new one. Reusing it spares the
        page faults of a fresh multi-MiB allocation (glibc maps and unmaps such blocks on every
        call); a caller that keeps an answer (autograd, a cache) keeps it to itself."""
        if int(np.prod(shape)) * np.dtype(dtype).itemsize < REUSE_BYTES:
            return np.empty(shape, dtype)
        key = (shape, np.dtype(dtype))
        buf = self._blocks.pop(key, None)  # popped: a concurrent call cannot take it too
        if buf is None or sys.getrefcount(buf) > 2:  # 2: this name and getrefcount's argument
            buf = np.empty(shape, dtype)
        self._blocks = {key: buf}  # keep one block: the shape of the latest call
        return buf

    def __getstate__(self):
        """Copies and pickles (copy.deepcopy(model)) take the config, not the mappings: the copy
        attaches to the same engine (or builds its tables) on its first forward."""
        state = dict(self.__dict__, _tables={}, _blocks={}, _shared=None, source=None)
        state["client"] = (self.client.shm_dir, self.client.namespace)
        return state

    def __setstate__(self, state):
        state = dict(state, client=Client(*state["client"]))
        super().__setstate__(state)

    def _parse_all(self) -> dict:
        def parse(layer_type):
            body = {"hf_config": self._raw, "positions": [0]}
            if layer_type is not None:
                body["layer_type"] = layer_type
            return pipeline.parse("rope", body).spec

        try:
            return {None: parse(None)}
        except PosencError as e:  # a per-layer-type config (Gemma 3): one spec per layer type
            if getattr(e, "loc", None) != ("layer_type",):
                raise
        specs = {}
        for lt in dict.fromkeys(self._text_layer_types() or PER_LAYER_TYPES):
            try:
                specs[lt] = parse(lt)
            except PosencError as e:  # a layer type without rope (a linear-attention layer)
                if getattr(e, "loc", None) != ("layer_type",):
                    raise
        if not specs:
            parse(None)  # says what the config lacks
        return specs

    def _text_layer_types(self) -> list | None:
        """The layer types the config has rope parameters for, as hf_config reads it."""
        layer_names = getattr(registry.MODELS.get(self.model_type, {}).get("rope"), "layer_names", None)
        names = layer_names(self._raw) if layer_names is not None else None
        return names or self._raw.get("layer_types")

    # -- which frequencies ---------------------------------------------------------------------
    def _seq_len(self, spec, layer_type, seq_len: int) -> int:
        """The sequence length whose frequencies this call uses: transformers' dynamic state."""
        if spec.rope_type != "dynamic":
            return seq_len
        m = spec.max_position_embeddings
        cached = self._dynamic.get(layer_type, m)
        if seq_len > cached:  # growth: frequencies for this length
            cached = seq_len
        if seq_len < m and cached > m:  # back within M: the original ones
            cached = m
        self._dynamic[layer_type] = cached
        return cached

    def _table(self, spec, layer_type, variant, dtype: str, need: int) -> _Table | None:
        key = (layer_type, variant, dtype)
        t = self._tables.get(key)
        if t is not None and (t.source == "shared" or t.rows >= min(need, LOCAL_ROWS[1])):
            return t
        seq_len = spec.type.seq_len_of(spec, variant)
        inv, scaling = _rope_spec.frequencies(spec, seq_len)
        shown = _rope.FAMILY.spec_json(spec)
        if self._shared is None:
            self._shared = self.client.manifest() is not None
        if self._shared:
            try:
                view = self.client.table("rope", shown, dtype=dtype, seq_len=seq_len)
                t = _Table(view.cos, view.sin, inv, scaling, "shared", view)
            except PosencError:  # engine gone or table too large: local
                self._shared = False
        if t is None or t.source != "shared":
            rows = min(max(LOCAL_ROWS[0], 1 << (max(need, 1) - 1).bit_length()), LOCAL_ROWS[1])
            req = pipeline.parse("rope", {**shown, "positions": [seq_len - 1], "dtype": dtype}, length=rows)
            assert req.table is not None  # a rope request always names its table
            arrays, _ = req.table.build()
            t = _Table(arrays["cos"], arrays["sin"], inv, scaling, "local")
        self._tables[key] = t
        self.source = t.source
        return t

    # -- forward -------------------------------------------------------------------------------
    def forward(self, x, position_ids, layer_type=None):
        spec = self.specs.get(layer_type)
        if spec is None:
            raise ValueError(f"layer_type must be one of {list(self.specs)}, got {layer_type!r}")
        pos = position_ids
        k = _axes.n_axes(spec) if spec.axes_dim is None else None  # multimodal RoPE's axes
        if k is not None:  # Qwen-VL: [3, B, N], or [B, N] for every axis
            pos = pos.expand(k, -1, -1) if pos.ndim == 2 else pos
        hi, lo = int(pos.max()), int(pos.min())
        if lo < 0:
            raise ValueError(f"position_ids must be >= 0, got {lo}")
        seq_len = self._seq_len(spec, layer_type, hi + 1)
        half = HALF_OUTPUTS.get(self.model_type)
        dtype = TABLE_DTYPES.get(x.dtype, FLOAT32) if half is None or half[1] else FLOAT32
        mode = spec.layout if half is None else "half"
        rt = spec.type
        variant = rt.variant(spec, seq_len) if rt.uses_seq_len else None
        if k is not None:
            t = (
                None
                if rt.uses_seq_len and not rt.stores(spec, variant)
                else self._table(spec, layer_type, variant, dtype, hi + 1)
            )
            cos, sin = _mrope(spec, t, seq_len, pos, dtype)
            pos = pos[0]
        elif rt.uses_seq_len and not rt.stores(spec, variant):  # dynamic NTK past M
            inv, scaling = _rope_spec.frequencies(spec, seq_len)
            cos, sin = _computed(inv, scaling, pos, dtype, mode)
        else:
            table = self._table(spec, layer_type, variant, dtype, hi + 1)
            assert table is not None  # a table is found or built whenever one is stored
            cos, sin = _gathered(table, pos, dtype, mode, x.device, self._output)
        shape = (*pos.shape, cos.shape[-1])
        out_dtype = x.dtype if half is None or half[1] else torch.float32
        cos, sin = (a.reshape(shape).to(device=x.device, dtype=out_dtype) for a in (cos, sin))
        return (cos, sin) if half is None else half[0](cos, sin)


class SinusoidalEmbedding(torch.nn.Module):
    """Fixed sinusoidal position embeddings from posenc's float64 reference (docs/reference.md,
    ``sinusoidal``: layout interleaved as DistilBERT, concat as Marian/RoFormer/Pegasus, fairseq as
    M2M100/XGLM; ``offset`` added to every position). ``forward(position_ids)`` looks rows up in
    a table of ``num_positions`` rows (grown when a position is past it), like the
    ``nn.Embedding`` it replaces, in ``dtype`` on the table's device (``.to()`` moves it)."""

    def __init__(
        self,
        d_model: int,
        layout: str = _sinusoidal.DEFAULT_LAYOUT,
        base: float = 10000.0,
        offset: int = 0,
        num_positions: int = 512,
        dtype=torch.float32,
        device=None,
    ):
        super().__init__()
        self.spec = {"d_model": d_model, "layout": layout, "base": base, "offset": offset}
        self.dtype = dtype
        pipeline.parse("sinusoidal", {**self.spec, "positions": [0]})  # refuse a bad spec now
        self.weight: torch.Tensor
        self.register_buffer("weight", self._rows(num_positions, device), persistent=False)

    def _rows(self, n: int, device):
        out = pipeline.compute(
            "sinusoidal",
            {
                **self.spec,
                "positions": {"start": 0, "stop": n},
                "dtype": TABLE_DTYPES.get(self.dtype, FLOAT32),
            },
            max_bytes=None,
        )
        return _tensor(out["encoding"]).to(device=device, dtype=self.dtype)

    def forward(self, position_ids):
        need = int(position_ids.max()) + 1
        if need > self.weight.shape[0]:
            self.weight = self._rows(1 << (need - 1).bit_length(), self.weight.device)
        return torch.nn.functional.embedding(position_ids.to(self.weight.device), self.weight)


class TimmRope(torch.nn.Module):
    """A drop-in for a timm ViT's rope module (``model.rope`` of the models posenc reads whose module
    has timm's ``get_embed``: EVA-02, Perception Encoder, the ``vit_*_rope`` and DINOv3 families, the
    Qwen3 and DeepSeek ViTs; docs/models.md): ``get_embed(shape=None)`` returns timm's ``[sin | cos]``
    of the ``[H, W]`` patch grid, [H·W, 2·dim] float32 (the module's ``feat_shape`` when no shape is
    given, as timm's cached modules answer), from posenc's answer for ``{"architecture": name}`` and
    that ``grid`` (through ``client``'s shared tables when given). One tensor per grid is kept."""

    def __init__(self, architecture: str, feat_shape=None, device=None, *, client: Client | None = None):
        super().__init__()
        self.architecture, self.client, self.device = architecture, client, device
        self.feat_shape = list(feat_shape) if feat_shape is not None else None
        self._embeds: dict = {}  # (H, W) -> [H·W, 2·dim]
        self.get_embed(self.feat_shape or [1, 1])  # refuse a model posenc does not read now

    def update_feat_shape(self, feat_shape) -> None:
        self.feat_shape = list(feat_shape)

    def get_embed(self, shape=None, dtype=None):
        shape = shape if shape is not None else self.feat_shape
        if shape is None:
            raise ValueError("get_embed() needs a shape: this module was made without feat_shape")
        h, w = (int(v) for v in shape)
        out = self._embeds.get((h, w))
        if out is None:
            body = {"hf_config": {"architecture": self.architecture}, "grid": {"height": h, "width": w}}
            ask = self.client.lookup if self.client is not None else pipeline.compute
            got = ask("rope", body)
            out = torch.cat([_tensor(got["sin"]), _tensor(got["cos"])], dim=-1).to(self.device)
            if len(self._embeds) >= 16:  # bounded: a few grid sizes in use at a time
                self._embeds.clear()
            self._embeds[(h, w)] = out
        return out if dtype is None else out.to(dtype)


# diffusers transformers whose pipeline hands the transformer its token ids (img_ids, txt_ids) and
# whose positional module returns (cos, sin) [tokens, head] from them (FluxPosEmbed and its copies):
# DiffusersPosEmbed's classes
DIFFUSERS_POS_EMBED = tuple(
    "FluxTransformer2DModel ChromaTransformer2DModel Flux2Transformer2DModel Flux3Transformer2DModel "
    "BriaTransformer2DModel BriaFiboTransformer2DModel LongCatImageTransformer2DModel "
    "OvisImageTransformer2DModel Krea2Transformer2DModel".split()
)


class DiffusersPosEmbed(torch.nn.Module):
    """A drop-in for the positional module of a diffusers transformer of ``DIFFUSERS_POS_EMBED``
    (``model.pos_embed = DiffusersPosEmbed(model)``, or its config.json; Krea2: ``model.rotary_emb``):
    ``forward(ids)``, the [tokens, axes] whole-number ids the transformer passes its module (the
    pipeline's), returns the module's ``(cos, sin)``, [tokens, head] float32 on ``ids.device``, from
    posenc's answer for the config and those ``position_ids`` (``client``'s shared tables if given)."""

    def __init__(self, config, device=None, *, client: Client | None = None):
        super().__init__()
        if isinstance(config, torch.nn.Module):  # the transformer itself: its config lacks the class
            cfg = {**getattr(config, "config", {}), "_class_name": type(config).__name__}
        else:
            cfg = _config_dict(config)
        name = cfg.get("_class_name")
        if name not in DIFFUSERS_POS_EMBED:
            raise ValueError(
                f"DiffusersPosEmbed stands for the positional module of {', '.join(DIFFUSERS_POS_EMBED)}; "
                f"got _class_name {name!r}: give the transformer itself (DiffusersPosEmbed(model)) or its "
                "config.json (the other classes: docs/reference.md, hf_config and grid)"
            )
        # the class's own keys (a saved config's _diffusers_version and the like are not its model's)
        self.config = {k: v for k, v in cfg.items() if not k.startswith("_") or k == "_class_name"}
        self.client, self.device = client, device
        self.axes = len(registry.derive("rope", self.config).fields["axes_dim"])  # a bad config: refused now

    def forward(self, ids):
        pos = ids.detach().to("cpu", torch.float64)
        if pos.ndim != 2 or pos.shape[1] != self.axes or not bool(torch.equal(pos, pos.round())):
            raise ValueError(
                f"ids must be [tokens, {self.axes}] whole numbers, as the pipelines make them; "
                f"got {tuple(ids.shape)}"
            )
        ask = self.client.lookup if self.client is not None else pipeline.compute
        got = ask("rope", {"hf_config": self.config, "position_ids": pos.long().T.tolist()})
        device = ids.device if self.device is None else self.device
        return _tensor(got["cos"]).to(device), _tensor(got["sin"]).to(device)


def _expand_pair(cos: np.ndarray, sin: np.ndarray, rows: np.ndarray, mode: str, alloc=np.empty) -> np.ndarray:
    """The rows of two half-width tables at full width, as one [2, n, width] block from
    ``alloc(shape, dtype)``, each written in one pass by posenc's kernel."""
    h = cos.shape[1]
    out = alloc((2, rows.shape[0], h if mode == "half" else 2 * h), cos.dtype)
    for half, dst in zip((cos, sin), out):
        if mode == "half":
            kernels.gather_rows(half, rows, dst)
        else:
            kernels.rope_expand(half, rows, dst, mode)
    return out


def _computed(inv64, scaling, pos, dtype: str, mode: str):
    """Rows computed exactly (float64 angles, rounded once), as torch tensors."""
    rows = pos.reshape(-1).to(device="cpu", dtype=torch.int64).numpy()
    cos, sin = _rope.half_rows(inv64, scaling, rows, dtype)
    out = _tensor(_expand_pair(cos, sin, np.arange(rows.shape[0], dtype=np.int64), mode))
    return out[0], out[1]


def _mrope(spec, t: _Table | None, seq_len: int, pos, dtype: str):
    """Multimodal RoPE rows: column j at the position of its axis (rope_axes.column_map), each
    axis's half-width rows gathered from table ``t`` (rows past it, or every row without a table:
    computed exactly)."""
    per_axis = np.ascontiguousarray(pos.reshape(pos.shape[0], -1).to(device="cpu", dtype=torch.int64).numpy())
    half_col, axis, _ = _axes.spec_column_map(spec)
    if t is None or per_axis.max() >= t.rows:
        inv, scaling = (t.inv64, t.scaling) if t is not None else _rope_spec.frequencies(spec, seq_len)
        out = _axes.computed(lambda p: _rope.half_rows(inv, scaling, p, dtype), per_axis, half_col, axis)
    else:
        out = _axes.gather((t.cos, t.sin), per_axis, half_col, axis)
    return _tensor(out[0]), _tensor(out[1])


def _gathered(t: _Table, pos, dtype: str, mode: str, device, alloc=np.empty):
    """The rows of ``pos`` from table ``t``; rows past it computed exactly."""
    if device.type != "cpu":
        return _gathered_on(t, pos.reshape(-1).to(device=device, dtype=torch.int64), mode, dtype)
    rows = pos.reshape(-1).to(dtype=torch.int64).numpy()
    past = rows >= t.rows
    if not past.any():
        out = _tensor(_expand_pair(t.cos, t.sin, rows, mode, alloc))
        return out[0], out[1]
    out = _expand_pair(t.cos, t.sin, np.where(past, 0, rows), mode, alloc)
    more = _computed(t.inv64, t.scaling, torch.from_numpy(rows[past]), dtype, mode)
    for dst, m in zip(out, more):
        dst[past] = m.view(torch.uint16).numpy() if m.dtype == torch.bfloat16 else m.numpy()
    out = _tensor(out)
    return out[0], out[1]


def _gathered_on(t: _Table, idx, mode: str, dtype: str):
    """The same gather on another device, from the table's copy there (one index_select over a
    zero-stride full-width view)."""
    out = []
    past = idx >= t.rows
    any_past = bool(past.any())
    for half in t.device_pair(idx.device):
        n, h = half.shape
        if mode == "half":
            full, width = half, h
        elif mode == _rope_spec.HALF_SPLIT:
            full, width = half.as_strided((n, 2, h), (h, 0, 1)), 2 * h
        else:
            full, width = half.as_strided((n, h, 2), (h, 1, 0)), 2 * h
        dst = torch.empty((idx.shape[0], *full.shape[1:]), dtype=half.dtype, device=idx.device)
        torch.index_select(full, 0, torch.where(past, 0, idx) if any_past else idx, out=dst)
        out.append(dst.reshape(idx.shape[0], width))
    if any_past:
        more = _computed(t.inv64, t.scaling, idx[past].cpu(), dtype, mode)
        for o, m in zip(out, more):
            o[past] = m.to(o.device)
    return tuple(out)
