"""The gRPC lane (service/grpclane) against grpcio: a script, not a test.

    python tests/bench/bench_grpc_lane.py [--rounds 5] [--seconds 2]

Servers pinned to core 0, h2load (C) to core 1. Up the whole run: ``posenc serve`` with the lane
(``--grpc-lane auto``) and without it (``off``: grpcio alone, as before the lane), each with one gRPC
process. Each round draws one request at random (h2load sends one body again and again, so the
draws vary by round, not by request): a RoPE spec of several (plain, llama3-scaled, a small head),
1 to 16 positions over the model's context and past it; both posenc servers learn it first (the
full path answers it twice), and the two grpcio floors (loadtest/floors/grpc_server.py: grpcio's
asyncio and sync servers returning those bytes, parsing nothing) start for the round with posenc's
answer. Then, in turn: p50 at one stream (1 x 1, h2load's request log), calls/s at 4 connections
x 16 streams, and ModelStreamInfer messages/s (4 x 16 streams of 16 messages each). In the same
round the same row goes to the lane's server over HTTP/1.1 (a v2 REST binary infer, learnt the same
way, which its HTTP lane answers: wrk, 64 connections, one call each in flight as 4 x 16 streams
have, p50 at one connection), for the gRPC lane's ratio to the HTTP/1.1 lane. The figures are
medians over the rounds, with each target's ratio to the asyncio floor measured in the same round.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from posenc.loadtest.drivers import h2load  # noqa: E402
from posenc.loadtest.drivers import wrk as loadtest_wrk  # noqa: E402
from posenc.loadtest.servers import Server, free_port, start_posenc  # noqa: E402
from posenc.loadtest.workloads.payloads import v2_grpc_request, v2_rest_body  # noqa: E402
from tests.bench.bench_kserve import grpc_call  # noqa: E402

SERVER_CPU, CLIENT_CPU = "0", "1"
SPECS = [  # (spec, its context): positions are drawn up to twice the context
    ({"head_dim": 128, "rope_theta": 500000.0}, 8192),
    (
        {
            "head_dim": 128,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        },
        131072,
    ),
    ({"head_dim": 64}, 4096),
]
STREAM_MESSAGES = 16
HTTP1_CONNECTIONS = 64  # as many calls in flight as 4 connections x 16 streams
TARGETS = ("lane", "grpcio", "floor", "sync_floor")


def draw(rng: random.Random) -> tuple[dict, list]:
    spec, context = rng.choice(SPECS)
    return spec, [rng.randrange(0, 2 * context) for _ in range(rng.choice((1, 1, 4, 16)))]


def floor(kind: str, response: str) -> Server:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "posenc.loadtest.floors.grpc_server",
        "--port",
        str(port),
        "--response",
        response,
    ]
    return Server(
        f"grpc {kind}", cmd + (["--sync"] if kind == "sync_floor" else []), port, "/", cpus=SERVER_CPU
    )


def measure(port: int, unary: str, stream: str, seconds: float, log: str) -> dict:
    base = f"http://127.0.0.1:{port}"
    one = h2load.run(base + h2load.INFER, unary, n=1500, log=log, cpus=CLIENT_CPU)
    many = h2load.run(base + h2load.INFER, unary, seconds=seconds, c=4, m=16, cpus=CLIENT_CPU)
    msgs = h2load.run(base + h2load.STREAM_INFER, stream, seconds=seconds, c=4, m=16, cpus=CLIENT_CPU)
    return {"p50_us": one["p50_us"], "rps": many["rps"], "stream_msgs": msgs["rps"] * STREAM_MESSAGES}


def measure_http1(server, spec: dict, positions: list, seconds: float, lua: str) -> dict:
    """The same row as a v2 REST binary infer over HTTP/1.1 to ``server`` (learnt first: the full
    path answers it twice, then the HTTP lane): p50 at one connection, calls/s at HTTP1_CONNECTIONS."""
    import httpx

    body, hl = v2_rest_body(spec, positions)
    path = "/v2/models/rope/infer"
    headers = {"Inference-Header-Content-Length": str(hl), "Content-Type": "application/octet-stream"}
    for _ in range(3):
        r = httpx.post(server.url + path, content=body, headers=headers, timeout=30)
        assert r.status_code == 200, r.text
    loadtest_wrk.script(lua, [(path, headers, body)])
    one = loadtest_wrk.run_clean(server.url, lua, seconds, 1, cpus=CLIENT_CPU)
    many = loadtest_wrk.run_clean(server.url, lua, seconds, HTTP1_CONNECTIONS, cpus=CLIENT_CPU)
    return {"p50_us": one["p50_us"], "rps": many["rps"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=37)
    a = ap.parse_args()
    if not h2load.available() or not loadtest_wrk.available():
        raise SystemExit("needs h2load and wrk (apt-get install nghttp2-client wrk)")
    rng = random.Random(a.seed)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        posenc = {}
        try:
            for name, lane in (("lane", "auto"), ("grpcio", "off")):
                gport = free_port()
                posenc[name] = (
                    start_posenc(
                        free_port(),
                        f"bench-{uuid.uuid4().hex[:6]}",
                        cpus=SERVER_CPU,
                        grpc_port=gport,
                        args=("--grpc-lane", lane, "--grpc-workers", "1"),
                    ),
                    gport,
                )
            for s, _ in posenc.values():
                s.wait_ready()
            for r in range(a.rounds):
                spec, positions = draw(rng)
                req = v2_grpc_request(spec, positions)
                answers = {
                    name: [grpc_call(p, "ModelInfer", req) for _ in range(3)]
                    for name, (_, p) in posenc.items()
                }
                assert len({a for got in answers.values() for a in got}) == 1, "the lane's answer is grpcio's"
                response = os.path.join(tmp, f"response-{r}.bin")
                with open(response, "wb") as f:
                    f.write(answers["lane"][0])
                unary = h2load.write_frames(os.path.join(tmp, f"unary-{r}.bin"), [req])
                stream = h2load.write_frames(os.path.join(tmp, f"stream-{r}.bin"), [req] * STREAM_MESSAGES)
                floors = {kind: floor(kind, response) for kind in ("floor", "sync_floor")}
                try:
                    for f in floors.values():
                        grpc_call(f.port, "ModelInfer", req)  # waits for it to bind
                    ports = {
                        **{n: p for n, (_, p) in posenc.items()},
                        **{k: f.port for k, f in floors.items()},
                    }
                    row = {"spec": json.dumps(spec)[:40], "n": len(positions)}
                    for t in TARGETS:
                        row[t] = measure(
                            ports[t], unary, stream, a.seconds, os.path.join(tmp, f"{t}-{r}.log")
                        )
                finally:
                    for f in floors.values():
                        f.stop()
                lua = os.path.join(tmp, f"http1-{r}.lua")
                row["http1"] = measure_http1(posenc["lane"][0], spec, positions, a.seconds, lua)
                rows.append(row)
                print(
                    f"round {r + 1}: {row['n']} positions of {row['spec']}: "
                    + ", ".join(
                        f"{t} {row[t]['rps']:.0f}/s p50 {row[t]['p50_us']:.0f} us"
                        for t in (*TARGETS, "http1")
                    ),
                    flush=True,
                )
        finally:
            for s, _ in posenc.values():
                s.stop()
    report(rows)
    return 0


def report(rows: list[dict]) -> None:
    def med(f):
        return statistics.median(f(r) for r in rows)

    print(f"\nmedians of {len(rows)} rounds (ratios to the asyncio floor in the same round):")
    print(
        "| target | calls/s at 4 x 16 | x floor | p50 at 1 stream (us) | x floor | stream messages/s | x floor |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    names = {"lane": "posenc, the lane", "grpcio": "posenc, grpcio alone", "floor": "grpcio asyncio floor"}
    for t in TARGETS:
        print(
            f"| {names.get(t, 'grpcio sync floor')} | {med(lambda r: r[t]['rps']):,.0f} "
            f"| {med(lambda r: r[t]['rps'] / r['floor']['rps']):.2f} "
            f"| {med(lambda r: r[t]['p50_us']):.0f} | {med(lambda r: r[t]['p50_us'] / r['floor']['p50_us']):.2f} "
            f"| {med(lambda r: r[t]['stream_msgs']):,.0f} "
            f"| {med(lambda r: r[t]['stream_msgs'] / r['floor']['stream_msgs']):.2f} |"
        )
    print(
        f"| posenc, the HTTP/1.1 lane (v2 REST binary, {HTTP1_CONNECTIONS} connections) "
        f"| {med(lambda r: r['http1']['rps']):,.0f} | {med(lambda r: r['http1']['rps'] / r['floor']['rps']):.2f} "
        f"| {med(lambda r: r['http1']['p50_us']):.0f} "
        f"| {med(lambda r: r['http1']['p50_us'] / r['floor']['p50_us']):.2f} | | |"
    )
    print(
        f"lane stream messages / lane unary calls: {med(lambda r: r['lane']['stream_msgs'] / r['lane']['rps']):.2f}"
    )
    print(
        "gRPC lane calls/s / HTTP/1.1 lane calls/s (the same row, the same round): "
        f"{med(lambda r: r['lane']['rps'] / r['http1']['rps']):.2f}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
