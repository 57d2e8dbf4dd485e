"""The report's figures: the numbers summary.md and latency.png state, computed from a run's
results (results.json): the latency at fractions of saturation, posenc's and the floor's, the
throughput per core against the target, and whether a step fell behind and whose side it was.
"""

from __future__ import annotations

import os

PCTS = ("p50", "p90", "p99", "p99.9")


def _cpus(spec: str | None) -> int:
    if not spec:
        return os.cpu_count() or 1
    n = 0
    for part in spec.split(","):
        a, _, b = part.partition("-")
        n += (int(b) - int(a) + 1) if b else 1
    return n


def _step_at(steps: list[dict], rate: float) -> dict | None:
    for s in steps:
        if abs(s["rate"] - rate) < 1e-6:
            return s
    return None


def saturated(s: dict) -> bool:
    """The step fell behind (loadtest/drivers/probe.py judge()); results from before that field: the old rule."""
    return s.get("fell_behind", s["timeouts"] > 0 or s["achieved_rps"] < 0.97 * s["rate"])


def behind(s: dict) -> str:
    who = s.get("behind")
    return (
        f"fell behind ({who}), {s['achieved_rps']:,.0f}/s achieved"
        if who
        else f"fell behind, {s['achieved_rps']:,.0f}/s achieved"
    )


def figures(res: dict, target_rps_per_core: float, target_p99_us: float, target_cores: int) -> dict:
    """The headline numbers, derived once (the markdown and the caller both use them)."""
    f: dict = {}
    sat = res.get("saturation_rps") or 0.0
    srv = res.get("server", {})
    cores = min(_cpus(srv.get("cpus")), srv.get("workers") or 1) if srv.get("started_here") else None
    f["server_cores"] = cores
    f["saturation_rps"] = sat
    f["saturation_per_core"] = sat / cores if cores else None
    posenc = res.get("probe", {}).get("posenc", [])
    floor = res.get("probe", {}).get("floor", [])
    bare = res.get("probe", {}).get("bare", [])
    for frac in (0.5, 0.8):
        s = _step_at(posenc, round(frac * sat, -1))
        fl = _step_at(floor, round(frac * sat, -1))
        b = _step_at(bare, round(frac * sat, -1))
        f[f"at_{int(frac * 100)}"] = {
            "rate": round(frac * sat, -1),
            "posenc": s["percentiles_us"] if s else None,
            # a floor that fell behind at this rate has no latency to compare with, only its rate
            "floor": fl["percentiles_us"] if fl and not saturated(fl) else None,
            "floor_behind": behind(fl) if fl and saturated(fl) else "",
            "bare": b["percentiles_us"] if b and not saturated(b) else None,
            "saturated": saturated(s) if s else None,
            "behind": behind(s) if s and saturated(s) else "",
            "noisy": bool(s and s.get("others_cores", 0) > (res.get("noise") or {}).get("limit_cores", 1e9)),
        }
    kept = [s for s in posenc if not saturated(s)]
    f["probe_knee_rps"] = max((s["rate"] for s in kept), default=0.0)
    under = [s for s in kept if s["percentiles_us"] and s["percentiles_us"]["p99"] < target_p99_us]
    f["max_rate_p99_under_target"] = max((s["rate"] for s in under), default=0.0)
    f["floor_min_p99_us"] = min(
        (s["percentiles_us"]["p99"] for s in floor if s["percentiles_us"]), default=None
    )
    f["open_loop_sustained_rps"] = max((s["achieved_rps"] for s in kept), default=0.0)
    f["open_loop_fell_behind_at"] = min((s["rate"] for s in posenc if saturated(s)), default=None)
    # Probe overhead: the probe at its lowest rate on the floor vs wrk's single connection on the floor.
    w = res.get("wrk", {})
    if floor and floor[0]["percentiles_us"]:
        f0 = floor[0]
        f["probe_work_us"] = {"lag": f0.get("loop_lag_us", {}), "rx": f0.get("rx_us", {})}
        if "floor_rtt" in w:
            f["probe_vs_wrk_us"] = {
                p: f0["percentiles_us"][p] - w["floor_rtt"]["latency_us"][p] for p in ("p50", "p90", "p99")
            }
    rep = res.get("probe_repeat")
    if rep and floor and rep["percentiles_us"] and floor[0]["percentiles_us"]:
        f["probe_repeat_delta_us"] = {
            p: rep["percentiles_us"][p] - floor[0]["percentiles_us"][p] for p in ("p50", "p90", "p99")
        }
    ceil = res.get("probe_ceiling")
    if ceil:
        f["probe_ceiling_rps"] = ceil["achieved_rps"]
        f["probe_ceiling_limited"] = saturated(ceil)
    per_core = f["saturation_per_core"] or 0.0
    f["target"] = {
        "rps_per_core": target_rps_per_core,
        "p99_us": target_p99_us,
        "cores": target_cores,
        "cluster_rps": target_rps_per_core * target_cores,
    }
    f["extrapolated"] = {
        "saturation_cluster_rps": per_core * target_cores,
        "open_loop_cluster_rps": (f["open_loop_sustained_rps"] / cores if cores else 0.0) * target_cores,
        "p99_under_target_cluster_rps": (f["max_rate_p99_under_target"] / cores if cores else 0.0)
        * target_cores,
    }
    return f
