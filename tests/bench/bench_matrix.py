"""Every request form against the raw-ASGI floor: family x selection form x encoding x inside or past
the table x /v1 or v2. A script, not a test:

    python tests/bench/bench_matrix.py [--seconds 2] [--rounds 1] [--requests 256] [--cells SUBSTRING]
        [--p50]

One ``posenc serve --lane on`` worker (its engine too) pinned to core 0, wrk (loadtest/drivers/wrk.py,
closed loop, 64 connections) pinned to core 1. A cell is --requests distinct requests drawn at
random (seeded per cell), which wrk cycles through:

- families and their configured tables: rope (head_dim 128, 32,768 rows), sinusoidal (d_model 768,
  8,192 rows), alibi (32 heads, 65,536 distances), t5-buckets (32 buckets, max_distance 128: the
  table holds every distance up to 128, past which the buckets saturate);
- inside the table: every position below its length; past it: positions from its length to four
  times it (for ALiBi and T5, query-key distances past the stored ones);
- /v1 selection forms: rows families a list of 1, a list of 16, a range of 16 (``{"start", "stop"}``)
  and a range of 16 with ``step`` 3; block families one query against 16 keys, as lists and as
  ranges; each in safetensors and in JSON;
- v2 REST infers (``POST /v2/models/{family}/infer``): binary tensors (INT64, the inference header
  in JSON before them) of 1 and 16 positions, or one query and 16 keys, and JSON tensors of 16
  (the answer in JSON); v2 has no range form.

Two floors (loadtest/floors/asgi_app.py under uvicorn, pinned to core 0 as posenc) answer every
request of every cell with the bytes posenc answered it with, one for the safetensors cells and
one for the JSON ones (a /v1 body may be the same in both). Cell after cell, posenc then its
floor, so both see the same stretch of the machine. Printed per cell: requests/s of posenc and of
the floor and their ratio, with --p50 the p50 at one connection of each, and the share of
posenc's answers a C path made (posenc_answer_path_total, read with prometheus_client's parser,
over the cell's run: c + shortcut against python). A share below 100% is a cell the full path
answers: docs/benchmarks.md says why for each.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from posenc.loadtest.drivers import wrk as loadtest_wrk  # noqa: E402
from posenc.loadtest.floors.asgi_app import save_requests  # noqa: E402
from posenc.loadtest.servers import free_port, start_floor, start_posenc  # noqa: E402
from posenc.loadtest.workloads import mix, payloads  # noqa: E402

SERVER_CPU, CLIENT_CPU = "0", "1"
ST, JSON = payloads.BINARY, payloads.JSON
FAMILIES = {  # name -> (its spec, its table's length: rows or distances)
    "rope": ({"head_dim": 128}, 32768),
    "sinusoidal": ({"d_model": 768}, 8192),
    "alibi": ({"num_heads": 32}, 65536),
    "t5-buckets": ({"num_buckets": 32, "max_distance": 128}, 128),  # the table: rel in [-128, 128]
}
BLOCKS = ("alibi", "t5-buckets")
CONFIG = {
    "tables": [
        {"family": f, "spec": s, **({} if f == "t5-buckets" else {"length": n})}
        for f, (s, n) in FAMILIES.items()
    ]
}


def v1(family: str, accept: str, selection: dict) -> tuple:
    return mix.encode(family, FAMILIES[family][0], "v1-json" if accept == JSON else "v1-binary", selection)


def v2_binary(family: str, **inputs: list) -> tuple:
    """A v2 REST infer of INT64 binary tensors ({name: positions})."""
    return mix.encode(family, FAMILIES[family][0], "v2-binary", inputs)


def v2_json(family: str, **inputs: list) -> tuple:
    return mix.encode(family, FAMILIES[family][0], "v2-json", inputs)


def _span(r: random.Random, family: str, past: bool, n: int, step: int = 1) -> int:
    """A start such that n positions step apart lie inside the table, or all past it."""
    length = FAMILIES[family][1]
    width = (n - 1) * step
    return r.randrange(length, 4 * length - width) if past else r.randrange(0, length - width)


def _points(r: random.Random, family: str, past: bool, n: int) -> list:
    length = FAMILIES[family][1]
    return [r.randrange(length, 4 * length) if past else r.randrange(length) for _ in range(n)]


def _block(r: random.Random, family: str, past: bool) -> tuple[int, list]:
    """One query and 16 keys whose distances lie inside the table (or past it)."""
    length = FAMILIES[family][1]
    if past:
        q = r.randrange(length + 16, 4 * length)
        return q, [r.randrange(0, q - length) for _ in range(16)]
    q = r.randrange(16, 4 * length)
    return q, [r.randrange(max(0, q - length + 1), q + 1) for _ in range(16)]


def cells() -> dict:
    """{name: maker of one request from a seeded generator}, the whole matrix."""
    out = {}
    for family, past in itertools.product(FAMILIES, (False, True)):
        where = "past" if past else "in"
        if family in BLOCKS:
            forms = {
                "1x16 lists": lambda r, f=family, p=past: (lambda q, k: {"query": [q], "key": k})(
                    *_block(r, f, p)
                ),
                "1x16 ranges": lambda r, f=family, p=past: _ranges(r, f, p),
            }
        else:
            forms = {
                "list 1": lambda r, f=family, p=past: {"positions": _points(r, f, p, 1)},
                "list 16": lambda r, f=family, p=past: {"positions": _points(r, f, p, 16)},
                "range 16": lambda r, f=family, p=past: _range(r, f, p, 1),
                "range 16 step 3": lambda r, f=family, p=past: _range(r, f, p, 3),
            }
        for form, make in forms.items():
            for enc, accept in (("binary", ST), ("json", JSON)):
                out[f"{family} | {form} | {enc} | {where} | v1"] = lambda r, f=family, m=make, a=accept: v1(
                    f, a, m(r)
                )
        if family in BLOCKS:
            out[f"{family} | 1x16 tensors | binary | {where} | v2"] = lambda r, f=family, p=past: (
                lambda q, k: v2_binary(f, query=[q], key=k)
            )(*_block(r, f, p))
            out[f"{family} | 1x16 tensors | json | {where} | v2"] = lambda r, f=family, p=past: (
                lambda q, k: v2_json(f, query=[q], key=k)
            )(*_block(r, f, p))
        else:
            for n in (1, 16):
                out[f"{family} | tensor {n} | binary | {where} | v2"] = lambda r, f=family, p=past, n=n: (
                    v2_binary(f, positions=_points(r, f, p, n))
                )
            out[f"{family} | tensor 16 | json | {where} | v2"] = lambda r, f=family, p=past: v2_json(
                f, positions=_points(r, f, p, 16)
            )
    return out


def _range(r: random.Random, family: str, past: bool, step: int) -> dict:
    start = _span(r, family, past, 16, step)
    sel = {"start": start, "stop": start + 15 * step + 1}
    return {"positions": sel if step == 1 else {**sel, "step": step}}


def _ranges(r: random.Random, family: str, past: bool) -> dict:
    """One query and a range of 16 keys, every distance inside the table (or past it)."""
    length = FAMILIES[family][1]
    if past:
        q = r.randrange(length + 16, 4 * length)
        k0 = r.randrange(0, q - length - 15)
    else:
        q = r.randrange(16, 4 * length)
        k0 = r.randrange(max(0, q - length + 1), q - 14)
    return {"query": {"start": q, "stop": q + 1}, "key": {"start": k0, "stop": k0 + 16}}


def c_answers(url: str) -> dict:
    """{(route, path): answers} of posenc_answer_path_total."""
    text = httpx.get(url + "/metrics").text
    return {
        (s.labels["route"], s.labels["path"]): s.value
        for fam in text_string_to_metric_families(text)
        if fam.name == "posenc_answer_path"
        for s in fam.samples
        if s.name.endswith("_total")
    }


def c_share(before: dict, after: dict, route: str) -> float:
    d = {p: after.get((route, p), 0) - before.get((route, p), 0) for p in ("c", "shortcut", "python")}
    total = sum(d.values())
    return (d["c"] + d["shortcut"]) / total if total else float("nan")


def wrk(url: str, lua: str, seconds: float, connections: int) -> dict:
    """One wrk run pinned to CLIENT_CPU (loadtest/drivers/wrk.py): requests/s and p50; any error raises."""
    return loadtest_wrk.run_clean(url, lua, seconds, connections, cpus=CLIENT_CPU)


def prepare(tmp: str, matrix: dict, n: int):
    cfg = os.path.join(tmp, "tables.json")
    with open(cfg, "w") as f:
        json.dump(CONFIG, f)
    posenc = start_posenc(
        free_port(), f"bmatrix-{uuid.uuid4().hex[:6]}", tables=cfg, cpus=SERVER_CPU, args=("--lane", "on")
    )
    posenc.wait_ready()
    scripts, answers = {}, {"binary": [], "json": []}
    with httpx.Client(base_url=posenc.url, timeout=30) as client:
        for i, (name, make) in enumerate(matrix.items()):
            rng = random.Random(5000 + i)
            reqs = [make(rng) for _ in range(n)]
            enc = name.split(" | ")[2]
            for path, headers, body in reqs:
                res = client.post(path, content=body, headers=headers)
                if res.status_code != 200:
                    raise RuntimeError(f"{name}: posenc answered {res.status_code}: {res.text[:300]}")
                extra = [
                    (h, res.headers[h]) for h in ("inference-header-content-length",) if h in res.headers
                ]
                answers[enc].append((path, body, res.headers.get("content-type", ""), res.content, extra))
            scripts[name] = os.path.join(tmp, f"cell{i}.lua")
            loadtest_wrk.script(scripts[name], reqs)
    floors = {}
    for enc, got in answers.items():
        saved = os.path.join(tmp, f"floor-{enc}.json")
        save_requests(saved, got)
        floors[enc] = start_floor(free_port(), requests=saved, cpus=SERVER_CPU)
    for f in floors.values():
        f.wait_ready()
    return posenc, floors, scripts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--requests", type=int, default=256, help="distinct random requests per cell")
    ap.add_argument("--cells", help="only the cells whose name holds this text (e.g. 'rope |')")
    ap.add_argument("--p50", action="store_true", help="also the p50 at one connection")
    a = ap.parse_args()
    matrix = {k: v for k, v in cells().items() if not a.cells or a.cells in k}
    runs: dict = {}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        posenc, floors, scripts = prepare(tmp, matrix, a.requests)
        try:
            for name in matrix:  # a pass over each pool: texts rendered, rows past a table kept
                wrk(posenc.url, scripts[name], 1, 64)
            for _ in range(a.rounds):
                for name in matrix:
                    family, _, enc, _, api = name.split(" | ")
                    route = f"/v1/{family}" if api == "v1" else f"/v2/models/{family}/infer"
                    before = c_answers(posenc.url)
                    p = wrk(posenc.url, scripts[name], a.seconds, 64)
                    share = c_share(before, c_answers(posenc.url), route)
                    f = wrk(floors[enc].url, scripts[name], a.seconds, 64)
                    got = {"rps": p["rps"], "floor_rps": f["rps"], "c": share}
                    if a.p50:
                        got["p50"] = wrk(posenc.url, scripts[name], a.seconds, 1)["p50_us"]
                        got["floor_p50"] = wrk(floors[enc].url, scripts[name], a.seconds, 1)["p50_us"]
                    runs.setdefault(name, []).append(got)
                    print(f"{name}: {got}", file=sys.stderr, flush=True)
        finally:
            posenc.stop()
            for fl in floors.values():
                fl.stop()
    print(
        f"# bench_matrix: {a.rounds} round(s) of {a.seconds:g} s per cell, {a.requests} requests per cell, "
        f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after\n"
    )
    head = "| family | selection | encoding | table | api | posenc/s | floor/s | ratio | C |"
    if a.p50:
        head += " p50 µs | floor p50 |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for name, rs in runs.items():
        m = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        row = (
            f"| {name} | {m['rps']:,.0f} | {m['floor_rps']:,.0f} | {m['rps'] / m['floor_rps']:.2f}x "
            f"| {m['c']:.0%} |"
        )
        if a.p50:
            row += f" {m['p50']:.0f} | {m['floor_p50']:.0f} |"
        print(row)


if __name__ == "__main__":
    main()
