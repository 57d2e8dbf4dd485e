"""Multi-axis and grid rows over HTTP against the floor, beside a plain RoPE row, in one run:
``posenc serve --lane on`` (one worker, core 0) and the floor (the raw-ASGI app returning
posenc's bytes, loadtest/floors/asgi_app.py) measured by wrk (core 1), as tests/bench/bench_lane.py does.

    python tests/bench/bench_multiaxis_lane.py [--seconds 2] [--rounds 3] [--seed 1]

Each case cycles 32 bodies whose positions are drawn at random over the table and past it (a
tenth of the bodies reach past the 32,768-row tables); the mrope (Qwen2.5-VL) and axes (Flux)
cases send position_ids (the template shortcut gathers each column at its axis's position,
service/shortcut/hot_axes.c); the grid cases ask for rows of a ViT grid (stored whole: one stored
row each) and of SD3's 192 x 192 grid (per-axis tables: service/shortcut/hot_grid.c assembles a
row from them). Printed per round: requests/s at 64 connections, p50 at one, and the
ratio lane/floor per case; then each case's median ratio over the rounds (cases and servers
alternate within a round, so a noisy spell touches all of them).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import httpx
import numpy as np

from posenc.loadtest.drivers import wrk as wrk_tool
from posenc.loadtest.floors.asgi_app import save_bodies
from posenc.loadtest.servers import free_port, start_floor, start_posenc

SERVER_CPU, CLIENT_CPU = "0", "1"
ACCEPT = "application/x-safetensors"
ROPE = {"head_dim": 128, "rope_theta": 1e6}
FLUX = {"head_dim": 128, "axes_dim": [16, 56, 56], "layout": "interleaved"}
VIT = {"embed_dim": 768, "grid_size": 14, "extra_tokens": 1}  # stored whole
SD3 = {"embed_dim": 1536, "grid_size": 192, "base_size": 64}  # per-axis tables
CONFIG = {
    "length": 32768,
    "tables": [
        {"family": "rope", "spec": ROPE},
        {"family": "rope", "spec": {k: v for k, v in FLUX.items() if k != "layout"}},
        {"family": "sinusoidal-grid", "spec": VIT},
        {"family": "sinusoidal-grid", "spec": SD3},
    ],
}


def cases(rng) -> dict:
    past = lambda: 40000 if rng.random() < 0.1 else 32768  # noqa: E731 - a tenth past the table
    return {
        "rope 1 row": (
            "/v1/rope",
            [{**ROPE, "positions": [int(rng.integers(0, past()))]} for _ in range(32)],
        ),
        "mrope 1 row": (
            "/v1/rope",
            [
                {
                    **ROPE,
                    "mrope_section": [16, 24, 24],
                    "position_ids": rng.integers(0, past(), (3, 1)).tolist(),
                }
                for _ in range(32)
            ],
        ),
        "flux axes 1 row": (
            "/v1/rope",
            [{**FLUX, "position_ids": rng.integers(0, past(), (3, 1)).tolist()} for _ in range(32)],
        ),
        "ViT grid 1 row": (
            "/v1/sinusoidal-grid",
            [{**VIT, "positions": [int(rng.integers(0, 197))]} for _ in range(32)],
        ),
        "SD3 grid 1 row": (
            "/v1/sinusoidal-grid",
            [{**SD3, "positions": [int(rng.integers(0, 192 * 192))]} for _ in range(32)],
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    work = cases(rng)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "tables.json")
        with open(cfg, "w") as f:
            json.dump(CONFIG, f)
        lane = start_posenc(
            free_port(), f"bench-{os.getpid()}", tables=cfg, cpus=SERVER_CPU, args=("--lane", "on")
        )
        servers = {"lane": lane}
        try:
            lane.wait_ready()
            bodies = {}
            for path, items in work.values():
                for body in items[:3]:  # the first answers teach the worker its templates
                    r = httpx.post(lane.url + path, json=body, headers={"accept": ACCEPT})
                    assert r.status_code == 200, r.text
                bodies[path] = (r.headers["content-type"], r.content)
            save_bodies(os.path.join(tmp, "bodies.json"), bodies)
            servers["floor"] = start_floor(
                free_port(), bodies=os.path.join(tmp, "bodies.json"), cpus=SERVER_CPU
            )
            servers["floor"].wait_ready()
            print(
                "| round | case | lane req/s | floor req/s | lane/floor | lane p50 µs | floor p50 µs |\n"
                "|---|---|---|---|---|---|---|"
            )
            ratios = {name: [] for name in work}
            load = os.getloadavg()[0]
            for rnd in range(args.rounds):
                for name, (path, items) in work.items():
                    lua = os.path.join(tmp, "case.lua")
                    wrk_tool.script(lua, [(path, ACCEPT, json.dumps(b).encode()) for b in items])
                    got = {}
                    for kind, s in servers.items():
                        many = wrk_tool.run(s.url, lua, args.seconds, 64, cpus=CLIENT_CPU, timeout_s=10)
                        one = wrk_tool.run(s.url, lua, args.seconds, 1, cpus=CLIENT_CPU, timeout_s=10)
                        got[kind] = (many["rps"], one["latency_us"]["p50"])
                    ratios[name].append(got["lane"][0] / got["floor"][0])
                    print(
                        f"| {rnd + 1} | {name} | {got['lane'][0]:.0f} | {got['floor'][0]:.0f} | {ratios[name][-1]:.2f} "
                        f"| {got['lane'][1]:.0f} | {got['floor'][1]:.0f} |"
                    )
            print(
                f"\nmedian lane/floor over {args.rounds} rounds (load average {load:.2f} before, "
                f"{os.getloadavg()[0]:.2f} after): "
                + ", ".join(f"{name} {float(np.median(r)):.2f}" for name, r in ratios.items())
            )
        finally:
            for s in servers.values():
                s.stop()


if __name__ == "__main__":
    main()
