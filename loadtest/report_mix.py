"""The report's sections for the scenario: which way posenc answered (loadtest/paths.py), and, for the
realistic mix, its throughput against the raw-ASGI floor answering the same bytes and the new specs
sent alongside (loadtest/mix.py)."""

from __future__ import annotations


def _paths_rows(res: dict) -> list[str]:
    ps = res.get("paths") or {}
    if not ps:
        return []
    L = ["### Which way posenc answered\n"]
    first = next(iter(ps.values()))
    exact = first.get("exact")
    L.append("From the server's counters read before and after each measurement (one worker: they are the "
             "whole server's). " + ("`posenc_answer_path_total` gives each way exactly." if exact else
             "/v1 splits exactly into C and Python (`posenc_hot_path_total`); for v2 REST the server "
             "exposes no such split, so its C share is estimated as the lane's answers (`lane_answers` "
             "of /v1/tables) less the /v1 C answers.") + "\n")
    ways = sorted({k for p in ps.values() for k in p["counts"]})
    L.append("| measurement | requests | " + " | ".join(ways) + " | below ASGI (lane) |")
    L.append("|---|---|" + "---|" * len(ways) + "---|")
    label = {"wrk_max": "wrk, saturation", "wrk_rtt": "wrk, one connection", "probe": "probe sweep"}
    for key, p in ps.items():
        L.append(f"| {label.get(key, key)} | {p['requests']:,} | "
                 + " | ".join(f"{p['shares'].get(w, 0):.1%}" for w in ways) + f" | {p['lane_share']:.1%} |")
    L.append("")
    return L


def markdown(res: dict) -> str:
    sc = res.get("scenario") or {}
    L = []
    if sc.get("name") == "realistic-mix":
        L.append("## Realistic mix\n")
        L.append(f"{sc.get('pool'):,} requests drawn at random (loadtest/mix.py) over the table config's models, "
                 "positions uniform over twice each table's length (inside it and past it), binary and JSON, "
                 "/v1 and v2 REST, cycled by the probe and wrk; the floors answer each with posenc's own bytes. "
                 f"Kinds: {', '.join(sc.get('kinds', []))}.\n")
        w = res.get("wrk", {})
        if "posenc_max" in w and "floor_max" in w:
            pr, fr = w["posenc_max"]["rps"], w["floor_max"]["rps"]
            L.append(f"Throughput (wrk, {w['posenc_max']['connections']} connections): posenc **{pr:,.0f}/s**, "
                     f"raw-ASGI floor {fr:,.0f}/s: **{pr / fr:.2f}×** the floor"
                     + (f"; the bare asyncio server {w['bare_max']['rps']:,.0f}/s" if "bare_max" in w else "")
                     + ".\n")
        ns = [n for n in res.get("new_specs") or [] if n.get("sent")]
        if ns:
            sent, ok = sum(n["sent"] for n in ns), sum(n["ok"] for n in ns)
            mid = sorted(n["p50_ms"] for n in ns)[len(ns) // 2]
            L.append(f"New specs alongside, {ns[0]['per_s']:g}/s while posenc was measured: {sent} sent, {ok} "
                     f"answered 200, median of the measurements' p50s {mid} ms, slowest "
                     f"{max(n['max_ms'] for n in ns)} ms (each an on-demand build).\n")
    L += _paths_rows(res)
    return "\n".join(L)
