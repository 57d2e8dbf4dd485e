"""The load run's gRPC rows (runner.py, step 4b): the decode RoPE row as a KServe v2 ModelInfer,
h2load (C) on posenc's gRPC server and on the two gRPC floors answering posenc's bytes (grpcio's
asyncio server and its synchronous one, loadtest/floors/grpc_server.py), one stream and 4 x 16
streams."""

from __future__ import annotations

import os
import sys
import time

from . import servers
from .drivers import h2load
from .workloads import payloads


def lane_of(url: str) -> str | None:
    """What the server's /v1/tables says of its gRPC lane (service/grpclane): on, or off and why."""
    import httpx

    try:
        return httpx.get(url + "/v1/tables", timeout=10).json().get("grpc_lane")
    except (httpx.HTTPError, ValueError):
        return None


def kserve_row(target: str, cfg: dict, args, out: str, cpus_s, cpus_c, guard, log) -> dict:
    """The report's gRPC rows: the decode RoPE row as a KServe v2 ModelInfer, h2load (C) on posenc's
    gRPC server and on the two gRPC floors answering posenc's bytes (grpcio's asyncio server,
    ``floor``, and its synchronous one, ``sync_floor``), one stream and 4 x 16 streams; ``log``
    takes a line for each target."""
    import random

    import grpc

    spec, positions = payloads.v2_rope_row(payloads.Mix(cfg, random.Random(1)))
    req = payloads.v2_grpc_request(spec, positions)
    data = h2load.write_frames(os.path.join(out, "grpc-request.bin"), [req])
    with grpc.insecure_channel(target) as ch:  # h2load reads no trailers: one real call checks the answer
        answer = ch.unary_unary(h2load.INFER)(req, timeout=30)
    with open(os.path.join(out, "grpc-response.bin"), "wb") as f:
        f.write(answer)
    floors, targets = [], [("posenc", target)]
    for name, extra in (("floor", []), ("sync_floor", ["--sync"])):  # grpcio's asyncio and sync servers
        port = servers.free_port()
        floors.append(
            servers.Server(
                f"grpc {name.replace('_', ' ')}",
                [
                    sys.executable,
                    "-m",
                    "posenc.loadtest.floors.grpc_server",
                    "--port",
                    str(port),
                    "--response",
                    os.path.join(out, "grpc-response.bin"),
                    *extra,
                ],
                port,
                "/",
                cpus=cpus_s,
                log_path=os.path.join(out, f"grpc-{name}.log"),
            )
        )
        targets.append((name, f"127.0.0.1:{port}"))
    row = {"request_bytes": len(req), "response_bytes": len(answer)}
    try:
        time.sleep(1.0)  # grpcio binds in well under a second; the first h2load run would fail otherwise
        for name, t in targets:
            url = f"http://{t}{h2load.INFER}"
            row[f"{name}_rtt"] = guard.measure(
                lambda url=url, name=name: h2load.run(
                    url, data, n=2000, log=os.path.join(out, f"h2load-{name}.log"), cpus=cpus_c
                ),
                quality=lambda r: -r["p50_us"],
            )
            row[f"{name}_max"] = guard.measure(
                lambda url=url: h2load.run(url, data, seconds=args.wrk_duration, c=4, m=16, cpus=cpus_c),
                quality=lambda r: r["rps"],
            )
            log(
                f"h2load gRPC {name}: p50 {row[f'{name}_rtt']['p50_us']:.0f} µs at one stream, "
                f"{row[f'{name}_max']['rps']:.0f}/s at 4x16 streams"
            )
    finally:
        for f in floors:
            f.stop()
    return row
