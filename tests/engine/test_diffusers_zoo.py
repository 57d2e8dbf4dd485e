"""diffusers' rotary transformers: every class engine/models/diffusers_rope.py reads, against the
class's own positional module.

Each class is built from its config defaults on the meta device (no weights), with its positional
module built on the CPU as the class's ``__init__`` builds it (``_built``); the module is called as
the transformer calls it, for the positions the model itself builds (a small latent grid, or the
ids its pipeline hands in), and posenc must give the same cos/sin within docs/reference.md's
tolerance (``hf_zoo.tolerance``) through ``compute`` and over HTTP, from the config as diffusers
saves it and from nothing but its ``_class_name``. engine/models/diffusers_zoo.json, the catalogue
of every class and its positional kind, is held to a fresh run of tests/tools/diffusers_zoo.py;
the rotary classes not read are listed here (``NOT_READ``) with the reason.
"""

from __future__ import annotations

import contextlib
import json
import sys
import warnings

import httpx
import numpy as np
import pytest
import torch

from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from posenc.engine.core.formats import read_safetensors
from posenc.engine.models import diffusers_rope, registry
from tests.numeric import assert_close
from tests.procs import serve_for_module
from tests.tools import diffusers_zoo, hf_zoo

diffusers = diffusers_zoo._quiet()
CATALOGUE = json.loads(diffusers_zoo.TABLE.read_text())
# the classes this file's cases cover; a group of diffusers_rope.GROUPS has its own test file
# (tests/engine/test_diffusers_zoo_<group>.py)
READ = sorted(set(diffusers_rope.CLASSES).difference(*diffusers_rope.GROUPS.values()))
# the latent grids the tests ask for (frames, rows, columns in patches; 2-D classes take the last two)
GRIDS = [(3, 4, 5), (1, 7, 2), (2, 3, 2)]
TEXT = 6  # caption tokens beside the image, where the class places them
# config keys a class has no default for (its __init__ says None) and its positions need
REQUIRED = {"HunyuanDiT2DModel": {"patch_size": 2}, "EasyAnimateTransformer3DModel": {"patch_size": 2}}
# the classes whose positions only a grid gives (centred or fractional coordinates)
GRID_ONLY = (diffusers_rope.CENTRED, diffusers_rope.CROP)

# Rotary classes of the pinned diffusers posenc does not read, and why (diffusers_rope.UNREAD,
# which GET /v1/models and docs/models.md list): changed only on purpose.
NOT_READ = diffusers_rope.UNREAD


@pytest.mark.slow
def test_the_catalogue_is_what_the_tool_writes():
    """engine/models/diffusers_zoo.json is tests/tools/diffusers_zoo.py's output on the pinned diffusers."""
    assert CATALOGUE["diffusers"] == diffusers.__version__
    assert diffusers_zoo.TABLE.read_text() == diffusers_zoo.dumps(diffusers_zoo.build()), (
        "engine/models/diffusers_zoo.json is stale: .venv/bin/python -m tests.tools.diffusers_zoo"
    )


def test_every_record_is_a_rotary_class_of_the_catalogue_with_its_defaults():
    for name in sorted(diffusers_rope.CLASSES):
        row = CATALOGUE["classes"].get(name)
        assert row is not None, f"{name} is not a transformer class of diffusers {diffusers.__version__}"
        assert row["kind"] == "rotary", (name, row["kinds"])
        record = diffusers_rope.CLASSES[name]["rope"]
        assert record.source.split(" ")[0] == row["file"], (name, record.source, row["file"])
        for key, value in record.defaults.items():  # the class's own __init__ defaults
            assert row["defaults"].get(key) == value, (name, key, row["defaults"].get(key), value)


# -- the class's own module ----------------------------------------------------------------------


@contextlib.contextmanager
def _on_cpu(classes):
    """Build instances of ``classes`` on the CPU inside a meta-device construction."""
    saved = {c: c.__init__ for c in classes}

    def wrap(init):
        def __init__(self, *a, **k):
            with torch.device("cpu"):
                init(self, *a, **k)

        return __init__

    for c in classes:
        c.__init__ = wrap(saved[c])
    try:
        yield
    finally:
        for c, init in saved.items():
            c.__init__ = init


# what a class whose __init__ defaults do not build takes besides (none of it positional)
BUILD = {
    "HunyuanDiT2DModel": dict(in_channels=4, patch_size=2),
    "EasyAnimateTransformer3DModel": dict(patch_size=2, in_channels=4, out_channels=4),
    "HiDreamImageTransformer2DModel": dict(
        patch_size=2, out_channels=16, caption_channels=[64, 64], llama_layers=[0] * 48
    ),
}


def _built(name, config=None):
    """The transformer (meta device) with its positional module ``attr`` built on the CPU."""
    cls = getattr(diffusers, name)
    config = {**BUILD.get(name, {}), **(config or {})}
    attr = ATTR[name]
    with warnings.catch_warnings():  # a class's own deprecation notices (Chroma's FluxPosEmbed)
        warnings.simplefilter("ignore")
        with torch.device("meta"):
            probe = cls.from_config(config)
        if attr is None:  # no positional module: the call reads the model's own attributes
            return probe, probe
        with _on_cpu([type(getattr(probe, attr))]), torch.device("meta"):
            model = cls.from_config(config)
    return model, getattr(model, attr)


def _grid_ids(f, h, w):
    """(frame, row, column) of each token of an f x h x w grid, row-major: the meshgrid (ij) the
    grid classes build, written here from its definition."""
    t, r, c = np.meshgrid(np.arange(f), np.arange(h), np.arange(w), indexing="ij")
    return np.stack([t.reshape(-1), r.reshape(-1), c.reshape(-1)])


def _real(out):
    """(cos, sin) [n, d] float64 from a module's output: (cos, sin) of any leading shape."""
    cos, sin = out
    d = cos.shape[-1]
    return cos.reshape(-1, d).double().numpy(), sin.reshape(-1, d).double().numpy()


def _complex(z):
    """A complex freqs_cis [.., d/2] as (cos, sin) [n, d] in its pairing, (2k, 2k+1)."""
    z = z.reshape(-1, z.shape[-1])
    return (
        z.real.double().repeat_interleave(2, dim=1).numpy(),
        z.imag.double().repeat_interleave(2, dim=1).numpy(),
    )


def _ids(pid, dtype=torch.float32):
    return torch.tensor(pid.T, dtype=dtype)


def _wan_call(module, grid):
    """WanRotaryPosEmbed.forward(hidden_states [b, c, frames, height, width]) with the patch sizes."""
    pt, ph, pw = module.patch_size
    f, h, w = grid
    return _real(module(torch.zeros(1, 1, f * pt, h * ph, w * pw)))


def _hunyuan_call(module, grid):
    ps = module.patch_size
    if isinstance(ps, (list, tuple)):  # HunyuanImage: a patch size per axis, 2-D or 3-D
        sizes = grid[-len(ps) :]
        return _real(module(torch.zeros(1, 1, *(s * p for s, p in zip(sizes, ps)))))
    f, h, w = grid
    return _real(module(torch.zeros(1, 1, f * module.patch_size_t, h * ps, w * ps)))


def _framepack_call(module, grid):
    f, h, w = grid  # its height and width are the latent's, divided by patch_size inside
    ps = module.patch_size
    return _real(
        module(frame_indices=torch.arange(f), height=h * ps, width=w * ps, device=torch.device("cpu"))
    )


def _helios_call(module, grid):
    """HeliosRotaryPosEmbed(frame_indices [b, f], height, width): [b, 2d, f, h, w], cos then sin."""
    f, h, w = grid
    out = module(frame_indices=torch.arange(f)[None], height=h, width=w, device=torch.device("cpu"))[0]
    d = out.shape[0] // 2
    return out[:d].reshape(d, -1).T.double().numpy(), out[d:].reshape(d, -1).T.double().numpy()


def _ace_step_call(module, n):
    """ace_step_transformer._ace_step_rotary_freqs(seq_len, head_dim, theta, ...), as its forward calls it."""
    model = module
    return _real(
        sys.modules[type(model).__module__]._ace_step_rotary_freqs(
            n, model.head_dim, model.rope_theta, torch.device("cpu"), torch.float32
        )
    )


def _stable_audio_call(model, n):
    """pipeline_stable_audio: get_1d_rotary_pos_embed(attention_head_dim // 2, n, use_real=True,
    repeat_interleave_real=False), n the latent's and the duration tokens' sequence."""
    from diffusers.models.embeddings import get_1d_rotary_pos_embed

    return _real(
        get_1d_rotary_pos_embed(
            model.config.attention_head_dim // 2, n, use_real=True, repeat_interleave_real=False
        )
    )


SEQUENCE_CALLS = {
    "StableAudioDiTModel": _stable_audio_call,
    "StableAudio3DiTModel": lambda m, n: _real(_cat_cos_sin(m(n, torch.device("cpu")))),
    "MiniMaxMusic3Transformer1DModel": lambda m, n: _real(m(n, torch.device("cpu"))),
    "LongCatAudioDiTTransformer": lambda m, n: _real(m(torch.zeros(1, n, 1))),
    "AceStepTransformer1DModel": _ace_step_call,
}
# other sizes where halving the defaults is not a config the class takes
OTHER_SIZES = {
    "HeliosTransformer3DModel": {"rope_dim": [32, 16, 16], "attention_head_dim": 64},
    "ChronoEditTransformer3DModel": {"attention_head_dim": 96},  # a width its two splits agree on
    "StableAudio3DiTModel": {"embed_dim": 768},
    "StableAudioDiTModel": {"attention_head_dim": 32},
    "MiniMaxMusic3Transformer1DModel": {"rotary_dim": 16},
    "LongCatAudioDiTTransformer": {"dit_dim": 768},
    "AceStepTransformer1DModel": {"head_dim": 64},
    "GlmImageTransformer2DModel": {"attention_head_dim": 64},
    "CogView4Transformer2DModel": {"attention_head_dim": 64, "rope_axes_dim": [128, 64]},
    "MiniMaxH3Transformer3DModel": {"rope_freq_dim": 8, "rope_theta": 500.0},
    "QwenImageTransformer2DModel": {"axes_dims_rope": [8, 28, 28], "attention_head_dim": 64},
    "HiDreamImageTransformer2DModel": {"axes_dims_rope": [16, 8, 8]},
    "Cosmos3OmniTransformer": {"head_dim": 64, "rope_axes_dim": [12, 10, 10], "rope_theta": 500.0},
    "HunyuanDiT2DModel": {"attention_head_dim": 64, "patch_size": 1},
    "EasyAnimateTransformer3DModel": {"attention_head_dim": 32, "patch_size": 1},
    "NucleusMoEImageTransformer2DModel": {"axes_dims_rope": [8, 28, 28], "attention_head_dim": 64},
    "QwenImage21Transformer2DModel": {"axes_dims_rope": [8, 28, 28], "attention_head_dim": 64},
}


def _cat_cos_sin(angles):
    """StableAudio3RotaryEmbedding returns raw angles cat((freqs, freqs)); its attention takes their cos and sin."""
    return torch.cos(angles), torch.sin(angles)


def _anyflow_call(module, grid):
    f, h, w = grid
    cfg = {"total_frames": f, "full_frame_shape": (h, w)}
    return _complex(module(cfg, torch.device("cpu"))["query"])


# how each class calls its module: (attribute, call(module, positions)), where positions are the
# ids [k, n] for the classes whose ids come from outside the module, the grid otherwise
IDS_CALLS = {
    "pos_embed": lambda m, pid: _real(m(_ids(pid))),
    "rotary_emb": lambda m, pid: _real(m(_ids(pid))),
    # Lumina2RotaryPosEmbed._get_freqs_cis(ids [b, n, 3] int)
    "rope_embedder": lambda m, pid: _complex(
        m._get_freqs_cis(_ids(pid, torch.int32)[None])
        if hasattr(m, "_get_freqs_cis")
        else m(_ids(pid, torch.int64))
    ),
}


def _hidream_call(m, pid):
    """HiDreamImageEmbedND(ids [b, n, k]): [b, n, 1, d/2, 2, 2] rotation matrices [[cos, -sin], [sin, cos]]."""
    r = m(_ids(pid)[None])[0, :, 0]
    return (
        r[..., 0, 0].double().repeat_interleave(2, dim=1).numpy(),
        r[..., 1, 0].double().repeat_interleave(2, dim=1).numpy(),
    )


def _ernie_call(m, pid):
    """ErnieImageEmbedND3(ids [b, n, 3]): raw angles [b, n, 1, d]; its attention takes cos and sin."""
    angles = m(_ids(pid)[None]).reshape(pid.shape[1], -1)
    return torch.cos(angles).double().numpy(), torch.sin(angles).double().numpy()


ATTR = {
    "QwenImageTransformer2DModel": "pos_embed",
    "NucleusMoEImageTransformer2DModel": "pos_embed",
    "ChromaTransformer2DModel": "pos_embed",
    "Flux2Transformer2DModel": "pos_embed",
    "Flux3Transformer2DModel": "pos_embed",
    "BriaTransformer2DModel": "pos_embed",
    "BriaFiboTransformer2DModel": "pos_embed",
    "LongCatImageTransformer2DModel": "pos_embed",
    "OvisImageTransformer2DModel": "pos_embed",
    "Krea2Transformer2DModel": "rotary_emb",
    "Lumina2Transformer2DModel": "rope_embedder",
    "ZImageTransformer2DModel": "rope_embedder",
    "BriaFibo2Transformer2DModel": "rope_embedder",
    "ErnieImageTransformer2DModel": "pos_embed",
}
CALL = {name: IDS_CALLS[attr] for name, attr in ATTR.items()}
CALL["ErnieImageTransformer2DModel"] = _ernie_call
ATTR["HiDreamImageTransformer2DModel"] = "pe_embedder"
ATTR["HunyuanDiT2DModel"] = None  # its pipeline builds the rotary embedding


def _hunyuandit_call(model, grid):
    """pipeline_hunyuandit: get_2d_rotary_pos_embed(inner_dim // num_heads, its crop region, (h, w))."""
    from diffusers.models.embeddings import get_2d_rotary_pos_embed
    from diffusers.pipelines.hunyuandit.pipeline_hunyuandit import get_resize_crop_region_for_grid

    _, h, w = grid
    crop = get_resize_crop_region_for_grid((h, w), 512 // 8 // model.config.patch_size)
    return _real(get_2d_rotary_pos_embed(model.inner_dim // model.num_heads, crop, (h, w)))


CALL["HunyuanDiT2DModel"] = _hunyuandit_call
ATTR["EasyAnimateTransformer3DModel"] = "rope_embedding"
CALL["EasyAnimateTransformer3DModel"] = lambda m, grid: _real(  # forward(hidden_states [b, c, f, H, W])
    m(torch.zeros(1, 1, grid[0], grid[1] * m.patch_size, grid[2] * m.patch_size))
)
ATTR["Cosmos3OmniTransformer"] = "rotary_emb"
CALL["Cosmos3OmniTransformer"] = lambda m, pid: _real(
    m(torch.tensor(pid)[:, None], torch.device("cpu"), torch.float32)
)  # Cosmos3VLTextRotaryEmbedding.forward(position_ids [3, b, n], device, dtype)
CALL["HiDreamImageTransformer2DModel"] = _hidream_call
ATTR.update(
    GlmImageTransformer2DModel="rope", CogView4Transformer2DModel="rope", MiniMaxH3Transformer3DModel="rope"
)
CALL.update(
    GlmImageTransformer2DModel=lambda m, grid: _real(
        m(torch.zeros(1, 1, grid[1] * m.patch_size, grid[2] * m.patch_size))
    ),
    MiniMaxH3Transformer3DModel=lambda m, pid: _real(m(_ids(pid))),
)
CALL["CogView4Transformer2DModel"] = CALL["GlmImageTransformer2DModel"]
ATTR.update(
    StableAudio3DiTModel="rotary_pos_emb",
    MiniMaxMusic3Transformer1DModel="rotary_emb",
    LongCatAudioDiTTransformer="rotary_embed",
    StableAudioDiTModel=None,  # its pipeline builds the rotary embedding from the model's config
    AceStepTransformer1DModel=None,  # a function of its module, called with the model's own attributes
)
CALL.update(SEQUENCE_CALLS)
for _name in diffusers_rope.CLASSES:
    if _name not in ATTR:
        ATTR[_name] = "rope"
        src = diffusers_rope.CLASSES[_name]["rope"].source
        CALL[_name] = (
            _framepack_call
            if "Framepack" in src
            else _helios_call
            if "Helios" in src
            else _anyflow_call
            if "AnyFlow" in src
            else _hunyuan_call
            if src.startswith(("transformer_hunyuan", "transformer_motif"))
            else _wan_call
        )


def _two_d(record, module) -> bool:
    """Rows and columns only (no frame axis)."""
    return isinstance(record, diffusers_rope.SectionRope) or len(getattr(module, "rope_dim", (0, 0, 0))) == 2


def _positions(name, module, grid):
    """The positions the model builds for ``grid`` (position_ids [k, n]) and its module's cos/sin."""
    record = diffusers_rope.CLASSES[name]["rope"]
    f, h, w = grid
    if record.positions in GRID_ONLY:  # asked by grid; a bound of |coordinate| for the tolerance
        return np.array([[f + h + w + TEXT + 32]]), CALL[name](module, grid)
    if record.positions == diffusers_rope.SEQUENCE:
        n = f * h * w
        return np.arange(n)[None], CALL[name](module, n)
    if record.positions == diffusers_rope.GRID:
        pid = _grid_ids(1, h, w)[1:] if _two_d(record, module) else _grid_ids(f, h, w)
        if name == "CogView4Transformer2DModel":  # CogView4RotaryPosEmbed: i * rope_axes_dim // size
            pid = pid * np.array(module.rope_axes_dim)[:, None] // np.array([[h], [w]])
        if name == "ChronoEditTransformer3DModel" and f == 2:  # its forward: frames 0 and skip - 1
            pid[0] *= module.temporal_skip_len - 1
        return pid, CALL[name](module, grid)
    # ids from outside the module: text tokens, then the image grid after them (written here from
    # each pipeline's definition, one frame)
    img = _grid_ids(1, h, w)
    text = TEXT
    cap = np.stack([np.arange(text), np.zeros(text, np.int64), np.zeros(text, np.int64)])
    if name == "ZImageTransformer2DModel":  # caption (1 + i, 0, 0), image (c + 1, row, column)
        pid = np.concatenate(
            [cap + np.array([[1], [0], [0]]), img + np.array([[text + 1], [0], [0]])], axis=1
        )
    elif record.positions == diffusers_rope.TEXT_THEN_GRID:  # Lumina2RotaryPosEmbed.forward
        pid = np.concatenate([cap, img + np.array([[text], [0], [0]])], axis=1)
    elif record.positions == diffusers_rope.IMAGE_THEN_TEXT:  # ErnieImageTransformer2DModel.forward
        pid = np.concatenate([img + np.array([[text], [0], [0]]), cap], axis=1)
    else:  # Flux's pipeline: text ids all 0, image ids (0, row, column)
        pid = np.concatenate([np.zeros((3, 4), np.int64), img], axis=1)
    k = len(getattr(module, "axes_dim", None) or getattr(module, "axes_dims", None) or (0, 0, 0))
    if k == 2:  # HiDream's default axes_dims_rope: rows and columns
        pid = pid[1:]
    if k == 4:  # Flux 2's (t, h, w, l): a fourth axis, the reference image's index
        pid = np.concatenate([pid, np.arange(pid.shape[1])[None] % 3], axis=0)
    return pid, CALL[name](module, pid)


def _sel(name, pid, grid=GRIDS[0]) -> dict:
    """The request's selection: plain positions for a 1-D sequence, the grid where the class's
    positions are centred (negative), position_ids otherwise."""
    record = diffusers_rope.CLASSES[name]["rope"]
    positions = record.positions
    if positions in GRID_ONLY:
        sizes = dict(zip(("frames", "height", "width"), grid), text=TEXT)
        return {"grid": {k: v for k, v in sizes.items() if k in record.grid_keys}}
    if positions == diffusers_rope.SEQUENCE:
        return {"positions": pid[0].tolist()}
    return {"position_ids": pid.tolist()}


def _check(got, cos, sin, pid, what):
    tol = hf_zoo.tolerance(pid.max(axis=0), 1.0)
    assert_close(got["cos"], cos, atol=tol, what=f"{what} cos")
    assert_close(got["sin"], sin, atol=tol, what=f"{what} sin")


def _saved(name):
    """The config as diffusers saves it (``model.config``, the class's defaults filled in)."""
    model, _ = _built(name)
    return {"_class_name": name, **{k: v for k, v in dict(model.config).items() if not k.startswith("_")}}


def _centred_call(module, grid):
    """QwenEmbedRope.forward(video_fhw, device, max_txt_seq_len): (image, caption) complex freqs."""
    vid, txt = module(tuple(grid), torch.device("cpu"), TEXT)
    return _complex(torch.cat([vid, txt]))


CALL.update(QwenImageTransformer2DModel=_centred_call, NucleusMoEImageTransformer2DModel=_centred_call)


def _qwenimage21_call(module, grid):
    """QwenImage21Rope.forward(img_shapes, image_pad_mask, device): text-to-image, the caption's tokens
    then the target image's (one frame), complex freqs over the joint sequence."""
    _, h, w = grid
    mask = torch.tensor([False] * TEXT + [True] * (h * w))
    return _complex(module([(1, h, w)], mask, torch.device("cpu")))


ATTR["QwenImage21Transformer2DModel"] = "pos_embed"
CALL["QwenImage21Transformer2DModel"] = _qwenimage21_call


@pytest.mark.parametrize("name", READ)
def test_class_vs_its_own_positional_module(name):
    model, module = _built(name)
    saved = _saved(name)
    if diffusers_rope.CLASSES[name]["rope"].positions in GRID_ONLY:  # a grid only
        for f, h, w in GRIDS:
            cos, sin = CALL[name](module, (f, h, w))
            grid = _sel(name, None, (f, h, w))["grid"]
            tol = hf_zoo.tolerance([2 * max(f, h, w) + TEXT], 1.0)
            for raw in (json.loads(json.dumps(saved)), {"_class_name": name, **REQUIRED.get(name, {})}):
                got = compute("rope", {"hf_config": raw, "grid": grid})
                assert_close(got["cos"], cos, atol=tol, what=f"{name} {grid} cos")
                assert_close(got["sin"], sin, atol=tol, what=f"{name} {grid} sin")
        return
    for grid in GRIDS:
        pid, (cos, sin) = _positions(name, module, grid)
        full = compute("rope", {"hf_config": json.loads(json.dumps(saved)), **_sel(name, pid)})
        _check(full, cos, sin, pid, f"{name} {grid} (saved config)")
        bare = compute("rope", {"hf_config": {"_class_name": name}, **_sel(name, pid)})
        _check(bare, cos, sin, pid, f"{name} {grid} (_class_name alone)")
        assert bare["spec"] == full["spec"]


@pytest.mark.parametrize("name", READ)
def test_a_config_of_other_sizes_is_read_as_the_class_reads_it(name):
    """Another head width and θ, where the class reads them from its config."""
    record = diffusers_rope.CLASSES[name]["rope"]
    change = {}
    if isinstance(getattr(record, "theta", None), str):
        change[record.theta] = 500.0
    if name in OTHER_SIZES:
        change.update(OTHER_SIZES[name])
    elif isinstance(record.axes, str):
        axes = record.defaults[record.axes]
        change[record.axes] = [a // 2 for a in axes]
        if record.head_dim != record.axes:
            change[record.head_dim] = sum(a // 2 for a in axes)
        if name == "ZImageTransformer2DModel":  # it asserts dim // n_heads == sum(axes_dims)
            change.update(dim=sum(a // 2 for a in axes) * 8, n_heads=8, n_kv_heads=8)
    else:
        change["attention_head_dim"] = 64
    _, module = _built(name, change)
    pid, (cos, sin) = _positions(name, module, GRIDS[0])
    got = compute("rope", {"hf_config": {"_class_name": name, **change}, **_sel(name, pid)})
    _check(got, cos, sin, pid, f"{name} {change}")


GRID_READ = [n for n in READ if diffusers_rope.CLASSES[n]["rope"].grid_keys is not None]


def _lumina2_call(module, grid):
    """Lumina2RotaryPosEmbed.forward(hidden_states, attention_mask): it builds the caption's and the
    image's positions itself; its joint freqs_cis are the sequence's."""
    _, h, w = grid
    p = module.patch_size
    out = module(torch.zeros(1, 1, h * p, w * p), torch.ones(1, TEXT, dtype=torch.int64))
    return _complex(out[3][0])


@pytest.mark.parametrize("name", GRID_READ)
def test_grid_form_gives_the_positions_the_class_builds(name):
    """``grid`` (frames, height, width in patches; text tokens where the class places them) instead of
    position_ids: posenc builds the positions the class itself builds for that latent."""
    _, module = _built(name)
    record = diffusers_rope.CLASSES[name]["rope"]
    for grid in GRIDS:
        f, h, w = grid
        if record.positions in GRID_ONLY:
            continue  # test_class_vs_its_own_positional_module asks it by grid
        if record.positions == diffusers_rope.GRID:
            body_grid = {"frames": f, "height": h, "width": w}
            if _two_d(record, module):
                body_grid.pop("frames")
            cos, sin = CALL[name](module, grid)
        else:
            body_grid = {"text": TEXT, "height": h, "width": w}
            if name == "Lumina2Transformer2DModel":
                cos, sin = _lumina2_call(module, grid)
            else:
                _, (cos, sin) = _positions(name, module, grid)
        got = compute("rope", {"hf_config": {"_class_name": name}, "grid": body_grid})
        pid, _ = _positions(name, module, grid)  # the largest position, for the tolerance
        tol = hf_zoo.tolerance(pid.max(axis=0), 1.0)
        assert_close(got["cos"], cos, atol=tol, what=f"{name} {body_grid} cos")
        assert_close(got["sin"], sin, atol=tol, what=f"{name} {body_grid} sin")
    with pytest.raises(SpecError) as e:  # a grid and position_ids both
        compute(
            "rope",
            {
                "hf_config": {"_class_name": name, **REQUIRED.get(name, {})},
                "grid": {"height": 2, "width": 2},
                "position_ids": [[0]],
            },
        )
    assert e.value.loc[0] == "position_ids", e.value


def test_a_grid_beside_a_class_whose_ids_come_from_its_pipeline_is_refused():
    with pytest.raises(SpecError) as e:
        compute(
            "rope",
            {"hf_config": {"_class_name": "Flux2Transformer2DModel"}, "grid": {"height": 2, "width": 2}},
        )
    assert e.value.loc == ("grid",), e.value


def test_unknown_class_and_missing_key_are_refused_saying_what_to_send():
    with pytest.raises(SpecError) as e:
        compute("rope", {"hf_config": {"_class_name": "NoSuchTransformer2DModel"}, "position_ids": [[0]]})
    assert e.value.loc == ("hf_config", "_class_name") and "send the rope spec fields" in e.value.msg, e.value
    with pytest.raises(SpecError) as e:  # a rotary class not read says why
        compute("rope", {"hf_config": {"_class_name": "MochiTransformer3DModel"}, "position_ids": [[0]]})
    assert (
        e.value.loc == ("hf_config", "_class_name") and NOT_READ["MochiTransformer3DModel"] in e.value.msg
    ), e.value
    with pytest.raises(SpecError) as e:  # a known class whose config says no rotary width
        compute(
            "rope",
            {
                "hf_config": {"_class_name": "Flux2Transformer2DModel", "rope_theta": "x"},
                "position_ids": [[0]] * 4,
            },
        )
    assert e.value.loc == ("hf_config", "rope_theta"), e.value
    with pytest.raises(SpecError) as e:
        compute(
            "rope",
            {
                "hf_config": {"_class_name": "HunyuanVideoTransformer3DModel", "rope_axes_dim": [16, 56]},
                "position_ids": [[0], [0]],
            },
        )
    assert e.value.loc == ("hf_config", "rope_axes_dim"), e.value
    with pytest.raises(SpecError) as e:  # a key the class has no default for, named
        compute(
            "rope", {"hf_config": {"_class_name": "HunyuanDiT2DModel"}, "grid": {"height": 2, "width": 2}}
        )
    assert e.value.loc == ("hf_config", "patch_size") and "field required" in e.value.msg, e.value
    with pytest.raises(SpecError) as e:  # GLM-Image's rows and columns each rotate d/2
        compute(
            "rope",
            {
                "hf_config": {"_class_name": "GlmImageTransformer2DModel", "attention_head_dim": 42},
                "grid": {"height": 2, "width": 2},
            },
        )
    assert e.value.loc == ("hf_config", "attention_head_dim"), e.value
    with pytest.raises(SpecError) as e:  # a width ChronoEdit's own module would mix its axes at
        compute(
            "rope",
            {
                "hf_config": {"_class_name": "ChronoEditTransformer3DModel", "attention_head_dim": 64},
                "position_ids": [[0], [0], [0]],
            },
        )
    assert e.value.loc == ("hf_config", "attention_head_dim") and "mixes its axes" in e.value.msg, e.value
    # EasyAnimate: a head its own get_3d_rotary_pos_embed cannot split into pairs, a crop base of 0
    for change, key in (
        ({"attention_head_dim": 72, "patch_size": 2}, "attention_head_dim"),
        ({"patch_size": 91}, "patch_size"),
    ):
        with pytest.raises(SpecError) as e:
            compute(
                "rope",
                {
                    "hf_config": {"_class_name": "EasyAnimateTransformer3DModel", **change},
                    "grid": {"height": 2, "width": 2},
                },
            )
        assert e.value.loc == ("hf_config", key), e.value
    # QwenImage21Rope's tables: positions 0..8191 and -1024..-1 (torch indexing past them wraps)
    for grid, key in (
        ({"text": 8192, "height": 2, "width": 2}, "text"),
        ({"height": 2049, "width": 2}, "height"),
    ):
        with pytest.raises(SpecError) as e:
            compute("rope", {"hf_config": {"_class_name": "QwenImage21Transformer2DModel"}, "grid": grid})
        assert e.value.loc == ("grid", key) and "tables stop" in e.value.msg, e.value


# -- over HTTP -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory, request):
    return serve_for_module(tmp_path_factory.mktemp("dzoo"), request, None, workers=1)


@pytest.fixture(scope="module")
def http(served):
    with httpx.Client(base_url=served.url, timeout=60) as c:
        yield c


@pytest.mark.parametrize(
    "name",
    [
        "WanTransformer3DModel",
        "Flux2Transformer2DModel",
        "StableAudio3DiTModel",
        "QwenImageTransformer2DModel",
    ],
)
def test_the_co_located_client_reads_the_same(served, name):
    """Client.lookup (shared memory, the engine's tables) answers a config body as compute does."""
    from posenc.engine.reader.client import Client

    _, module = _built(name)
    pid, (cos, sin) = _positions(name, module, GRIDS[0])
    body = {"hf_config": {"_class_name": name}, **_sel(name, pid)}
    got = Client(namespace=served.namespace).lookup("rope", body)
    _check(
        {k: np.asarray(got[k], dtype=np.float64) for k in ("cos", "sin")},
        cos,
        sin,
        pid,
        f"{name} Client.lookup",
    )


@pytest.mark.parametrize("name", READ)
def test_class_over_http(http, name):
    _, module = _built(name)
    pid, (cos, sin) = _positions(name, module, GRIDS[0])
    body = {"hf_config": _saved(name), **_sel(name, pid)}
    r = http.post("/v1/rope", json=body, headers={"accept": "application/x-safetensors"})
    assert r.status_code == 200, (name, r.text[:300])
    arrays, _ = read_safetensors(r.content)
    got = {k: arrays[k].astype(np.float64) for k in ("cos", "sin")}
    _check(got, cos, sin, pid, f"{name} over HTTP")
    j = http.post("/v1/rope", json=body)
    assert j.status_code == 200, j.text[:300]
    _check({k: np.array(j.json()[k]) for k in ("cos", "sin")}, cos, sin, pid, f"{name} over HTTP JSON")


def test_models_lists_the_diffusers_classes(http):
    got = http.get("/v1/models").json()
    for name in sorted(diffusers_rope.CLASSES):
        assert got["diffusers_classes"][name]["rope"] == registry.CLASSES[name]["rope"].source
    assert got["diffusers_rotary_not_read"] == NOT_READ


def test_share_of_the_rotary_classes_read():
    rotary = {n for n, r in CATALOGUE["classes"].items() if r["kind"] == "rotary"}
    read = rotary & (set(READ) | {n for n, by in registry.CLASSES.items() if "rope" in by})
    print(f"diffusers rotary: {len(read)} of {len(rotary)} read; not read: {sorted(rotary - read)}")
    assert set(NOT_READ) == rotary - read, sorted(set(NOT_READ) ^ (rotary - read))
    assert all(not why.startswith("not read: no reason") for why in NOT_READ.values()), NOT_READ


@pytest.mark.parametrize("name", ["WanTransformer3DModel", "StableAudio3DiTModel"])
def test_kserve_v2_reads_the_config_in_its_spec(http, name):
    """KServe v2: the config in ``parameters.spec``, the positions as the input tensor."""
    _, module = _built(name)
    pid, (cos, sin) = _positions(name, module, GRIDS[0])
    sel = _sel(name, pid)
    ((field, value),) = sel.items()
    arr = np.asarray(value, dtype=np.int64)
    body = {
        "parameters": {"spec": json.dumps({"hf_config": {"_class_name": name}})},
        "inputs": [
            {"name": field, "datatype": "INT64", "shape": list(arr.shape), "data": arr.reshape(-1).tolist()}
        ],
    }
    r = http.post("/v2/models/rope/infer", json=body)
    assert r.status_code == 200, (name, r.text[:300])
    out = {o["name"]: np.array(o["data"], dtype=np.float64).reshape(o["shape"]) for o in r.json()["outputs"]}
    _check(out, cos, sin, pid, f"{name} over KServe v2")


def test_a_grids_text_tokens_are_counted_beside_the_image():
    """A grid's text tokens follow the image's (its size is frames x height x width + text, not
    their product): a long caption beside a large latent is answered, one past the limit refused."""
    name = "Lumina2Transformer2DModel"
    got = compute(
        "rope", {"hf_config": {"_class_name": name}, "grid": {"text": 300, "height": 64, "width": 64}}
    )
    assert got["cos"].shape[0] == 64 * 64 + 300
    with pytest.raises(SpecError) as e:
        compute(
            "rope",
            {"hf_config": {"_class_name": name}, "grid": {"text": 1 << 16, "height": 1024, "width": 1024}},
        )
    assert e.value.loc == ("grid",) and "tokens" in e.value.msg, e.value


def test_the_python_client_asks_by_grid(served):
    """posenc's HTTP client (service/client.py) sends the config and the grid as any field: the
    class's own module's cos/sin come back."""
    from posenc.service.client import PosencClient

    name = "WanTransformer3DModel"
    _, module = _built(name)
    f, h, w = GRIDS[0]
    pid, (cos, sin) = _positions(name, module, GRIDS[0])
    with PosencClient(served.url) as c:
        got = c.rope(hf_config={"_class_name": name}, grid={"frames": f, "height": h, "width": w})
    _check(got, cos, sin, pid, f"{name} PosencClient")


def test_the_torch_drop_in_reads_the_engines_tables(served):
    """posenc.torch.DiffusersPosEmbed with ``client=`` (the engine's shared tables) gives Flux 2's
    own module's (cos, sin)."""
    from posenc.engine.reader.client import Client
    from posenc.torch import DiffusersPosEmbed

    name = "Flux2Transformer2DModel"
    model, module = _built(name)
    pid, _ = _positions(name, module, GRIDS[0])
    ids = _ids(pid)
    drop = DiffusersPosEmbed(model, client=Client(namespace=served.namespace))
    got = dict(zip(("cos", "sin"), (t.double().numpy() for t in drop(ids))))
    cos, sin = _real(module(ids))
    _check(got, cos, sin, pid, f"{name} DiffusersPosEmbed(client=)")
