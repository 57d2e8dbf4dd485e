"""No cliffs (issue 21): the hot lane one step away from its benchmark's shape, against the raw-ASGI
floor returning the same bytes. A script, not a test:

    python tests/bench/bench_cliffs.py [--seconds 3] [--rounds 3] [--requests 4096] [--floor each|one] [--perf CASE]

One `posenc serve --lane on` worker pinned to core 0, wrk (C, closed loop) pinned to core 1. Each
case is a list of requests with positions drawn at random (seeded), which wrk cycles through:
- rope in table: one RoPE row (head_dim 128, θ 10000; the configured table holds 32,768 rows),
  a position in 0 .. 32,767, safetensors;
- rope past table: the same spec, a position in 32,768 .. 131,071 (computed in C);
- sinusoidal 4 rows: d_model 768 (table 8,192 rows), four positions in 0 .. 9,999 (across the
  table's end and past it);
- v2 rest 1 row: `POST /v2/models/rope/infer`, binary (one INT64 position in 0 .. 131,071, the
  inference header in JSON before it), the spec of the first case;
- rope 16 rows json: sixteen positions in 0 .. 32,767, Accept: application/json;
- sinusoidal 4 rows json: the sinusoidal case's requests, Accept: application/json (its interleaved
  rows' texts kept in the output's order: service/shortcut/hot_json.c);
- v2 json 16 rows: `POST /v2/models/rope/infer` with JSON tensors (an INT64 "data" list of sixteen
  positions in 0 .. 65,535: inside the table and past it; no binary data), the answer in JSON.
- v2 alibi 1x16: `POST /v2/models/alibi/infer`, binary, float32 (32 heads; the configured table
  holds 65,536 distances): one INT64 query and sixteen INT64 keys, each in 0 .. 131,071 (blocks of
  distances inside the table and past it: the cells are computed from the slopes either way).
- alibi json: 32 heads (the configured table holds 65,536 distances), one query t in 0 .. 131,071
  against 16 keys drawn from 0 .. t (as the load test's realistic mix asks), Accept:
  application/json: each cell formatted in C (service/shortcut/hot_alibi.c, hot_f32text.c).
- rope 16-row range, rope 16-row range json: `"positions": {"start": s, "stop": s + 16}` with s in
  0 .. 99,999 (the table holds 32,768 rows: most ranges lie past it), binary and JSON.
--cases NAME,NAME runs only those cases.
Every server stays up the whole run: posenc, and one floor per case (loadtest/floors/asgi_app.py under
uvicorn with posenc's settings). With --floor each (the default) the floor answers every request
of the case with the bytes posenc answered it with (content type and headers too), as the
realistic mix's floor (bench_mix.py, posenc loadtest) does: with positions drawn at random, that is
"the same bytes". With --floor one it answers every request with posenc's answer to the case's
first request (the floor of the runs before 2026-12-02): its one answer stays in the cache, which
no server of random positions has.
Round after round each case is measured on posenc then on its floor, so both see the same stretch
of a shared machine. Printed: per round and as medians, requests/s at 64 connections, p50 at one
connection, the ratios posenc/floor, and the share of posenc's answers the lane gave (/v1/tables lane_answers
over wrk's requests), and the cores posenc's processes used at 64 connections (/proc CPU time; 1.0: its pinned
core saturated, so the figure is the server's, not the client's). --perf CASE then samples posenc's processes
with linux-perf during one more run of that case and prints the top symbols. wrk cycles
through the --requests distinct requests of a case (after a 2 s warm-up pass over each): a row
past a table is computed the first time it is asked and kept by the worker after that
(templates.KEEP_BYTES), as is a stored row's JSON text, so these are the figures of recurring
positions; --in-process --no-keep gives the cost of computing every such row.

--in-process [--no-keep]: no sockets, no engine. Each /v1 case's requests answered by the lane's C entry
(templates.answer_request) from tables built in memory as the engine builds them, the v2 binary
cases' positions by fill() and fill_block(), the v2 JSON case's bodies by the lane's v2 route: µs per request
(best of 5), what the cases cost posenc in C and Python beside the HTTP work, which the floor does too.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import statistics
import subprocess
import tempfile
import uuid

import httpx
import numpy as np

from posenc.loadtest.drivers import wrk as loadtest_wrk
from posenc.loadtest.floors.asgi_app import save_bodies, save_requests
from posenc.loadtest.servers import free_port, start_floor, start_posenc
from posenc.loadtest.workloads import scenario

SERVER_CPU, CLIENT_CPU = "0", "1"
ROPE = {"head_dim": 128}
ALIBI = {"num_heads": 32}
CONFIG = {
    "tables": [
        {"family": "rope", "spec": ROPE, "length": 32768},
        {"family": "sinusoidal", "spec": {"d_model": 768}, "length": 8192},
        {"family": "alibi", "spec": ALIBI, "length": 65536},
    ]
}
ST, JSON = "application/x-safetensors", "application/json"


def v1(path: str, accept: str, body: dict) -> tuple:
    return path, {"Accept": accept, "Content-Type": "application/json"}, json.dumps(body).encode()


def v2_rest(model: str, spec: dict, **inputs: list) -> tuple:
    """A v2 REST binary infer of INT64 ``inputs`` ({name: positions})."""
    arrays = {n: np.asarray(v, np.int64) for n, v in inputs.items()}
    head = json.dumps(
        {
            "parameters": {"spec": json.dumps(spec), "binary_data_output": True},
            "inputs": [
                {
                    "name": n,
                    "datatype": "INT64",
                    "shape": [a.size],
                    "parameters": {"binary_data_size": a.nbytes},
                }
                for n, a in arrays.items()
            ],
        }
    ).encode()
    return (
        f"/v2/models/{model}/infer",
        {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(head))},
        head + b"".join(a.tobytes() for a in arrays.values()),
    )


def v2_json(positions: list) -> tuple:
    body = json.dumps(
        {
            "parameters": {"spec": json.dumps(ROPE)},
            "inputs": [
                {"name": "positions", "datatype": "INT64", "shape": [len(positions)], "data": positions}
            ],
        }
    ).encode()
    return "/v2/models/rope/infer", {"Content-Type": "application/json"}, body


CASES = {  # name -> request maker of a seeded random generator
    "rope in table": lambda r: v1("/v1/rope", ST, {**ROPE, "positions": [r.randrange(32768)]}),
    "rope past table": lambda r: v1("/v1/rope", ST, {**ROPE, "positions": [r.randrange(32768, 131072)]}),
    "sinusoidal 4 rows": lambda r: v1(
        "/v1/sinusoidal", ST, {"d_model": 768, "positions": [r.randrange(10000) for _ in range(4)]}
    ),
    "v2 rest 1 row": lambda r: v2_rest("rope", ROPE, positions=[r.randrange(131072)]),
    "rope 16 rows json": lambda r: v1(
        "/v1/rope", JSON, {**ROPE, "positions": [r.randrange(32768) for _ in range(16)]}
    ),
    "sinusoidal 4 rows json": lambda r: v1(
        "/v1/sinusoidal", JSON, {"d_model": 768, "positions": [r.randrange(10000) for _ in range(4)]}
    ),
    "v2 json 16 rows": lambda r: v2_json([r.randrange(65536) for _ in range(16)]),
    # ranges, as a prefill or a feature batch sends them: 16 rows starting anywhere over 0-100,000
    # (the table holds 32,768: about two in three are past it)
    "rope 16-row range": lambda r: v1("/v1/rope", ST, {**ROPE, "positions": _range16(r)}),
    "rope 16-row range json": lambda r: v1("/v1/rope", JSON, {**ROPE, "positions": _range16(r)}),
    "v2 alibi 1x16": lambda r: v2_rest(
        "alibi", ALIBI, query=[r.randrange(131072)], key=[r.randrange(131072) for _ in range(16)]
    ),
    "alibi json": lambda r: alibi_row(r, r.randrange(131072)),
}
SEEDS = {name: 1000 + i for i, name in enumerate(CASES)}  # each case's requests, whichever cases run


def _range16(r: random.Random) -> dict:
    start = r.randrange(100_000)
    return {"start": start, "stop": start + 16}


def alibi_row(r: random.Random, q: int) -> tuple:
    return v1(
        "/v1/alibi", JSON, {**ALIBI, "query": [q], "key": sorted(r.randrange(q + 1) for _ in range(16))}
    )


def wrk(url: str, lua: str, seconds: float, connections: int) -> dict:
    """One wrk run pinned to CLIENT_CPU (loadtest/drivers/wrk.py): requests/s and p50; any error raises."""
    return loadtest_wrk.run_clean(url, lua, seconds, connections, cpus=CLIENT_CPU)


def _procs() -> dict:
    """{pid: (parent pid, CPU seconds user + system)} of every process, from /proc."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                f = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            out[int(d)] = (int(f[1]), (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK"))
    return out


def tree(pid: int, procs: dict) -> set:
    """``pid`` and every process below it (posenc serve: its worker, the engine)."""
    got, grew = {pid}, True
    while grew:
        new = {q for q, (pp, _) in procs.items() if pp in got} - got
        got |= new
        grew = bool(new)
    return got


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid``'s process tree."""
    procs = _procs()
    return sum(procs[q][1] for q in tree(pid, procs) if q in procs)


def perf_top(pid: int, seconds: float, out: str, n: int = 12) -> str:
    """The top ``n`` symbols of posenc's processes over ``seconds`` (linux-perf, cpu-clock sampling:
    no hardware counters needed)."""
    pids = sorted(tree(pid, _procs()))
    subprocess.run(
        [
            "perf",
            "record",
            "-e",
            "cpu-clock",
            "-F",
            "2000",
            "-o",
            out,
            "-p",
            ",".join(map(str, pids)),
            "--",
            "sleep",
            str(seconds),
        ],
        capture_output=True,
        timeout=seconds + 60,
        check=True,
    )
    rep = subprocess.run(
        ["perf", "report", "-i", out, "--no-children", "--sort", "dso,sym", "--stdio"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return "\n".join([x for x in rep.splitlines() if x.strip() and not x.startswith("#")][:n])


def lane_answers(url: str) -> int:
    return httpx.get(url + "/v1/tables").json()["lane_answers"]


def prepare(tmp: str, n: int, floor: str = "each") -> tuple:
    """posenc, one floor per case (answering as ``floor`` says: see the module's doc), and each
    case's requests and wrk script."""
    cfg = os.path.join(tmp, "tables.json")
    with open(cfg, "w") as f:
        json.dump(CONFIG, f)
    posenc = start_posenc(
        free_port(), f"bench-{uuid.uuid4().hex[:6]}", tables=cfg, cpus=SERVER_CPU, args=("--lane", "on")
    )
    posenc.wait_ready()
    assert httpx.get(posenc.url + "/v1/tables").json()["lane"] == "on"
    floors, scripts = {}, {}
    for i, (name, make) in enumerate(CASES.items()):
        rng = random.Random(SEEDS[name])
        reqs = [make(rng) for _ in range(n)]
        for path, headers, body in reqs[:2]:  # the full path answers, and learns at the second
            r = httpx.post(posenc.url + path, content=body, headers=headers)
            assert r.status_code == 200, r.text
        if floor == "one":
            bodies = os.path.join(tmp, f"bodies{i}.json")
            save_bodies(bodies, {reqs[0][0]: (r.headers["content-type"], r.content)})
            floors[name] = start_floor(free_port(), bodies=bodies, cpus=SERVER_CPU)
        else:  # every request's own answer, as the load test's floors have them
            answered = os.path.join(tmp, f"requests{i}.json")
            save_requests(answered, [scenario.answer(posenc.url, p, h, b, name) for p, h, b in reqs])
            floors[name] = start_floor(free_port(), requests=answered, cpus=SERVER_CPU)
        scripts[name] = os.path.join(tmp, f"case{i}.lua")
        loadtest_wrk.script(scripts[name], reqs)
    for f in floors.values():
        f.wait_ready()
    return posenc, floors, scripts


def plot(runs: dict, path: str, load: list) -> None:
    """posenc/floor req/s of each case, round by round (points) and their median (bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6))
    for j, rs in enumerate(runs.values()):
        ratios = [r["rps"] / r["floor_rps"] for r in rs]
        ax.bar(j, statistics.median(ratios), 0.6, color="#9ecae1")
        ax.plot([j] * len(ratios), ratios, "o", color="#08519c", ms=4)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axhline(2.5, color="grey", lw=0.8, ls="--")
    ax.set_xticks(range(len(runs)), [n.replace(" ", "\n", 1) for n in runs], fontsize=8)
    ax.set_ylabel("posenc req/s / raw-ASGI floor")
    ax.set_title(
        f"One server core, wrk on the other: per round (dots), median (bars); load {load[0]:.1f}-{load[1]:.1f}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def in_process(n: int, keep: bool, reps: int = 20000) -> None:
    import sys

    import orjson

    from posenc.engine.answer import pipeline
    from posenc.service.shortcut import templates as replay

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from tests.service.shortcut.test_templates_in_memory import view_of

    lengths = {t["family"]: t["length"] for t in CONFIG["tables"]}
    if not keep:  # every row past a table computed each time (JSON texts cannot be kept: declined)
        replay._hot.configure(**(replay.native_rules(replay.current()) | {"keep_bytes": 0}))
    for name, make in CASES.items():
        if not keep and "json" in name:
            continue
        rng = random.Random(SEEDS[name])
        reqs = [make(rng) for _ in range(n)]
        path, headers, body = reqs[0]
        if (
            path == "/v2/models/alibi/infer"
        ):  # the block the v2 shortcut fills: the /v1 template's, from raw query and key
            req = pipeline.parse("alibi", {**ALIBI, "query": [0], "key": [0]}, lengths["alibi"])
            t = replay.block_template(req, view_of(req.table), 1 << 20, 1 << 26)
            calls = [
                lambda b=b: replay.fill_block(t, b[-136:-128], b[-128:], (8, 8), False, (b"", b""))
                for _, _, b in reqs
            ]
            timed(name, calls, n, reps)
            continue
        family = path.rsplit("/", 1)[1] if path.startswith("/v1") else "rope"
        first = body if path.startswith("/v1") else orjson.dumps({**ROPE, "positions": [1]})
        req = pipeline.parse(family, orjson.loads(first), lengths[family])
        templates = replay.Templates()  # learnt from the first request's bytes, as the service learns
        for _ in range(2):  # (at its second answer: service/shortcut/store.py)
            templates.learn(
                "json" if headers.get("Accept") == JSON else "safetensors", first, req, view_of(req.table)
            )
        if path.startswith("/v2") and "json" in name:  # the lane's v2 route with one JSON-tensor entry
            t = replay.flat_json_template(
                req, view_of(req.table), (b"", b"", b""), replay.Limits(64, 1 << 20, 1 << 24)
            )
            key = replay.v2_cut(body, b'"data"')[0]
            route = {
                path.encode(): (
                    None,
                    0,
                    {},
                    b"inference-header-content-length",
                    (),
                    (b'"data"', {key: (t, (16,), False, b"\r\n")}),
                )
            }
            datas = [
                b"POST %s HTTP/1.1\r\ncontent-length: %d\r\n\r\n%s" % (p.encode(), len(b), b)
                for p, _, b in reqs
            ]
            calls = [
                lambda d=d: replay.answer_request(d, 0, ({}, route), {}, {}, (b"", b"", b""), b"", False)
                for d in datas
            ]
        elif path.startswith("/v2"):
            t = replay.rows_template(req, view_of(req.table))
            calls = [lambda b=b: replay.fill(t, b[-8:], 8, (b"", b"", b"")) for _, _, b in reqs]
        else:
            accepts = {ST.encode(): 0, JSON.encode(): 1}
            datas = [
                b"POST %s HTTP/1.1\r\naccept: %s\r\ncontent-length: %d\r\n\r\n%s"
                % (p.encode(), h["Accept"].encode(), len(b), b)
                for p, h, b in reqs
            ]
            calls = [
                lambda d=d: replay.answer_request(
                    d, 0, {path.encode(): (family, 0)}, accepts, templates.native, (b"", b"", b""), b"", False
                )
                for d in datas
            ]
        timed(name, calls, n, reps)


def timed(name: str, calls: list, n: int, reps: int) -> None:
    """µs per call of ``calls`` cycled (best of 5), each answered."""
    import time

    assert all(c() for c in calls), name  # answered (and every JSON text rendered once)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for k in range(reps):
            calls[k % n]()
        best = min(best, time.perf_counter() - t0)
    print(f"{name:<20} {best / reps * 1e6:6.2f} µs per request in C and its call", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=4096, help="distinct random requests per case")
    ap.add_argument("--in-process", action="store_true", help="the cases' cost in C, no sockets")
    ap.add_argument("--no-keep", action="store_true", help="with --in-process: rows past a table never kept")
    ap.add_argument("--plot", help="write the per-round ratios to this PNG")
    ap.add_argument(
        "--perf", metavar="CASE", help="after the rounds, where posenc's time goes in CASE (linux-perf)"
    )
    ap.add_argument("--cases", help="comma-separated case names (default: every case)")
    ap.add_argument(
        "--floor",
        choices=("each", "one"),
        default="each",
        help="the floor answers each request with posenc's answer to it, or every one with the first's",
    )
    a = ap.parse_args()
    if a.cases:
        for name in set(CASES) - set(a.cases.split(",")):
            del CASES[name]
    if a.in_process:
        return in_process(a.requests, not a.no_keep)
    runs: dict = {}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        posenc, floors, scripts = prepare(tmp, a.requests, a.floor)
        try:
            for name in CASES:  # a pass over each pool first: JSON texts rendered, rows past a table kept
                wrk(posenc.url, scripts[name], 2, 64)
            for rnd in range(a.rounds):
                for name in CASES:
                    p, f, served = {}, {}, 0
                    for k, c in (("many", 64), ("one", 1)):  # posenc, then its floor, at each load
                        before, cpu = lane_answers(posenc.url), tree_cpu_s(posenc.proc.pid)
                        p[k] = wrk(posenc.url, scripts[name], a.seconds, c)
                        served += lane_answers(posenc.url) - before
                        if k == "many":  # cores posenc used: 1.0 is its pinned core saturated
                            cores = (tree_cpu_s(posenc.proc.pid) - cpu) / max(1, round(a.seconds))
                        f[k] = wrk(floors[name].url, scripts[name], a.seconds, c)
                    share = served / (p["many"]["requests"] + p["one"]["requests"])
                    got = {
                        "rps": p["many"]["rps"],
                        "p50": p["one"]["p50_us"],
                        "floor_rps": f["many"]["rps"],
                        "floor_p50": f["one"]["p50_us"],
                        "lane_share": share,
                        "cores": cores,
                    }
                    runs.setdefault(name, []).append(got)
                    print(
                        f"round {rnd + 1} {name}: posenc {got['rps']:.0f}/s p50 {got['p50']} µs, floor "
                        f"{got['floor_rps']:.0f}/s p50 {got['floor_p50']} µs, "
                        f"ratio {got['rps'] / got['floor_rps']:.2f}, "
                        f"lane {share:.1%}, posenc {cores:.2f} cores",
                        flush=True,
                    )
            if a.perf:
                print(f"\nwhere posenc's time goes in {a.perf!r} (perf record -e cpu-clock, top symbols):")
                with concurrent.futures.ThreadPoolExecutor(1) as ex:
                    load_run = ex.submit(wrk, posenc.url, scripts[a.perf], a.seconds + 2, 64)
                    print(perf_top(posenc.proc.pid, a.seconds, os.path.join(tmp, "perf.data")))
                    load_run.result()
        finally:
            posenc.stop()
            for f in floors.values():
                f.stop()
    load.append(os.getloadavg()[0])
    print(
        f"\nmedians over {a.rounds} rounds (load average {load[0]:.2f} before, {load[1]:.2f} after; floor: {a.floor})"
    )
    print(
        f"{'case':<20} {'posenc/s':>9} {'floor/s':>9} {'ratio':>6} {'p50 µs':>7} {'floor':>6} {'lane':>6} {'cores':>6}"
        "  per-round ratios"
    )
    for name, rs in runs.items():
        m = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        ratios = [r["rps"] / r["floor_rps"] for r in rs]
        print(
            f"{name:<20} {m['rps']:>9.0f} {m['floor_rps']:>9.0f} {statistics.median(ratios):>6.2f} {m['p50']:>7.0f} "
            f"{m['floor_p50']:>6.0f} {m['lane_share']:>6.1%} {m['cores']:>6.2f}  {' '.join(f'{x:.2f}' for x in ratios)}"
        )
    if a.plot:
        plot(runs, a.plot, load)
        print(f"plot: {a.plot}")


if __name__ == "__main__":
    main()
