"""The report: summary.md and latency.png from the results a run collected (results.json). The
figures it states are figures.py's, the plot is plot.py's, the mix's sections mix.py's; this
module writes the text and the files.

python -m posenc.loadtest render posenc-loadtest/<run>      # re-render from results.json
"""

from __future__ import annotations

import json
import os

from . import mix as report_mix
from .figures import behind, figures, saturated
from .plot import plot


def _fmt(v, unit="") -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        v = f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
    return f"{v}{unit}"


def _noise(r: dict, limit: float) -> str:
    if "others_cores" not in r:
        return "–"
    return f"{r['others_cores']:.2f}" + (" ⚠" if r["others_cores"] > limit else "")


def tail_ratio(p: dict, bare: dict) -> str:
    """posenc's p99 and p99.9 over the bare server's, as the report writes them."""
    return f"{p['p99'] / max(1, bare['p99']):.2f}× / {p['p99.9'] / max(1, bare['p99.9']):.2f}×"


def _build(m: dict) -> str:
    """Which posenc ran: its version, and its commit where it ran from a checkout (a results.json
    of an older report may have neither)."""
    version, commit = m.get("version"), m.get("commit")
    if version and commit:
        return f"posenc {version} (commit {commit})"
    if version or commit:
        return f"posenc {version}" if version else f"commit {commit}"
    return "posenc version unknown"


def markdown(res: dict, f: dict) -> str:
    m = res.get("machine", {})
    srv = res.get("server", {})
    a = res.get("args", {})
    L = []
    L.append("# posenc load-test report\n")
    L.append(
        f"Run {res.get('started')} on {m.get('cpu')} ({m.get('cpus_online')} CPUs online), Python "
        f"{m.get('python')}, {_build(m)}; load average "
        f"{', '.join(f'{x:.2f}' for x in m.get('loadavg_start', []))} at start, "
        f"{', '.join(f'{x:.2f}' for x in m.get('loadavg_end', []))} at end (other users' work counts). "
        f"Total {res.get('elapsed_s')} s.\n"
    )
    if srv.get("started_here"):
        L.append(
            f"Server: `posenc serve --workers {srv.get('workers')}` with tables "
            f"`{srv.get('tables') or 'default set'}`, pinned to CPU(s) {srv.get('cpus') or 'any'} "
            f"(ready in {srv.get('ready_s')} s); load generators pinned to CPU(s) "
            f"{a.get('client_cpus') or 'any'}. The floor runs under the same uvicorn settings on the same CPU(s).\n"
        )
    else:
        L.append(f"Server: {srv.get('url')} (started elsewhere; not pinned by this run).\n")
    for s in res.get("probe_requests", []):
        L.append(
            f"- probe/wrk request `{s['kind']}`: POST {s['path']}, {s['request_bytes']} B body, "
            f"{s['response_bytes']} B {s['content_type']} response"
        )
    L.append("")

    L.append("## Headline\n")
    t = f["target"]
    per = f["saturation_per_core"]
    cores = f["server_cores"] or 1
    L.append("| figure | measured | design target |\n|---|---|---|")
    L.append(
        f"| saturation throughput per server core (wrk, closed loop, {a.get('wrk_connections')} connections) | "
        f"{_fmt(per, '/s')} | {_fmt(t['rps_per_core'], '/s')} |"
    )
    fb = f.get("open_loop_fell_behind_at")
    L.append(
        f"| highest rate the open-loop probe saw posenc keep up with, per core | "
        f"{_fmt(f['open_loop_sustained_rps'] / cores, '/s')}"
        + (f" (fell behind at {_fmt(fb, '/s')})" if fb else " (kept up at every rate offered)")
        + f" | {_fmt(t['rps_per_core'], '/s')} |"
    )
    for k, frac in (("at_50", "50%"), ("at_80", "80%")):
        d = f[k]
        if d["saturated"]:
            L.append(
                f"| p50 / **p99** at {frac} of saturation ({_fmt(d['rate'], '/s')}), open loop | "
                f"no latency: {d['behind']} | p99 < {t['p99_us']:g} µs |"
            )
            continue
        pp = d["posenc"] or {}
        fl = d["floor"] or {}
        sat_note = " ⚠ noisy" if d.get("noisy") else ""
        diff = (
            (f"; posenc − floor {pp['p50'] - fl['p50']:+d} / {pp['p99'] - fl['p99']:+d} µs")
            if pp and fl
            else ""
        )
        floor_text = (
            f"the floor {d['floor_behind']}"
            if d.get("floor_behind")
            else f"floor {_fmt(fl.get('p50'))} / {_fmt(fl.get('p99'), ' µs')}{diff}"
        )
        if pp and d.get("bare"):
            floor_text += f"; p99 / p99.9 {tail_ratio(pp, d['bare'])} the bare server's"
        L.append(
            f"| p50 / **p99** at {frac} of saturation ({_fmt(d['rate'], '/s')}), open loop | "
            f"{_fmt(pp.get('p50'))} / **{_fmt(pp.get('p99'), ' µs')}**{sat_note} ({floor_text}) | "
            f"p99 < {t['p99_us']:g} µs |"
        )
    m80 = f["max_rate_p99_under_target"]
    L.append(
        f"| highest measured rate with p99 < {t['p99_us']:g} µs | "
        + (
            _fmt(m80, "/s")
            if m80
            else f"none (the raw floor's own p99 was ≥ {_fmt(f['floor_min_p99_us'], ' µs')})"
        )
        + f" | {_fmt(t['rps_per_core'], '/s')} per core |"
    )
    ex = f["extrapolated"]
    L.append(
        f"| extrapolated to {t['cores']} cores (saturation × {t['cores']}) | "
        f"{_fmt(ex['saturation_cluster_rps'], '/s')} (open loop: {_fmt(ex['open_loop_cluster_rps'], '/s')}) | "
        f"{_fmt(t['cluster_rps'], '/s')} |"
    )
    L.append(
        f"| extrapolated to {t['cores']} cores at p99 < {t['p99_us']:g} µs | "
        + (_fmt(ex["p99_under_target_cluster_rps"], "/s") if m80 else "none measured")
        + f" | {_fmt(t['cluster_rps'], '/s')} |"
    )
    L.append("")
    if per:
        ratio = per / t["rps_per_core"]
        L.append(
            f"Per core, posenc saturates at {ratio:.0%} of the design's {t['rps_per_core']:,.0f}/s "
            f"({f['open_loop_sustained_rps'] / cores / t['rps_per_core']:.0%} by the open-loop figure). "
            f"The {t['cores']}-core figures multiply one pinned worker's measurement by {t['cores']}: they "
            "assume workers scale linearly (one process per core, no shared lock on the request path), "
            "which this 2-CPU machine cannot check, and they leave out what a real network adds over "
            "loopback. They are an upper bound, not a measurement.\n"
        )

    noise = res.get("noise") or {}
    lim = noise.get("limit_cores", 0.1)
    if noise:
        L.append(
            f"Shared machine: before each measurement the run waited for other processes to go quiet "
            f'({noise["idle_waited_s"]} s in all) and measured the CPU they took during it ("others\' CPU", '
            f"in cores); {noise['retried']} of {noise['steps']} measurements were redone for noise (others' CPU, "
            f"or the probe late on its own core), and "
            + (
                f"{noise['noisy_steps']} still had others above {lim:g} cores (⚠): "
                "read those as noise, not as posenc.\n"
                if noise["noisy_steps"]
                else f"none kept others above {lim:g} cores.\n"
            )
        )

    w = res.get("wrk", {})
    if w:
        L.append("## wrk (C client, closed loop)\n")
        L.append(
            "| target | connections | requests/s | p50 µs | p90 µs | p99 µs | p99.9 µs | failures | others' CPU |\n"
            "|---|---|---|---|---|---|---|---|---|"
        )
        lane = res.get("server", {}).get("lane")
        label = {
            "floor": "raw-ASGI floor",
            "bare": "bare asyncio + httptools",
            "posenc": f"posenc (hot lane {lane})" if lane else "posenc",
        }
        for key in ("floor_rtt", "bare_rtt", "posenc_rtt", "floor_max", "bare_max", "posenc_max"):
            if key in w:
                r = w[key]
                lat = r["latency_us"]
                L.append(
                    f"| {label[key.split('_')[0]]} | {r['connections']} | {r['rps']:,.0f} | "
                    f"{lat['p50']} | {lat['p90']} | {lat['p99']} | {lat['p99.9']} | "
                    f"{r['failures']} | {_noise(r, lim)} |"
                )
        L.append("")

    g = res.get("grpc")
    if g:
        L.append("## gRPC (KServe v2 ModelInfer, h2load: C client, closed loop)\n")
        L.append(
            f"The decode RoPE row as a v2 ModelInfer ({g['request_bytes']} B request, {g['response_bytes']} B "
            "response), on posenc's gRPC server and on the gRPC floors, grpcio's asyncio server and its "
            "synchronous one (a pool of 16 threads), answering the same bytes (loadtest/floors/grpc_server.py).\n"
        )
        L.append(
            "| target | streams | requests/s | p50 µs | p99 µs | others' CPU |\n|---|---|---|---|---|---|"
        )
        lane = g.get("lane")
        if lane:
            L.append(f"posenc's gRPC lane (service/grpclane): {lane}.\n")
        names = {
            "floor": "grpcio asyncio floor",
            "sync_floor": "grpcio sync floor",
            "posenc": "posenc (gRPC lane)" if (lane or "").startswith("on") else "posenc (gRPC, grpcio)",
        }
        for load in ("rtt", "max"):
            for who, label in names.items():
                r = g.get(f"{who}_{load}")
                if r:
                    L.append(
                        f"| {label} | {r['connections']} x {r['streams']} | {r['rps']:,.0f} | "
                        f"{_fmt(r.get('p50_us'))} | {_fmt(r.get('p99_us'))} | {_noise(r, lim)} |"
                    )
        L.append("")

    L.append(report_mix.markdown(res))
    L.append("## Open-loop probe (latency from each request's scheduled send time)\n")
    st0 = (res.get("probe", {}).get("posenc") or [{}])[0]
    if st0.get("sender"):
        L.append(
            "Sender: "
            + (
                "C (loadtest/_sender.c: one thread, epoll, keep-alive connections, no pipelining)."
                if st0["sender"] == "c"
                else "the Python loop (loadtest/drivers/pyloop.py: the C sender is "
                "not built here, so high rates fall behind at the probe)."
            )
            + f" {st0.get('connections')} connections; the probe ran on CPU(s) {a.get('client_cpus') or 'any'}."
        )
    pw = f.get("probe_work_us")
    if pw:
        lag, rx = pw["lag"], pw["rx"]
        L.append(
            f"Probe overhead, measured in the same run. The probe's own work on each request's clock is its "
            f"lateness at the scheduled send (p50 {lag.get('p50')} µs, p99 {lag.get('p99')} µs at the lowest "
            f"rate on the floor) and its receive-and-parse time after epoll reports the answer (p50 "
            f"{rx.get('p50')} µs, p99 {rx.get('p99')} µs); both are in every figure below, per step in the "
            "results.json."
        )
    pv = f.get("probe_vs_wrk_us")
    if pv:
        L.append(
            f"Against a C client: on the same floor the probe (open loop, lowest rate) reads p50 {pv['p50']:+d} µs, "
            f"p90 {pv['p90']:+d} µs, p99 {pv['p99']:+d} µs from wrk's single closed-loop connection (wrk sleeps "
            "in epoll between answers and pays a wake-up the spinning probe does not)."
        )
    if pw or pv:
        L.append(
            "The floor rows are the probe + loopback + uvicorn at each rate; posenc − floor is what posenc "
            "itself costs, with the probe's share cancelling out."
        )
    rd = f.get("probe_repeat_delta_us")
    if rd:
        L.append(
            f"Reproducibility: the lowest-rate floor step, repeated at the end of the run, moved by p50 "
            f"{rd['p50']:+d} µs, p90 {rd['p90']:+d} µs, p99 {rd['p99']:+d} µs."
        )
    if "probe_ceiling_rps" in f:
        c = res["probe_ceiling"]
        L.append(
            f"Probe ceiling: offered {c['rate']:,.0f}/s to the bare asyncio server (its wrk saturation), it "
            f"completed {c['achieved_rps']:,.0f}/s (loop lag p99 {c['loop_lag_us'].get('p99', 0)} µs, "
            f"{c.get('late_share', 0):.1%} of sends over 1 ms late)"
            + (f"; {behind(c)}." if f["probe_ceiling_limited"] else ".")
        )
    L.append("")
    L.append(
        "Each rate is offered to the raw-ASGI floor (the probe, loopback and uvicorn), to the bare "
        "server (asyncio + httptools answering the same bytes: the tail this machine allows) and to "
        "posenc, in turn. posenc ÷ bare: its p99 and p99.9 over the bare server's at that rate.\n"
    )
    L.append(
        "| offered/s | target | achieved/s | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs "
        "| posenc − floor p50 / p99 | posenc ÷ bare p99 / p99.9 | probe lag / rx p99 µs | queued | errors "
        "| others' CPU |"
    )
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    fl_steps = {s["rate"]: s for s in res.get("probe", {}).get("floor", [])}
    bare_steps = {s["rate"]: s for s in res.get("probe", {}).get("bare", [])}
    for s in res.get("probe", {}).get("posenc", []):
        for name, st in (
            ("floor", fl_steps.get(s["rate"])),
            ("bare", bare_steps.get(s["rate"])),
            ("posenc", s),
        ):
            if st is None:
                continue
            if saturated(st) or not st["percentiles_us"]:
                L.append(
                    f"| {st['rate']:,.0f} | {name} | ✗ {behind(st)} | – | – | – | – | – | | | "
                    f"{st['loop_lag_us'].get('p99', '')} / {st.get('rx_us', {}).get('p99', '')} | "
                    f"{st['queued']} | {st['errors'] + st['timeouts']} | {_noise(st, lim)} |"
                )
                continue
            p = st["percentiles_us"]
            diff = ""
            if (
                name == "posenc"
                and fl_steps.get(s["rate"])
                and fl_steps[s["rate"]]["percentiles_us"]
                and not saturated(fl_steps[s["rate"]])
            ):
                fp = fl_steps[s["rate"]]["percentiles_us"]
                diff = f"{p['p50'] - fp['p50']:+d} / {p['p99'] - fp['p99']:+d}"
            b = bare_steps.get(s["rate"])
            ratio = ""
            if name == "posenc" and b and b["percentiles_us"] and not saturated(b):
                ratio = tail_ratio(p, b["percentiles_us"])
            L.append(
                f"| {st['rate']:,.0f} | {name} | {st['achieved_rps']:,.0f} | {p['p50']} | {p['p90']} | "
                f"{p['p99']} | {p['p99.9']} | {st['max_us']} | {diff} | {ratio} | {st['loop_lag_us'].get('p99', '')} / "
                f"{st.get('rx_us', {}).get('p99', '')} | "
                f"{st['queued']} | {st['errors'] + st['timeouts']} | {_noise(st, lim)} |"
            )
    L.append(
        "\n✗: fell behind the offered rate: the server (under 97% of it answered, or answers missing at "
        "the end) or the probe (over 1% of its sends more than 1 ms late): no latency is reported for it, "
        "only the rate achieved.\n"
    )
    L.append("![latency percentiles against offered rate](latency.png)\n")

    lc = res.get("locust")
    if lc:
        L.append("## Locust (closed loop, whole traffic mix; milliseconds)\n")
        L.append(
            f"{a.get('locust_users')} users, {a.get('locust_time'):g} s, {a.get('locust_processes')} process(es), "
            f"weights `{a.get('locust_weights') or 'decode=10,pipeline=2,json=2,newspec=1'}`. "
            "Full report: [locust.html](locust.html); CSV: locust_stats.csv.\n"
        )
        L.append(
            "| request type | requests | failures | requests/s | p50 ms | p95 ms | p99 ms | avg bytes |\n"
            "|---|---|---|---|---|---|---|---|"
        )
        for name, r in lc.items():
            L.append(
                f"| {name} | {r['requests']} | {r['failures']} | {r['rps']:.1f} | {r['p50_ms']:g} | "
                f"{r['p95_ms']:g} | {r['p99_ms']:g} | {r['avg_bytes']:,.0f} |"
            )
        L.append(
            "\nLocust rounds to whole milliseconds and slows down with the server (closed loop); the "
            "probe's table above is the latency figure, this one is the mix's throughput and failure check.\n"
        )
    if "shm_leftovers" in res:
        left = res["shm_leftovers"]
        L.append(
            f"After SIGTERM, /dev/shm held {len(left)} `{srv.get('namespace')}.*` files"
            + (
                f": {', '.join(left)}"
                if left
                else f" (clean {res.get('shm_clean_after_s')} s after the server process exited)"
            )
            + ".\n"
        )
    return "\n".join(L)


def write(
    res: dict,
    out: str,
    target_rps_per_core: float = 1.2e6 / 32,
    target_p99_us: float = 80.0,
    target_cores: int = 32,
) -> dict:
    f = figures(res, target_rps_per_core, target_p99_us, target_cores)
    res["figures"] = f
    if res.get("probe"):
        plot(res, os.path.join(out, "latency.png"), f)
    with open(os.path.join(out, "summary.md"), "w") as fh:
        fh.write(markdown(res, f))
    with open(os.path.join(out, "results.json"), "w") as fh:
        json.dump(res, fh, indent=1, default=str)
    return f


def render(out: str) -> dict:
    with open(os.path.join(out, "results.json")) as fh:
        res = json.load(fh)
    a = res.get("args", {})
    return write(
        res,
        out,
        a.get("target_rps_per_core", 1.2e6 / 32),
        a.get("target_p99_us", 80.0),
        a.get("target_cores", 32),
    )
