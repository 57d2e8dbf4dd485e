"""The report's sections for the scenario: which way posenc answered (loadtest/reports/paths.py), and, for the
realistic mix, its throughput against the raw-ASGI floor answering the same bytes and the new specs
sent alongside (loadtest/workloads/mix.py)."""

from __future__ import annotations

from posenc.service.metrics.layout import PATHS

_LABEL = {"wrk_max": "wrk, saturation", "wrk_rtt": "wrk, one connection", "probe": "probe sweep"}


def _paths_rows(res: dict) -> list[str]:
    ps = res.get("paths") or {}
    if not ps:
        return []
    # lane_answers (/v1/tables) is the answering worker's: the whole server's with one worker only
    lane = (res.get("server") or {}).get("workers") == 1
    L = [
        "### Which way posenc answered\n",
        "From the server's `posenc_answer_path_total{route, path}`, read before and after each measurement "
        "(the differences): **c**, the hot lane's one C call from the request's bytes to the response's; "
        "**shortcut**, the C template answering a request Python read (the lane after httptools, the raw "
        "ASGI front); **python**, the full path."
        + (" Below ASGI: the lane's answers (`lane_answers` of /v1/tables), c included." if lane else "")
        + "\n",
        "| measurement | requests | " + " | ".join(PATHS) + " |" + (" below ASGI (lane) |" if lane else ""),
        "|---|---|" + "---|" * len(PATHS) + ("---|" if lane else ""),
    ]
    for key, p in ps.items():
        L.append(
            f"| {_LABEL.get(key, key)} | {p['requests']:,} | "
            + " | ".join(f"{p['shares'].get(w, 0):.1%}" for w in PATHS)
            + " |"
            + (f" {p['lane_share']:.1%} |" if lane else "")
        )
    L.append("")
    key = "wrk_max" if "wrk_max" in ps else next(iter(ps))
    by = ps[key].get("by_route") or {}
    if by:
        L.append(f"By route ({_LABEL.get(key, key)}), answers:\n")
        L.append("| route | requests | " + " | ".join(PATHS) + " |")
        L.append("|---|---|" + "---|" * len(PATHS))
        for route, c in sorted(by.items()):
            n = sum(c.values())
            L.append(
                f"| {route} | {n:,} | "
                + " | ".join(f"{c.get(w, 0):,} ({c.get(w, 0) / n:.1%})" for w in PATHS)
                + " |"
            )
        L.append("")
    return L


def markdown(res: dict) -> str:
    sc = res.get("scenario") or {}
    L = []
    if sc.get("name") == "realistic-mix":
        L.append("## Realistic mix\n")
        L.append(
            f"{sc.get('pool'):,} requests drawn at random (loadtest/workloads/mix.py) over the table config's models, "
            "positions uniform over twice each table's length (inside it and past it), binary and JSON, "
            "/v1 and v2 REST, cycled by the probe and wrk; the floors answer each with posenc's own bytes. "
            f"Kinds: {', '.join(sc.get('kinds', []))}.\n"
        )
        w = res.get("wrk", {})
        if "posenc_max" in w and "floor_max" in w:
            pr, fr = w["posenc_max"]["rps"], w["floor_max"]["rps"]
            L.append(
                f"Throughput (wrk, {w['posenc_max']['connections']} connections): posenc **{pr:,.0f}/s**, "
                f"raw-ASGI floor {fr:,.0f}/s: **{pr / fr:.2f}×** the floor"
                + (f"; the bare asyncio server {w['bare_max']['rps']:,.0f}/s" if "bare_max" in w else "")
                + ".\n"
            )
        ns = [n for n in res.get("new_specs") or [] if n.get("sent")]
        if ns:
            sent, ok = sum(n["sent"] for n in ns), sum(n["ok"] for n in ns)
            mid = sorted(n["p50_ms"] for n in ns)[len(ns) // 2]
            L.append(
                f"New specs alongside, {ns[0]['per_s']:g}/s while posenc was measured: {sent} sent, {ok} "
                f"answered 200, median of the measurements' p50s {mid} ms, slowest "
                f"{max(n['max_ms'] for n in ns)} ms (each an on-demand build).\n"
            )
    L += _paths_rows(res)
    return "\n".join(L)
