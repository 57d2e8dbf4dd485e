"""The requests the whole-read C call cannot take: how many the realistic mix holds, and what the
lane after httptools gains on them. A script, not a test (docs/benchmarks.md, "Requests httptools
reads"):

    python tests/bench/bench_partial.py [--seconds 5] [--rounds 5] [--requests 2000] [--only share|gain]

(a) Share. One `posenc serve --lane on` worker pinned to core 0 and wrk on core 1 cycling the
realistic mix's pool (as tests/bench/bench_mix.py drives it, --new-specs-per-s specs no table holds
alongside); then learnt requests drawn over the mix's tables (every family) and ways (/v1 and v2,
binary and JSON) sent one at a time by httpx, requests and urllib (--rounds x the draw each), which
write a request's head and body in their own ways. Per round, from `posenc_answer_path_total` and
/v1/tables `lane_answers` (one worker: its count is the server's): the answers the whole-read C call
made ("c"), the template answers made after httptools read the request ("shortcut": what a lane
below ASGI could take at most), and of those the ones answered below ASGI (``lane_answers`` minus
"c": the lane after httptools).

(b) Gain. Two servers pinned to core 0, `--lane on` and `--lane off` (the raw front's shortcut
answers), asked in turn round after round by one connection from core 1 with learnt requests the
whole-read call cannot take, drawn over the mix's tables (every family) and both encodings:
- split: a request whose head and body come in separate reads (the client writes the head, waits
  --gap-us, then writes the body), /v1 and v2 REST, binary and JSON;
- pipelined: GET /healthz (not a family request: httptools reads it and what follows) and 16
  learnt /v1 requests behind it, in one write.
Printed: per-request latency p50/p99 (split: from the body's write to the whole answer; pipelined:
the batch's / 17), the server's CPU per request (its process tree, /proc) and the requests/s one
core gives at that cost, with the ratios on/off, per round and as medians; and how many the lane
server answered below ASGI after httptools (``lane_answers`` minus "c"), so a split that arrived
whole (the C call's answer) shows.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import tempfile
import types
import uuid
from time import perf_counter

from bench_cliffs import CLIENT_CPU, SERVER_CPU, tree_cpu_s, wrk  # (this folder: run as a script)

from posenc.loadtest.drivers import wrk as wrk_tool
from posenc.loadtest.reports import paths
from posenc.loadtest.servers import free_port, start_posenc
from posenc.loadtest.workloads import mix, scenario

PIPELINED = 16  # learnt requests behind the one httptools reads first
HEALTH = b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n"


def raw(path: str, headers: dict, body: bytes) -> tuple[bytes, bytes]:
    """(head, body) of one HTTP/1.1 request as a client writes it."""
    lines = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in headers.items())
    head = b"POST %s HTTP/1.1\r\nhost: t\r\n%scontent-length: %d\r\n\r\n" % (path.encode(), lines, len(body))
    return head, body


class Conn:
    """One keep-alive connection that reads whole responses (content-length framed)."""

    def __init__(self, port: int):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def response(self) -> bytes:
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                head = self.buf[:end]
                n = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
                if len(self.buf) >= end + 4 + n:
                    assert head.startswith(b"HTTP/1.1 200"), head
                    out, self.buf = self.buf[: end + 4 + n], self.buf[end + 4 + n :]
                    return out
            chunk = self.s.recv(1 << 20)
            assert chunk, "the server closed the connection"
            self.buf += chunk

    def close(self) -> None:
        self.s.close()


def spin(seconds: float) -> None:
    """The client's pause between a head and its body (a busy wait on the client's own core)."""
    end = perf_counter() + seconds
    while perf_counter() < end:
        pass


def split_round(server, reqs, n: int, gap: float) -> list[float]:
    c = Conn(server.port)
    lat = []
    try:
        for i in range(n):
            head, body = reqs[i % len(reqs)]
            c.s.sendall(head)
            spin(gap)
            t0 = perf_counter()
            c.s.sendall(body)
            c.response()
            lat.append(perf_counter() - t0)
    finally:
        c.close()
    return lat


def pipelined_round(server, reqs, n: int) -> list[float]:
    c = Conn(server.port)
    lat = []
    try:
        for i in range(0, n, PIPELINED):
            batch = HEALTH + b"".join(h + b for h, b in (reqs[(i + k) % len(reqs)] for k in range(PIPELINED)))
            t0 = perf_counter()
            c.s.sendall(batch)
            for _ in range(PIPELINED + 1):
                c.response()
            lat.append((perf_counter() - t0) / (PIPELINED + 1))
    finally:
        c.close()
    return lat


def measured(server, run) -> dict:
    before, cpu = paths.scrape(server.url), tree_cpu_s(server.proc.pid)
    lat = run()
    cpu = tree_cpu_s(server.proc.pid) - cpu
    got = paths.shares(before, paths.scrape(server.url))
    lat.sort()
    n = got["requests"]
    return {
        "p50": lat[len(lat) // 2] * 1e6,
        "p99": lat[int(len(lat) * 0.99)] * 1e6,
        "cpu": cpu / n * 1e6,  # µs of the server's CPU per family request (/healthz's too)
        "rps": n / cpu,
        "below": got["lane"] - got["counts"]["c"],  # answered below ASGI after httptools
        "c": got["counts"]["c"],
        "n": n,
    }


def share(a) -> None:
    """(a): the mix through wrk, per round the answers by way."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        srv = start_posenc(
            free_port(), f"bench-{uuid.uuid4().hex[:6]}", cpus=SERVER_CPU, args=("--lane", "on")
        )
        try:
            srv.wait_ready()
            opts = types.SimpleNamespace(scenario=mix.NAME, tables=None)
            pool = scenario.prepare(opts, srv.url, {}, tmp)
            lua = os.path.join(tmp, "mix.lua")
            wrk_tool.script(lua, pool["items"])
            wrk(srv.url, lua, 2, 64)  # warm-up
            for rnd in range(a.rounds):
                before = paths.scrape(srv.url)
                specs = mix.NewSpecs(srv.url, a.new_specs_per_s, seed=None) if a.new_specs_per_s > 0 else None
                if specs:
                    specs.start()
                wrk(srv.url, lua, a.seconds, 64)
                if specs:
                    specs.stop()
                got = paths.shares(before, paths.scrape(srv.url))
                n, c = got["requests"], got["counts"]
                r = {
                    "requests": n,
                    "c": c["c"] / n,
                    "shortcut": c["shortcut"] / n,
                    "python": c["python"] / n,
                    "below": (got["lane"] - c["c"]) / n,
                }
                rows.append(r)
                print(
                    f"mix round {rnd + 1}: {n} answers: c {r['c']:.3%}, shortcut {r['shortcut']:.3%} "
                    f"(of which below ASGI after httptools {r['below']:.3%}), python {r['python']:.3%}",
                    flush=True,
                )
        finally:
            srv.stop()
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(
        f"mix medians over {a.rounds} rounds: c {med['c']:.3%}, shortcut {med['shortcut']:.3%} "
        f"(below ASGI after httptools {med['below']:.3%}), python {med['python']:.3%}\n",
        flush=True,
    )


def clients(a) -> None:
    """(a) again, for Python's HTTP clients: learnt requests of every table and way sent one at a time."""
    import urllib.request

    import httpx
    import requests

    rng = random.Random(3)
    reqs = [mix.request(t, w, rng) for t in mix.tables() for w in mix.WAYS for _ in range(16)]
    srv = start_posenc(free_port(), f"bench-{uuid.uuid4().hex[:6]}", cpus=SERVER_CPU, args=("--lane", "on"))
    try:
        srv.wait_ready()
        hc, rs = httpx.Client(), requests.Session()
        ways = {
            "httpx": lambda p, h, b: hc.post(srv.url + p, headers=h, content=b).raise_for_status(),
            "requests": lambda p, h, b: rs.post(srv.url + p, headers=h, data=b).raise_for_status(),
            "urllib": lambda p, h, b: urllib.request.urlopen(
                urllib.request.Request(srv.url + p, data=b, headers=h)
            ).read(),
        }
        for send in ways.values():  # learnt
            for r in reqs:
                send(*r)
        for name, send in ways.items():
            before = paths.scrape(srv.url)
            for _ in range(a.rounds):
                for r in reqs:
                    send(*r)
            got = paths.shares(before, paths.scrape(srv.url))
            n, c = got["requests"], got["counts"]
            print(
                f"{name}: {n} answers: c {c['c'] / n:.1%}, shortcut {c['shortcut'] / n:.1%} (below ASGI "
                f"after httptools {(got['lane'] - c['c']) / n:.1%}), python {c['python'] / n:.1%}",
                flush=True,
            )
    finally:
        srv.stop()
    print()


def gain(a) -> None:
    """(b): split and pipelined learnt requests, lane on against lane off, alternated."""
    os.sched_setaffinity(0, {int(CLIENT_CPU)})
    rng = random.Random(7)
    v1, v2 = (
        [raw(*mix.request(t, w, rng)) for t in mix.tables() for w in ways for _ in range(16)]
        for ways in (("v1-binary", "v1-json"), ("v2-binary", "v2-json"))
    )
    rng.shuffle(v1)
    rng.shuffle(v2)
    gap = a.gap_us / 1e6
    kinds = {
        "split /v1": lambda s: split_round(s, v1, a.requests, gap),
        "split v2": lambda s: split_round(s, v2, a.requests, gap),
        "pipelined /v1": lambda s: pipelined_round(s, v1, a.requests),
    }
    servers = {}
    try:
        for name in ("on", "off"):
            servers[name] = start_posenc(
                free_port(), f"bench-{uuid.uuid4().hex[:6]}", cpus=SERVER_CPU, args=("--lane", name)
            )
        for s in servers.values():
            s.wait_ready()
            for reqs in (v1, v2):  # learnt: the full path answers each spec's first requests
                c = Conn(s.port)
                for h, b in reqs:
                    c.s.sendall(h + b)
                    c.response()
                c.close()
            for run in kinds.values():  # warm-up
                run(s)
        res: dict = {k: {"on": [], "off": []} for k in kinds}
        for rnd in range(a.rounds):
            for kind, run in kinds.items():
                for name in ("on", "off") if rnd % 2 == 0 else ("off", "on"):
                    r = measured(servers[name], lambda run=run, s=servers[name]: run(s))
                    res[kind][name].append(r)
                on, off = res[kind]["on"][-1], res[kind]["off"][-1]
                print(
                    f"round {rnd + 1} {kind}: on p50 {on['p50']:.0f} µs p99 {on['p99']:.0f} µs "
                    f"{on['cpu']:.0f} µs CPU ({on['below']}/{on['n']} below ASGI after httptools, "
                    f"{on['c']} by the C call); off p50 {off['p50']:.0f} µs p99 {off['p99']:.0f} µs "
                    f"{off['cpu']:.0f} µs CPU; on/off p50 {on['p50'] / off['p50']:.2f}, "
                    f"requests/s per core {on['rps'] / off['rps']:.2f}",
                    flush=True,
                )
    finally:
        for s in servers.values():
            s.stop()
    print(f"\nmedians over {a.rounds} rounds (lane on / lane off):")
    for kind, by in res.items():
        m = {n: {k: statistics.median(r[k] for r in by[n]) for k in ("p50", "p99", "cpu", "rps")} for n in by}
        on, off = m["on"], m["off"]
        print(
            f"{kind}: p50 {on['p50']:.0f} / {off['p50']:.0f} µs ({on['p50'] / off['p50']:.2f}), "
            f"p99 {on['p99']:.0f} / {off['p99']:.0f} µs ({on['p99'] / off['p99']:.2f}), "
            f"CPU {on['cpu']:.0f} / {off['cpu']:.0f} µs a request, requests/s per core "
            f"{on['rps']:.0f} / {off['rps']:.0f} ({on['rps'] / off['rps']:.2f})"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5, help="(a): each wrk run")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--new-specs-per-s", type=float, default=3.0, help="(a): specs no table holds")
    ap.add_argument("--requests", type=int, default=2000, help="(b): requests a server, kind and round")
    ap.add_argument("--gap-us", type=float, default=300, help="(b): between a split request's head and body")
    ap.add_argument("--only", choices=("share", "gain"), help="one part only")
    a = ap.parse_args()
    if a.only != "gain":
        share(a)
        clients(a)
    if a.only != "share":
        gain(a)


if __name__ == "__main__":
    main()
