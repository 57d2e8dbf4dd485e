"""Open-loop, fixed-rate latency probe with microsecond resolution and no coordinated omission.

Request k is *scheduled* at t_k = t0 + k / rate, whatever happened to the requests before it, and
its latency is completion − t_k (not completion − actual send). A slow server therefore cannot
slow the probe down and hide its own slowness (coordinated omission, as wrk2 and HdrHistogram
describe it): a request that waits for a free connection, or that the probe sends late, is charged
the wait.

The sending is done by loadtest/_sender.c (C: one thread, one epoll loop, many pre-opened keep-alive
connections, no pipelining, the request bytes built here and cycled; it holds well over 60,000
requests/s from one core), or, where that extension is not built, by the same loop in Python
(loadtest/drivers/pyloop.py, a few thousand/s); loadtest/drivers/sender.py picks. Latencies go into per-request
arrays during the run and into an HdrHistogram (µs, 3 significant digits) after it.

**A rate it cannot hold is not a latency.** A step *fell behind* when the server did not keep up
(fewer than 97% of the offered rate answered, or answers missing at the end, while requests waited
for a connection) or the probe did not (not every request sent, or more than 1% of them sent over
1 ms late); such a step reports who fell behind (``judge``) and the achieved rate, and the report
shows no percentiles for it.

What the probe itself adds (the loop's lateness, its parsing, its recv) shows as ``loop_lag`` and
``rx`` per step and, in full, as the difference to a C client (wrk, one connection) on the raw
ASGI floor; ``python -m posenc.loadtest report`` measures both in the same run.

    python -m posenc.loadtest probe --url http://127.0.0.1:8000 --rates 1000,5000,10000 --duration 3
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import random
import resource
import sys
import time
from urllib.parse import urlsplit

import numpy as np
from hdrh.histogram import HdrHistogram

from ..workloads import payloads
from . import sender

PERCENTILES = (50.0, 90.0, 99.0, 99.9)
MAX_US = 60_000_000  # histogram range: 1 µs .. 60 s
LATE_NS = 1_000_000  # a send this late is the probe's own lateness ...
MAX_LATE_SHARE = 0.01  # ... and more than this share of them: the probe fell behind
KEPT_UP = 0.97  # a server that answers less than this share of the offered rate fell behind
QUEUED_MAX = 0.5  # ... or one for which more than this share of the requests waited for a connection


@dataclasses.dataclass
class StepResult:
    target: str
    rate: float  # offered, requests/s
    duration_s: float
    connections: int
    sent: int = 0
    completed: int = 0
    errors: int = 0  # non-2xx responses, resets, malformed responses
    resets: int = 0  # connections lost or closed on a malformed answer (reopened)
    timeouts: int = 0  # still unanswered when the drain limit ran out
    achieved_rps: float = 0.0  # completions per second over the measured window
    queued: int = 0  # requests that found every connection busy (server backlog)
    percentiles_us: dict = dataclasses.field(default_factory=dict)  # "p50" -> µs, from t_k
    mean_us: float = 0.0
    max_us: float = 0.0
    loop_lag_us: dict = dataclasses.field(default_factory=dict)  # probe lateness at send
    rx_us: dict = dataclasses.field(default_factory=dict)  # probe's receive work per answer
    by_kind: dict = dataclasses.field(default_factory=dict)  # kind -> {"p50":..,"p99":..}
    status_counts: dict = dataclasses.field(default_factory=dict)
    probe_cpu_us: float = 0.0  # the probe's CPU time per request sent (spinning included)
    hdr: str = ""  # the full histogram, HdrHistogram base64 encoding
    sender: str = ""  # "c" (loadtest/_sender.c) or "python" (loadtest/drivers/pyloop.py)
    late_share: float = 0.0  # share of requests the probe sent over LATE_NS after their time
    fell_behind: bool = False  # the rate was not held: percentiles are not latency (judge())
    behind: str = ""  # who fell behind: "probe" or "server"

    @property
    def saturated(self) -> bool:
        return self.fell_behind


def _hist_of(values_us: np.ndarray) -> HdrHistogram:
    h = _hist()
    v, n = np.unique(np.clip(np.rint(values_us), 1, MAX_US).astype(np.int64), return_counts=True)
    for x, c in zip(v.tolist(), n.tolist()):
        h.record_value(x, c)
    return h


def _hist() -> HdrHistogram:
    return HdrHistogram(1, MAX_US, 3)


def _pcts(values_us: np.ndarray) -> dict:
    h = _hist_of(values_us)
    return {f"p{p:g}": h.get_value_at_percentile(p) for p in PERCENTILES} | {"max": h.get_max_value()}


def run_step(
    host: str,
    port: int,
    requests: list[bytes],
    kinds: list[int],
    kind_names: list[str],
    rate: float,
    duration: float,
    connections: int = 64,
    warmup: float = 0.5,
    drain: float = 2.0,
    target: str = "",
) -> StepResult:
    """Offer ``rate`` requests/s for ``warmup + duration`` seconds; measure the last ``duration``.

    The garbage collector is off for the run: a full collection of the caller's heap stalled the
    Python loop for milliseconds, which the latencies (rightly, from t_k) then charged to the server."""
    n_warm = int(rate * warmup)
    total = n_warm + max(1, int(rate * duration))
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        got = sender.run(host, port, requests, rate, total, warmup + duration + drain, connections)
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        if gc_was_enabled:
            gc.enable()
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return _result(got, rate, duration, connections, n_warm, kinds, kind_names, target, cpu)


def _result(got, rate, duration, connections, n_warm, kinds, kind_names, target, cpu) -> StepResult:
    """The step's figures from the sender's per-request arrays (off the clock)."""
    scheduled, queued, resets, lat, lag, rx, status = got
    total = len(lat)
    iv = 1e9 / rate
    idx = np.arange(n_warm, total)
    st = status[n_warm:]
    sent = idx < scheduled
    ok = (st >= 200) & (st < 300)
    res = StepResult(
        target=target,
        rate=rate,
        duration_s=duration,
        connections=connections,
        queued=queued,
        sender=sender.name(),
    )
    res.sent = int(sent.sum())
    res.timeouts = int((st == 0).sum())
    res.errors = int(((st == 1) | (st >= 300)).sum())
    codes, counts = np.unique(st[st > 0], return_counts=True)
    res.status_counts = {int(c): int(n) for c, n in zip(codes, counts)}
    res.resets = int(resets)
    lat_us = lat[n_warm:][ok] / 1000
    res.completed = int(ok.sum())
    if res.completed:
        start = int(n_warm * iv)
        last = int(((idx[ok] * iv).astype(np.int64) + lat[n_warm:][ok]).max())
        res.achieved_rps = res.completed / (max(last, start + int(duration * 1e9)) - start) * 1e9
        h = _hist_of(lat_us)
        res.percentiles_us = {f"p{p:g}": h.get_value_at_percentile(p) for p in PERCENTILES}
        res.mean_us = round(h.get_mean_value(), 1)
        res.max_us = h.get_max_value()
        res.hdr = h.encode().decode()
        res.rx_us = _pcts(rx[n_warm:][ok] / 1000)
        if len(kind_names) > 1:
            kk = np.asarray(kinds, dtype=np.int64)[idx[ok] % len(kinds)]
            res.by_kind = {
                name: _pcts(lat_us[kk == i]) for i, name in enumerate(kind_names) if (kk == i).any()
            }
    if res.sent:
        lags = lag[n_warm:][sent]
        res.loop_lag_us = _pcts(lags / 1000)
        res.late_share = round(float((lags > LATE_NS).mean()), 5)
    if scheduled:
        res.probe_cpu_us = round(cpu * 1e6 / scheduled, 2)
    res.fell_behind, res.behind = judge(res, scheduled < total)
    return res


def judge(r: StepResult, unsent: bool) -> tuple[bool, str]:
    """(fell behind?, who). The probe, when it could not send everything by the end; the server,
    when fewer than KEPT_UP of the offered rate was answered (or answers were missing at the end)
    while requests waited for a free connection, or when over QUEUED_MAX of them waited (a short
    step can end with KEPT_UP answered and a queue that grew through all of it: 0.2 s at
    100,000/s read 99,950/s achieved, p90 9.7 ms, 15,695 of 20,000 queued); otherwise, the probe
    when it sent over
    MAX_LATE_SHARE of its requests more than LATE_NS late (its own limit, or its core taken by
    others): those latencies would be its own."""
    if unsent:
        return True, "probe"
    late = r.late_share > MAX_LATE_SHARE
    if r.timeouts > 0 or r.achieved_rps < KEPT_UP * r.rate or r.queued > QUEUED_MAX * max(1, r.sent):
        return True, "probe" if late and r.queued <= MAX_LATE_SHARE * max(1, r.sent) else "server"
    if late:
        return True, "probe"
    return False, ""


def build_requests(
    host_header: str, kind_weights: dict[str, int], pool: int = 512, cfg: dict | None = None, seed: int = 1
) -> tuple[list[bytes], list[int], list[str]]:
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


def sweep(
    url: str,
    rates: list[float],
    duration: float,
    kinds: str = "rope-row",
    connections: int = 64,
    warmup: float = 0.5,
    target: str = "",
    cfg: dict | None = None,
    log=None,
) -> list[StepResult]:
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
    if r.fell_behind:
        return (
            f"{r.target:>8} offered {r.rate:>8.0f}/s achieved {r.achieved_rps:>8.0f}/s  FELL BEHIND "
            f"({r.behind}; late sends {r.late_share:.1%}, lag p99 {r.loop_lag_us.get('p99', 0)} µs, "
            f"queued {r.queued}, timeouts {r.timeouts}, err {r.errors}) [{r.sender} sender]"
        )
    return (
        f"{r.target:>8} offered {r.rate:>8.0f}/s achieved {r.achieved_rps:>8.0f}/s  "
        f"p50 {p.get('p50', 0):>6} p90 {p.get('p90', 0):>6} p99 {p.get('p99', 0):>7} "
        f"p99.9 {p.get('p99.9', 0):>7} µs  lag p99 {r.loop_lag_us.get('p99', 0)} rx p99 {r.rx_us.get('p99', 0)} µs  "
        f"queued {r.queued} err {r.errors} timeouts {r.timeouts} [{r.sender} sender]"
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m posenc.loadtest.drivers.probe", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--rates", default="1000,2000,5000", help="offered rates, requests/s, comma-separated")
    p.add_argument("--duration", type=float, default=3.0, help="measured seconds per rate (after --warmup)")
    p.add_argument("--warmup", type=float, default=0.5)
    p.add_argument(
        "--kinds", default="rope-row", help="request kinds with weights, e.g. rope-row:3,alibi-decode:1"
    )
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--payloads", help="JSON overriding loadtest.payloads.DEFAULTS")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    rates = [float(x) for x in args.rates.split(",")]
    res = sweep(
        args.url,
        rates,
        args.duration,
        args.kinds,
        args.connections,
        args.warmup,
        target="probe",
        cfg=payloads.load(args.payloads),
        log=lambda s: print(s, flush=True),
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dataclasses.asdict(r) for r in res], f, indent=1)
    return 0 if all(r.completed and not r.errors for r in res) else 1


if __name__ == "__main__":
    sys.exit(main())
