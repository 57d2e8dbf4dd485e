"""KServe v2 / gRPC benchmark. A script, not a test:

    python tests/bench/bench_kserve.py [--seconds 5]

Servers pinned to core 0, clients (C: h2load for gRPC, wrk for HTTP) to core 1. Every server is
up the whole run and each pair is measured in turn, round after round (``--rounds``), so a ratio
compares figures taken seconds apart on the same (shared, noisy) machine; the medians come last:
- gRPC unary, one RoPE row (head_dim 128, the family model with its spec): p50 at one stream and
  requests/s (4 connections x 16 streams), posenc against the gRPC floor (loadtest/floors/grpc_server.py:
  a minimal grpcio asyncio server returning the same bytes);
- v2 REST binary, the same row: p50 at one connection and requests/s at 32, against the raw ASGI
  floor (loadtest/floors/asgi_app.py) returning the same bytes, and /v1's hot path for the same row;
- a [64, 128] batch against 64 single [128] requests (gRPC, positions/s, 1 connection x 4 streams),
  with the answers in the response (8 MiB per batch) and written into a client-registered system
  shared-memory region (``--shm``-style requests: only cos and sin, in the region); and the same
  8 MiB answer from a second gRPC floor, the most any server in Python could send this way;
- ModelStreamInfer: messages/s on one stream (h2load sends one stream of 1000 messages per
  request) against unary calls/s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

import grpc
import httpx
import numpy as np
import orjson

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from posenc.loadtest.drivers import h2load  # noqa: E402
from posenc.loadtest.drivers import wrk as wrk_tool  # noqa: E402
from posenc.loadtest.floors.asgi_app import save_bodies  # noqa: E402
from posenc.loadtest.servers import Server, free_port, start_floor, start_posenc  # noqa: E402
from posenc.service.v2.proto import grpc_service_pb2 as pb  # noqa: E402

SERVER_CPU, CLIENT_CPU = "0", "1"
SPEC = {"head_dim": 128, "rope_theta": 500000.0}
CONFIG = {"length": 16384, "tables": [{"name": "rope-128", "family": "rope", "spec": SPEC}]}
METHOD = "/inference.GRPCInferenceService/"
STREAM_MESSAGES = 1000


# -- requests --------------------------------------------------------------------------------
def infer_request(positions: np.ndarray, model: str = "rope", region: str | None = None) -> bytes:
    """A ModelInferRequest; with ``region``, cos and sin are asked into that shared-memory region."""
    r = pb.ModelInferRequest(model_name=model)
    if model == "rope":
        r.parameters["spec"].string_param = json.dumps(SPEC)
    r.inputs.add(name="positions", datatype="INT64", shape=list(positions.shape))
    half = positions.size * SPEC["head_dim"] * 4
    for i, name in enumerate(("cos", "sin") if region else ()):
        o = r.outputs.add(name=name)
        o.parameters["shared_memory_region"].string_param = region
        o.parameters["shared_memory_byte_size"].int64_param = half
        o.parameters["shared_memory_offset"].int64_param = i * half
    r.raw_input_contents.append(positions.astype(np.int64).tobytes())
    return r.SerializeToString()


def v2_rest_body(positions: list) -> tuple[bytes, str]:
    head = orjson.dumps(
        {
            "parameters": {"spec": json.dumps(SPEC), "binary_data_output": True},
            "inputs": [
                {
                    "name": "positions",
                    "datatype": "INT64",
                    "shape": [len(positions)],
                    "parameters": {"binary_data_size": 8 * len(positions)},
                }
            ],
        }
    )
    return head + np.array(positions, np.int64).tobytes(), str(len(head))


# -- clients ---------------------------------------------------------------------------------
def grpc_load(url: str, data: str, **kw) -> dict:
    return h2load.run(url, data, cpus=CLIENT_CPU, **kw)


def grpc_call(port: int, method: str, request: bytes) -> bytes:
    """One call with a real client, checking the answer is OK (h2load does not read trailers)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", -1)]) as ch:
        return ch.unary_unary(METHOD + method)(
            request, timeout=30, wait_for_ready=True
        )  # (gRPC may bind after /readyz)


def wrk_v2(url: str, path: str, body: bytes, headers: dict, seconds: float, tmp: str) -> dict:
    lua = os.path.join(tmp, "v2.lua")
    wrk_tool.script(lua, [(path, headers, body)])  # loadtest's own script: the one request, cycled
    got = {}
    for conns in (1, 32):
        got[conns] = r = wrk_tool.run(url, lua, seconds, conns, cpus=CLIENT_CPU)
        if r["failures"]:
            raise RuntimeError(f"wrk saw errors: {r['errors']}")
    return {
        "p50_us": got[1]["latency_us"]["p50"],
        "p99_us": got[1]["latency_us"]["p99"],
        "rps": got[32]["rps"],
    }


# -- the run -----------------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--rounds", type=int, default=3, help="every pair measured in turn, this many times")
    ap.add_argument("--only", default="grpc,rest,batch,stream", help="which comparisons (comma-separated)")
    a = ap.parse_args()
    only = set(a.only.split(","))
    if not (h2load.available() and shutil.which("wrk")):
        raise SystemExit("needs h2load (apt-get install nghttp2-client) and wrk")
    rng = np.random.default_rng(3)
    row = np.array([4096])
    batch = rng.integers(0, 16384, size=(64, 128))
    rounds: list[dict] = []
    region = f"posenc_bench_{uuid.uuid4().hex[:8]}"  # the client's shared memory: /dev/shm/<region>
    with tempfile.TemporaryDirectory() as tmp, shm_region(region, 2 * batch.size * SPEC["head_dim"] * 4):
        files = {}
        for name, msgs in {
            "row": [infer_request(row)],
            "batch": [infer_request(batch)],
            "single": [infer_request(batch[0])],
            "batch shm": [infer_request(batch, region=region)],
            "single shm": [infer_request(batch[0], region=region)],
            "stream": [infer_request(row)] * STREAM_MESSAGES,
        }.items():
            files[name] = h2load.write_frames(os.path.join(tmp, f"{name}.bin"), msgs)
        cfg = os.path.join(tmp, "tables.json")
        with open(cfg, "w") as f:
            json.dump(CONFIG, f)
        servers = []
        try:
            # every server up the whole run, all on the server core; measured in turn, round by round
            port, gport, fport = free_port(), free_port(), free_port()
            posenc = start_posenc(
                port, f"bench-{uuid.uuid4().hex[:6]}", tables=cfg, cpus=SERVER_CPU, grpc_port=gport
            )
            servers.append(posenc)
            posenc.wait_ready()
            response = grpc_call(gport, "ModelInfer", infer_request(row))  # also waits for gRPC to attach
            grpc_call(
                gport,
                "SystemSharedMemoryRegister",
                pb.SystemSharedMemoryRegisterRequest(
                    name=region, key="/" + region, offset=0, byte_size=2 * batch.size * SPEC["head_dim"] * 4
                ).SerializeToString(),
            )
            for m in (batch, batch[0]):
                grpc_call(gport, "ModelInfer", infer_request(m))
                grpc_call(gport, "ModelInfer", infer_request(m, region=region))
            with open(os.path.join(tmp, "response.bin"), "wb") as f:
                f.write(response)
            with open(os.path.join(tmp, "batch-response.bin"), "wb") as f:
                f.write(grpc_call(gport, "ModelInfer", infer_request(batch)))
            rest_body, hl = v2_rest_body([4096])
            hdr = {"Inference-Header-Content-Length": hl, "Content-Type": "application/octet-stream"}
            r = httpx.post(posenc.url + "/v2/models/rope/infer", content=rest_body, headers=hdr)
            v1_body = orjson.dumps({**SPEC, "positions": [4096]})
            v1_hdr = {"Accept": "application/x-safetensors", "Content-Type": "application/json"}
            v1 = httpx.post(posenc.url + "/v1/rope", content=v1_body, headers=v1_hdr)
            assert r.status_code == 200 and v1.status_code == 200, (r.text, v1.text)
            floor = Server(
                "grpc floor",
                [
                    sys.executable,
                    "-m",
                    "posenc.loadtest.floors.grpc_server",
                    "--port",
                    str(fport),
                    "--response",
                    os.path.join(tmp, "response.bin"),
                ],
                fport,
                "/",
                cpus=SERVER_CPU,
            )
            servers.append(floor)
            bport = free_port()
            servers.append(
                Server(
                    "grpc floor",
                    [
                        sys.executable,
                        "-m",
                        "posenc.loadtest.floors.grpc_server",
                        "--port",
                        str(bport),
                        "--response",
                        os.path.join(tmp, "batch-response.bin"),
                    ],
                    bport,
                    "/",
                    cpus=SERVER_CPU,
                )
            )
            bodies = os.path.join(tmp, "floor.json")
            save_bodies(bodies, {"/v2/models/rope/infer": (r.headers["content-type"], r.content)})
            asgi = start_floor(free_port(), bodies=bodies, cpus=SERVER_CPU)
            servers.append(asgi)
            asgi.wait_ready()
            time.sleep(1.0)
            assert grpc_call(fport, "ModelInfer", infer_request(row)) == response
            assert grpc_call(bport, "ModelInfer", infer_request(batch)) == big_answer(tmp)
            g, fg = f"http://127.0.0.1:{gport}{METHOD}", f"http://127.0.0.1:{fport}{METHOD}"
            bg = f"http://127.0.0.1:{bport}{METHOD}"
            for i in range(a.rounds):
                res = {}
                for who, url in (("grpc", g), ("floor", fg)):
                    if "grpc" in only or "stream" in only:
                        res[f"{who} rps"] = grpc_load(
                            url + "ModelInfer", files["row"], seconds=a.seconds, c=4, m=16
                        )
                    if "grpc" in only:
                        res[f"{who} p50"] = grpc_load(
                            url + "ModelInfer", files["row"], n=3000, log=os.path.join(tmp, f"{who}.log")
                        )
                    if "stream" in only:
                        res[f"{who} stream"] = grpc_load(url + "ModelStreamInfer", files["stream"], n=20)
                if "stream" in only:
                    res["grpc 1 stream rps"] = grpc_load(
                        g + "ModelInfer", files["row"], seconds=a.seconds, c=1, m=1
                    )
                if "batch" in only:
                    for name in ("batch", "single", "batch shm", "single shm"):
                        res[name] = grpc_load(g + "ModelInfer", files[name], seconds=a.seconds, c=1, m=4)
                    res["floor batch"] = grpc_load(
                        bg + "ModelInfer", files["batch"], seconds=a.seconds, c=1, m=4
                    )
                    # the same 64 KiB requests, answered with the row's 1.4 KB: the most a batch into
                    # shared memory could get (its answer is ~200 B)
                    res["floor batch shm"] = grpc_load(
                        fg + "ModelInfer", files["batch shm"], seconds=a.seconds, c=1, m=4
                    )
                if "rest" in only:
                    res["v2 rest"] = wrk_v2(
                        posenc.url, "/v2/models/rope/infer", rest_body, hdr, a.seconds, tmp
                    )
                    res["asgi floor v2"] = wrk_v2(
                        asgi.url, "/v2/models/rope/infer", rest_body, hdr, a.seconds, tmp
                    )
                    res["v1 hot path"] = wrk_v2(posenc.url, "/v1/rope", v1_body, v1_hdr, a.seconds, tmp)
                print(f"round {i + 1} (load average {os.getloadavg()[0]:.1f})", flush=True)
                report(res, len(response), len(r.content))
                rounds.append(res)
        finally:
            for s in reversed(servers):
                s.stop()
    print(f"\nmedians over {len(rounds)} rounds:")
    report(
        {k: {f: statistics.median(x[k][f] for x in rounds) for f in rounds[0][k]} for k in rounds[0]},
        len(response),
        len(r.content),
    )
    print("medians of the per-round ratios (each ratio of figures taken seconds apart):")
    for name, f in RATIOS.items():
        try:
            per = [f(x) for x in rounds]
        except KeyError:
            continue
        print(f"  {name}: {statistics.median(per):.2f}x  (rounds: {', '.join(f'{v:.2f}' for v in per)})")
    print(json.dumps(rounds))
    return 0


RATIOS = {  # the targets the KServe v2 paths are held to, per round
    "gRPC unary p50 / floor p50 [<= 1.3]": lambda x: x["grpc p50"]["p50_us"] / x["floor p50"]["p50_us"],
    "v2 REST p50 / raw-ASGI floor p50 [<= 1.3]": lambda x: (
        x["v2 rest"]["p50_us"] / x["asgi floor v2"]["p50_us"]
    ),
    "batch / single positions/s, 8 MiB answers [>= 20]": lambda x: (
        64 * x["batch"]["rps"] / x["single"]["rps"]
    ),
    "  the floor's 8 MiB answers / posenc's single positions/s": lambda x: (
        64 * x["floor batch"]["rps"] / x["single"]["rps"]
    ),
    "batch / single positions/s, into shared memory [>= 20]": lambda x: (
        64 * x["batch shm"]["rps"] / x["single shm"]["rps"]
    ),
    "stream messages/s / unary calls/s (4x16) [>= 2]": lambda x: (
        STREAM_MESSAGES * x["grpc stream"]["rps"] / x["grpc rps"]["rps"]
    ),
}


def big_answer(tmp: str) -> bytes:
    with open(os.path.join(tmp, "batch-response.bin"), "rb") as f:
        return f.read()


class shm_region:
    """A client's system shared-memory region: /dev/shm/<name> of ``size`` bytes, removed after."""

    def __init__(self, name: str, size: int):
        self.path, self.size = f"/dev/shm/{name}", size

    def __enter__(self):
        with open(self.path, "wb") as f:
            f.truncate(self.size)
        return self

    def __exit__(self, *exc):
        os.unlink(self.path)


def report(res: dict, grpc_bytes: int, rest_bytes: int) -> None:
    if "grpc p50" in res:
        gp, fp = res["grpc p50"], res["floor p50"]
        print(
            f"gRPC unary RoPE row ({grpc_bytes} B response): p50 {gp['p50_us']:.0f} µs (p99 {gp['p99_us']:.0f}) vs "
            f"floor {fp['p50_us']:.0f} µs (p99 {fp['p99_us']:.0f}): {gp['p50_us'] / fp['p50_us']:.2f}x   "
            "[target <= 1.3x]"
        )
    if "grpc rps" in res:
        gr, fr = res["grpc rps"]["rps"], res["floor rps"]["rps"]
        print(
            f"gRPC unary req/s on one core (4 conns x 16 streams): {gr:.0f} vs floor {fr:.0f}: {gr / fr:.2f}x"
        )
    if "v2 rest" in res:
        report_rest(res, rest_bytes)
    if "batch" in res:
        report_batch(res)
    if "grpc stream" in res:
        report_stream(res)


def report_rest(res: dict, rest_bytes: int) -> None:
    v2, af, v1 = res["v2 rest"], res["asgi floor v2"], res["v1 hot path"]
    print(
        f"v2 REST binary row ({rest_bytes} B): p50 {v2['p50_us']} µs vs raw-ASGI floor {af['p50_us']} µs: "
        f"{v2['p50_us'] / af['p50_us']:.2f}x [target <= 1.3x]; /v1 hot path p50 {v1['p50_us']} µs"
    )
    print(
        f"   req/s (32 conns): v2 {v2['rps']:.0f}, floor {af['rps']:.0f} ({v2['rps'] / af['rps']:.2f}x), "
        f"/v1 hot path {v1['rps']:.0f} (v2/v1 {v2['rps'] / v1['rps']:.2f}x)"
    )


def report_batch(res: dict) -> None:
    for shm in ("", " shm"):
        bp, sp = res["batch" + shm]["rps"] * 64 * 128, res["single" + shm]["rps"] * 128
        where = " (cos, sin into the client's shared memory)" if shm else " (8 MiB responses)"
        print(
            f"[64, 128] batch{where}: {res['batch' + shm]['rps']:.1f} req/s = {bp:.0f} positions/s; single [128]: "
            f"{res['single' + shm]['rps']:.0f} req/s = {sp:.0f} positions/s: {bp / sp:.1f}x   [target >= 20x]"
        )
    fb = res["floor batch"]["rps"]
    print(
        f"   the gRPC floor sending the same 8 MiB: {fb:.1f} req/s = {fb * 64 * 128:.0f} positions/s, "
        f"{fb * 64 * 128 / (res['single']['rps'] * 128):.1f}x posenc's single [128]; posenc's batch is "
        f"{res['batch']['rps'] / fb:.2f}x the floor's"
    )
    fs = res["floor batch shm"]["rps"]
    print(
        f"   the gRPC floor taking the same 64 KiB requests with a small answer: {fs:.1f} req/s, "
        f"{fs * 64 / res['single shm']['rps']:.1f}x posenc's single [128] into shared memory; posenc's "
        f"batch into shared memory is {res['batch shm']['rps'] / fs:.2f}x the floor's"
    )


def report_stream(res: dict) -> None:
    gr = res["grpc rps"]["rps"]
    sm, fm = res["grpc stream"]["rps"] * STREAM_MESSAGES, res["floor stream"]["rps"] * STREAM_MESSAGES
    print(
        f"ModelStreamInfer, one stream: {sm:.0f} messages/s (floor {fm:.0f}) vs unary {gr:.0f} calls/s "
        f"(4x16 streams) and {res['grpc 1 stream rps']['rps']:.0f} calls/s (one stream): "
        f"{sm / gr:.2f}x / {sm / res['grpc 1 stream rps']['rps']:.2f}x   [target >= 2x]"
    )


if __name__ == "__main__":
    raise SystemExit(main())
