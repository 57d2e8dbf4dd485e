"""The engine's files in /dev/shm: modes and group, the memory budget's LRU eviction, and
`posenc engine --dry-run` sizes.
"""

from __future__ import annotations

import json
import os
import re
import stat

import numpy as np
import pytest

from posenc.engine.answer.pipeline import compute
from tests.children.bits import bits_equal, digest_of
from tests.integration.engine_cases import FULL_CONFIG, ON_DEMAND_LENGTH, SMALL_CONFIG, reader, seg_files
from tests.procs import CLI_MODULE, PYTHON, wait_for
from tests.shm import SHM_DIR, assert_no_leftovers, shm_files

# ---------------------------------------------------------------------------------------------
# Permissions


def _modes(ns) -> dict[str, tuple[int, int]]:
    out = {}
    for n in shm_files(ns):
        st = os.stat(os.path.join(SHM_DIR, n))
        out[n] = (stat.S_IMODE(st.st_mode), st.st_gid)
    return out


def test_tables_are_sealed_segments_and_the_namespace_files_are_private(ns, procs):
    eng = procs.engine(SMALL_CONFIG, ns)
    eng.client().table("rope", {"head_dim": 8, "rope_theta": 31.0})  # an on-demand segment too
    # rope config has two dtypes, + on-demand (waited for: a build may still be on its way)
    segs = wait_for(
        lambda: s if len(s := seg_files(eng)) == len(SMALL_CONFIG["tables"]) + 2 else None,
        10,
        0.02,
        "the engine to hold exactly its tables",
    )
    assert sorted(e["file"] for e in eng.manifest()["tables"].values()) == segs
    modes = _modes(
        ns
    )  # no table in /dev/shm: the manifest (head and table log), the socket and the lock only
    assert sorted(modes) == sorted(f"{ns}.{n}" for n in ("manifest.json", "manifest.log", "sock", "lock")), (
        modes
    )
    assert modes[f"{ns}.manifest.json"][0] == 0o600 and modes[f"{ns}.manifest.log"][0] == 0o600
    assert modes[f"{ns}.sock"][0] & 0o077 == 0, oct(modes[f"{ns}.sock"][0])
    assert eng.stop() == 0


def _other_group() -> tuple[str, int]:
    """A group other than ours when one exists (so that the chown is visible), else ours."""
    import grp

    mine = os.getgid()
    for g in grp.getgrall():
        if g.gr_gid != mine and (os.getuid() == 0 or g.gr_gid in os.getgroups()):
            return g.gr_name, g.gr_gid
    return grp.getgrgid(mine).gr_name, mine


@pytest.mark.parametrize("by", ["name", "gid"])
def test_group_option_opens_the_socket_and_manifest_to_that_group(ns, procs, by):
    name, gid = _other_group()
    eng = procs.engine(SMALL_CONFIG, ns, args=["--group", name if by == "name" else str(gid)])
    eng.client().table("rope", {"head_dim": 8, "rope_theta": 31.0})
    modes = _modes(ns)
    assert any(not e["pinned"] for e in eng.manifest()["tables"].values())
    assert modes[f"{ns}.manifest.json"] == (0o640, gid) and modes[f"{ns}.manifest.log"] == (0o640, gid)
    sock_mode, sock_gid = modes[f"{ns}.sock"]
    assert sock_gid == gid and sock_mode & 0o060 == 0o060 and sock_mode & 0o007 == 0, oct(sock_mode)
    assert eng.stop() == 0


# ---------------------------------------------------------------------------------------------
# Memory budget


def _rope8(theta: float) -> dict:
    return {"head_dim": 8, "rope_theta": theta}


def _rope8_nbytes() -> int:
    # cos and sin [131072, 4] float32, inv_freq64 [4] float64, inv_freq [4] float32
    return 2 * ON_DEMAND_LENGTH * 4 * 4 + 4 * 8 + 4 * 4


def test_memory_budget_evicts_lru_unpinned_and_mapped_readers_keep_reading(ns, procs, tmp_path):
    budget = int(2.5 * _rope8_nbytes())  # two on-demand tables fit, a third does not
    eng = procs.engine(SMALL_CONFIG, ns, args=["--memory-budget", str(budget)])
    pinned = {d for d, e in eng.manifest()["tables"].items() if e["pinned"]}
    go = tmp_path / "go"
    # An unrelated reader maps tables 1 and 2 and holds them.
    r = reader(
        procs, ns, "hold", specs=[_rope8(1001.0), _rope8(1002.0)], rows=[0, 1, 77777, 131071], go=str(go)
    )
    d1, d2 = r.wait_json(lambda m: "mapped" in m, timeout=60)["mapped"]
    c = eng.client()
    # Ask for table 1 again: table 2 becomes the least recently used.
    from posenc.engine.answer import pipeline

    key = pipeline.parse("rope", {**_rope8(1001.0), "positions": [0]}).table.key
    assert c.call({"op": "ensure", "table": key})["ok"]
    d3 = digest_of(c.table("rope", _rope8(1003.0)))
    m = eng.manifest()
    assert d2 not in m["tables"], "the least recently used table was not evicted"
    assert {d1, d3} <= set(m["tables"]) and pinned <= set(m["tables"])
    assert not [n for n in seg_files(eng) if n.endswith(d2)], "the engine still holds the evicted segment"
    assert sum(e["nbytes"] for e in m["tables"].values() if not e["pinned"]) <= budget
    assert "evicted" in eng.stderr()
    go.touch()
    r.expect_exit(0)  # still reads the evicted table 2 correctly through its mapping
    # Next build evicts table 1 (now the oldest); configured tables are older still and stay.
    d4 = digest_of(c.table("rope", _rope8(1004.0)))
    m = eng.manifest()
    assert d1 not in m["tables"] and {d3, d4} <= set(m["tables"]) and pinned <= set(m["tables"])
    # A table bigger than the whole budget is not stored, and evicts nothing; a request for it is
    # still answered, computed exactly (docs/reference.md: no table limits positions).
    from posenc.engine.core.errors import NotStored

    with pytest.raises(NotStored):
        c.table("rope", {"head_dim": 64, "rope_theta": 1005.0})
    body = {"head_dim": 64, "rope_theta": 1005.0, "positions": [0, 7, 70000]}
    assert bits_equal(c.lookup("rope", body), compute("rope", body))
    assert set(eng.manifest()["tables"]) == set(m["tables"])
    assert eng.stop() == 0


# ---------------------------------------------------------------------------------------------
# posenc engine --dry-run


def _expected_bytes(cfg: dict) -> list[int]:
    """Per configured table, rows × width × itemsize of each stored array, from the config alone."""
    item = {"float32": 4, "float16": 2, "bfloat16": 2}
    out = []
    for t in cfg["tables"]:
        fam, spec = t["family"], t["spec"]
        n = t.get("length", cfg.get("length", ON_DEMAND_LENGTH))
        for dt in t.get("dtypes", ["float32"]):
            if fam == "rope":
                half = int(spec["head_dim"] * spec.get("partial_rotary_factor", 1.0)) // 2
                sets = 2 if (spec.get("rope_scaling") or {}).get("rope_type") == "longrope" else 1
                # cos, sin [n, d/2] + inv_freq in float64 and float32
                out += [2 * n * half * item[dt] + half * (8 + 4)] * sets
            elif fam == "sinusoidal":
                d = spec["d_model"]
                width = 2 * (d // 2) if spec.get("layout") == "fairseq" else d
                freqs = d // 2 if spec.get("layout") == "fairseq" else (d + 1) // 2  # + freqs64 [h] float64
                out.append(n * width * item[dt] + freqs * 8)
            elif fam == "alibi":
                out.append(spec["num_heads"] * n * item[dt] + spec["num_heads"] * 8)
            elif fam == "sinusoidal-grid":  # one [side, D/2] table per axis (2-D)
                g = spec["grid_size"]
                h, w = (g, g) if isinstance(g, int) else g
                out.append((h + w) * (spec["embed_dim"] // 2) * item[dt])
            else:
                out.append((2 * spec.get("max_distance", 128) + 1) * 4)  # int32 LUT over [-r, r]
            if fam == "t5-buckets":
                break
    return out


def _dry_run(procs, ns, tables_path=None):
    argv = [PYTHON, "-m", CLI_MODULE, "engine", "--dry-run", "--namespace", ns]
    if tables_path:
        argv += ["--tables", tables_path]
    p = procs.run(argv)
    assert p.returncode == 0, p.stderr
    sizes = [
        int(line.split()[-1]) for line in p.stdout.splitlines()[1:] if line and not line.startswith("total")
    ]
    total = int(re.search(r"^total (\d+) bytes", p.stdout, re.M).group(1))
    return sizes, total, p.stdout


def test_dry_run_prints_table_bytes_and_total(ns, procs, tmp_path):
    path = tmp_path / "tables.json"
    path.write_text(json.dumps(FULL_CONFIG))
    sizes, total, text = _dry_run(procs, ns, str(path))
    want = _expected_bytes(FULL_CONFIG)
    assert sorted(sizes) == sorted(want), text
    assert total == sum(want), text
    assert_no_leftovers(ns)
    # ... and it is what a running engine maps: the arrays of its segments add up to the total.
    eng = procs.engine(FULL_CONFIG, ns)
    arrays = [a for e in eng.manifest()["tables"].values() for a in e["arrays"].values()]
    assert sum(int(np.prod(a["shape"])) * np.dtype(a["dtype"]).itemsize for a in arrays) == total
    assert eng.stop() == 0


def test_dry_run_of_the_default_config(ns, procs):
    from posenc.engine.process.configured import DEFAULT_CONFIG

    sizes, total, text = _dry_run(procs, ns)
    want = _expected_bytes(DEFAULT_CONFIG)
    assert sorted(sizes) == sorted(want), text
    assert total == sum(want)
    assert 150 * 2**20 < total < 256 * 2**20, total  # right-sized, not 1.4 GiB
    assert_no_leftovers(ns)
