"""Open-loop, fixed-rate latency probe with microsecond resolution and no coordinated omission.

Request k is *scheduled* at t_k = t0 + k / rate, whatever happened to the requests before it, and
its latency is completion − t_k (not completion − actual send). A slow server therefore cannot
slow the probe down and hide its own slowness (coordinated omission, as wrk2 and HdrHistogram
describe it): a request that waits for a free connection, or that the probe sends late, is charged
the wait.

Efficiency: one thread, one epoll loop, many pre-opened keep-alive connections, hand-written
HTTP/1.1 request bytes (pre-built, cycled), responses parsed only as far as the status and
Content-Length. When the next send is less than 2 ms away the loop spins (epoll with timeout 0),
because epoll_wait sleeps in whole milliseconds; the probe's core is therefore busy for the length
of a run, which is bounded. Latencies go into a preallocated array during the run and into an
HdrHistogram (µs, 3 significant digits) after it, so recording costs nothing on the clock.

What the probe itself adds (the loop's lateness, its parsing, its recv) shows as ``loop_lag`` per
step and, in full, as the difference to a C client (wrk, one connection) on the raw ASGI floor;
``python -m posenc.loadtest report`` measures both in the same run.

    python -m posenc.loadtest.probe --url http://127.0.0.1:8000 --rates 1000,5000,10000 --duration 3
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gc
import json
import random
import resource
import select
import socket
import sys
import time
from array import array
from urllib.parse import urlsplit

from hdrh.histogram import HdrHistogram

from . import payloads

if hasattr(select, "epoll"):
    _epoll = select.epoll
else:  # gevent (imported by locust) monkey-patched select and hid epoll: take the real one
    from gevent import monkey as _monkey
    _epoll = _monkey.get_original("select", "epoll")

PERCENTILES = (50.0, 90.0, 99.0, 99.9)
SPIN_NS = 2_000_000          # spin (epoll timeout 0) when the next send is closer than this
MAX_US = 60_000_000          # histogram range: 1 µs .. 60 s


@dataclasses.dataclass
class StepResult:
    target: str
    rate: float                    # offered, requests/s
    duration_s: float
    connections: int
    sent: int = 0
    completed: int = 0
    errors: int = 0                # non-2xx responses, resets, malformed responses
    timeouts: int = 0              # still unanswered when the drain limit ran out
    achieved_rps: float = 0.0      # completions per second over the measured window
    queued: int = 0                # requests that found every connection busy (server backlog)
    percentiles_us: dict = dataclasses.field(default_factory=dict)   # "p50" -> µs, from t_k
    mean_us: float = 0.0
    max_us: float = 0.0
    loop_lag_us: dict = dataclasses.field(default_factory=dict)      # probe lateness at send
    rx_us: dict = dataclasses.field(default_factory=dict)            # probe's receive work per answer
    by_kind: dict = dataclasses.field(default_factory=dict)          # kind -> {"p50":..,"p99":..}
    status_counts: dict = dataclasses.field(default_factory=dict)
    probe_cpu_us: float = 0.0      # the probe's CPU time per request sent (spinning included)
    hdr: str = ""                  # the full histogram, HdrHistogram base64 encoding

    @property
    def saturated(self) -> bool:
        """The server (or the probe) did not keep up with the offered rate."""
        return self.timeouts > 0 or self.achieved_rps < 0.97 * self.rate


class _Conn:
    __slots__ = ("buf", "fd", "k", "remaining", "sock", "status")

    def __init__(self, addr):
        self.sock = socket.create_connection(addr)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.fd = self.sock.fileno()
        self.buf = b""
        self.remaining = -1      # -1: reading the head; else body bytes still to come
        self.status = 0
        self.k = -1              # index of the request in flight, -1 when idle

    def feed(self, rbuf: bytearray, n: int) -> int:
        """Take the ``n`` bytes just received into ``rbuf``: 1 when the response is complete, 0 when
        more is due, -1 if malformed. Only the head is copied; the body is only counted."""
        if self.remaining < 0:
            if self.buf:
                data = self.buf + rbuf[:n]
                i, n = data.find(b"\r\n\r\n"), len(data)
            else:
                data = rbuf
                i = rbuf.find(b"\r\n\r\n", 0, n)
            if i < 0:
                self.buf = bytes(data[:n])
                return 0
            head = data[:i].lower()
            j = head.find(b"content-length:")
            if j < 0:
                return -1
            e = head.find(b"\r\n", j)
            self.status = int(head[9:12])
            self.remaining = int(head[j + 15:e if e >= 0 else len(head)]) - (n - i - 4)
            self.buf = b""
        else:
            self.remaining -= n
        if self.remaining > 0:
            return 0
        self.remaining = -1
        return 1


def _hist() -> HdrHistogram:
    return HdrHistogram(1, MAX_US, 3)


def _pcts(values_us) -> dict:
    h = _hist()
    for v in values_us:
        h.record_value(max(1, min(int(v + 0.5), MAX_US)))
    return {f"p{p:g}": h.get_value_at_percentile(p) for p in PERCENTILES} | {"max": h.get_max_value()}


def run_step(host: str, port: int, requests: list[bytes], kinds: list[int], kind_names: list[str],
             rate: float, duration: float, connections: int = 64, warmup: float = 0.5,
             drain: float = 2.0, target: str = "") -> StepResult:
    """Offer ``rate`` requests/s for ``warmup + duration`` seconds; measure the last ``duration``.

    The garbage collector is off for the run: a full collection of the caller's heap stalled the
    loop for milliseconds, which the latencies (rightly, from t_k) then charged to the server."""
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        return _run_step(host, port, requests, kinds, kind_names, rate, duration, connections, warmup,
                         drain, target)
    finally:
        if gc_was_enabled:
            gc.enable()


def _run_step(host, port, requests, kinds, kind_names, rate, duration, connections, warmup, drain,
              target) -> StepResult:
    addr = (host, port)
    conns = [_Conn(addr) for _ in range(connections)]
    by_fd = {c.fd: c for c in conns}
    ep = _epoll()
    for c in conns:
        ep.register(c.fd, select.EPOLLIN)
    free = collections.deque(conns)          # FIFO: every connection stays warm
    pending: collections.deque[int] = collections.deque()

    n_warm = int(rate * warmup)
    total = n_warm + max(1, int(rate * duration))
    iv = 1e9 / rate
    lat = array("q", bytes(8 * total))       # ns from t_k; 0 = not completed
    lag = array("q", bytes(8 * total))       # ns the loop was late at t_k
    rx = array("q", bytes(8 * total))        # ns from epoll's return to the parsed answer (probe work)
    ok = bytearray(total)                    # 1 = 2xx, 2 = error
    statuses: collections.Counter = collections.Counter()
    nreq = len(requests)
    rbuf = bytearray(1 << 20)                # one receive buffer: no allocation per recv
    queued = errors = 0
    now_ns = time.perf_counter_ns

    def send(c: _Conn, k: int) -> None:
        c.k = k
        c.sock.sendall(requests[k % nreq])

    def fail(c: _Conn, k: int) -> None:
        nonlocal errors
        errors += 1
        if k >= 0:
            ok[k] = 2
            lat[k] = now_ns() - t0 - int(k * iv)
        ep.unregister(c.fd)
        del by_fd[c.fd]
        c.sock.close()
        nc = _Conn(addr)                     # reconnect (rare: resets, server-closed idle sockets)
        by_fd[nc.fd] = nc
        ep.register(nc.fd, select.EPOLLIN)
        if pending:
            send(nc, pending.popleft())
        else:
            free.append(nc)

    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = now_ns() + 5_000_000                # first send 5 ms from now
    k = 0
    done = 0
    hard_stop = t0 + int((warmup + duration + drain) * 1e9)
    poll = ep.poll
    while done < total:
        now = now_ns()
        while k < total:
            tk = t0 + int(k * iv)
            if tk > now:
                break
            lag[k] = now - tk
            if free:
                send(free.popleft(), k)
            else:
                pending.append(k)
                queued += 1
            k += 1
        if now > hard_stop:
            break
        if k < total:
            wait = t0 + int(k * iv) - now
            timeout = max(0.0, (wait - 1_000_000) / 1e9) if wait > SPIN_NS else 0
        else:
            timeout = 0.01
        events = poll(timeout)
        t_poll = now_ns()
        for fd, _ev in events:
            c = by_fd.get(fd)
            if c is None:
                continue
            try:
                n = c.sock.recv_into(rbuf)
            except OSError:
                n = 0
            if not n:
                fail(c, c.k)
                if c.k >= 0:
                    done += 1
                continue
            got = c.feed(rbuf, n)
            if got == 0:
                continue
            if got < 0:
                fail(c, c.k)
                done += 1
                continue
            t_done = now_ns()
            kk = c.k
            lat[kk] = t_done - t0 - int(kk * iv)
            rx[kk] = t_done - t_poll
            statuses[c.status] += 1
            if 200 <= c.status < 300:
                ok[kk] = 1
            else:
                ok[kk] = 2
                errors += 1
            done += 1
            if pending:
                send(c, pending.popleft())
            else:
                c.k = -1
                free.append(c)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    ep.close()
    for c in by_fd.values():
        c.sock.close()

    # -- statistics, off the clock ----------------------------------------------------------------
    res = StepResult(target=target, rate=rate, duration_s=duration, connections=connections,
                     queued=queued, errors=errors, status_counts=dict(statuses))
    h = _hist()
    per_kind = [[] for _ in kind_names]
    lags, rxs = [], []
    last_done = 0
    measured = range(n_warm, total)
    for i in measured:
        if i >= k:
            break
        res.sent += 1
        lags.append(lag[i] / 1000)
        if ok[i] == 1:
            rxs.append(rx[i] / 1000)
            us = lat[i] / 1000
            h.record_value(max(1, min(int(us + 0.5), MAX_US)))
            per_kind[kinds[i % nreq]].append(us)
            last_done = max(last_done, t0 + int(i * iv) + lat[i])
    res.completed = int(h.get_total_count())
    res.timeouts = sum(1 for i in measured if ok[i] == 0)
    window_start = t0 + int(n_warm * iv)
    if res.completed and last_done > window_start:
        res.achieved_rps = res.completed / ((max(last_done, window_start + int(duration * 1e9))
                                             - window_start) / 1e9)
    if res.completed:
        res.percentiles_us = {f"p{p:g}": h.get_value_at_percentile(p) for p in PERCENTILES}
        res.mean_us = round(h.get_mean_value(), 1)
        res.max_us = h.get_max_value()
        res.hdr = h.encode().decode()
    if lags:
        res.loop_lag_us = _pcts(lags)
    if rxs:
        res.rx_us = _pcts(rxs)
    if k:
        cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        res.probe_cpu_us = round(cpu * 1e6 / k, 1)
    if len(kind_names) > 1:
        res.by_kind = {name: _pcts(v) for name, v in zip(kind_names, per_kind) if v}
    return res


def build_requests(host_header: str, kind_weights: dict[str, int], pool: int = 512,
                   cfg: dict | None = None, seed: int = 1) -> tuple[list[bytes], list[int], list[str]]:
    """A shuffled pool of request bytes drawn from ``kind_weights`` (varying positions)."""
    rng = random.Random(seed)
    mix = payloads.Mix(cfg, rng)
    names = list(kind_weights)
    seq = [i for i, n in enumerate(names) for _ in range(kind_weights[n])]
    kinds = [seq[j % len(seq)] for j in range(pool)]
    rng.shuffle(kinds)
    reqs = [payloads.http_request(names[i], payloads.body(mix, names[i]), host_header) for i in kinds]
    return reqs, kinds, names


def parse_kinds(text: str) -> dict[str, int]:
    """'rope-row' or 'rope-row:3,alibi-decode:1' -> {kind: weight}."""
    out = {}
    for part in text.split(","):
        name, _, w = part.strip().partition(":")
        if name not in payloads.KINDS:
            raise ValueError(f"unknown request kind {name!r}; known: {', '.join(payloads.KINDS)}")
        out[name] = int(w or 1)
    return out


def sweep(url: str, rates: list[float], duration: float, kinds: str = "rope-row", connections: int = 64,
          warmup: float = 0.5, target: str = "", cfg: dict | None = None, log=None) -> list[StepResult]:
    u = urlsplit(url)
    host, port = u.hostname, u.port or 80
    reqs, kidx, names = build_requests(f"{host}:{port}", parse_kinds(kinds), cfg=cfg)
    out = []
    for r in rates:
        res = run_step(host, port, reqs, kidx, names, r, duration, connections, warmup, target=target or url)
        if log:
            log(format_step(res))
        out.append(res)
        time.sleep(0.2)
    return out


def format_step(r: StepResult) -> str:
    p = r.percentiles_us
    return (f"{r.target:>8} offered {r.rate:>8.0f}/s achieved {r.achieved_rps:>8.0f}/s  "
            f"p50 {p.get('p50', 0):>6} p90 {p.get('p90', 0):>6} p99 {p.get('p99', 0):>7} "
            f"p99.9 {p.get('p99.9', 0):>7} µs  lag p99 {r.loop_lag_us.get('p99', 0)} rx p99 {r.rx_us.get('p99', 0)} µs  "
            f"queued {r.queued} err {r.errors} timeouts {r.timeouts}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m posenc.loadtest.probe", description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--rates", default="1000,2000,5000", help="offered rates, requests/s, comma-separated")
    p.add_argument("--duration", type=float, default=3.0, help="measured seconds per rate (after --warmup)")
    p.add_argument("--warmup", type=float, default=0.5)
    p.add_argument("--kinds", default="rope-row", help="request kinds with weights, e.g. rope-row:3,alibi-decode:1")
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--payloads", help="JSON overriding loadtest.payloads.DEFAULTS")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    rates = [float(x) for x in args.rates.split(",")]
    res = sweep(args.url, rates, args.duration, args.kinds, args.connections, args.warmup,
                target="probe", cfg=payloads.load(args.payloads), log=lambda s: print(s, flush=True))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dataclasses.asdict(r) for r in res], f, indent=1)
    return 0 if all(r.completed and not r.errors for r in res) else 1


if __name__ == "__main__":
    sys.exit(main())
