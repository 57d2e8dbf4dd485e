"""`posenc compute` as a user runs it: a subprocess writing .npz / .safetensors files."""

import json

import numpy as np
import pytest

from posenc.engine.answer.pipeline import compute


@pytest.fixture
def posenc(procs):
    """``python -m posenc ARGS...`` run from the test's own directory, as a user runs it."""
    return procs.posenc


def test_compute_rope_bfloat16_npz(posenc, tmp_path):
    spec = {
        "head_dim": 64,
        "max_position_embeddings": 4096,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
        "positions": {"start": 0, "stop": 300},
        "dtype": "bfloat16",
    }
    out = tmp_path / "rope.npz"
    r = posenc("compute", "rope", "--spec", json.dumps(spec), "--out", str(out))
    assert r.returncode == 0, r.stderr
    z = np.load(out)
    ref = compute("rope", spec)
    assert {"cos", "sin", "inv_freq", "attention_scaling"} <= set(z.files)
    assert z["cos"].dtype == np.uint16 and z["cos"].tobytes() == ref["cos"].tobytes()
    assert z["inv_freq"].dtype == np.float32 and z["inv_freq"].tobytes() == ref["inv_freq"].tobytes()
    assert z["attention_scaling"].shape == () and z["attention_scaling"].dtype == np.float64
    assert float(z["attention_scaling"]) == ref["attention_scaling"]
    torch = pytest.importorskip("torch")
    assert torch.from_numpy(z["sin"]).view(torch.bfloat16).shape == (300, 64)


def test_compute_from_file_to_safetensors(posenc, tmp_path):
    spec = {
        "num_heads": 12,
        "query": [7],
        "key": {"start": 0, "stop": 8},
        "mask_future": True,
        "dtype": "float16",
    }
    (tmp_path / "alibi.json").write_text(json.dumps(spec))
    out = tmp_path / "alibi.safetensors"
    r = posenc("compute", "alibi", "--spec", f"@{tmp_path / 'alibi.json'}", "--out", str(out))
    assert r.returncode == 0, r.stderr
    import safetensors.numpy as st  # the test extra installs it

    got = st.load_file(str(out))
    ref = compute("alibi", spec)
    assert got["bias"].dtype == np.float16 and got["bias"].tobytes() == ref["bias"].tobytes()
    assert got["slopes"].tobytes() == ref["slopes"].tobytes()


def test_compute_t5_int32(posenc, tmp_path):
    out = tmp_path / "t5.npz"
    r = posenc("compute", "t5-buckets", "--spec", '{"query": [0, 5], "key": [0, 200]}', "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert np.load(out)["buckets"].dtype == np.int32


@pytest.mark.parametrize(
    "spec,field",
    [
        ('{"head_dim": "64", "positions": [1]}', "head_dim"),
        (
            '{"head_dim": 64, "positions": [1], "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}',
            "rope_scaling.low_freq_factor",
        ),
        ('{"head_dim": 64, "positions": [1], "dtpye": "float16"}', "dtpye"),
        ('{"head_dim": 64, "positions": [', "spec"),
        ("@/nonexistent/spec.json", "spec"),
    ],
)
def test_invalid_spec_exits_2_naming_the_field(posenc, tmp_path, spec, field):
    out = tmp_path / "x.npz"
    r = posenc("compute", "rope", "--spec", spec, "--out", str(out))
    assert r.returncode == 2
    assert f"{field}:" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


def test_size_limit_and_its_flag(posenc, tmp_path):
    spec = json.dumps({"head_dim": 128, "positions": {"start": 0, "stop": 70000}})
    out = tmp_path / "big.npz"
    r = posenc("compute", "rope", "--spec", spec, "--out", str(out))
    assert r.returncode == 2 and "--max-bytes" in r.stderr and not out.exists()
    r = posenc("compute", "rope", "--spec", spec, "--out", str(out), "--max-bytes", str(2**27))
    assert r.returncode == 0, r.stderr
    assert np.load(out)["cos"].shape == (70000, 128)
