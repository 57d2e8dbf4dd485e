"""The report's latency.png: the probe's percentiles per offered rate, posenc's against the
raw-ASGI floor's and the bare server's, from the figures figures.py computed (matplotlib,
imported only to draw).
"""

from __future__ import annotations

from .figures import PCTS, saturated


def plot(res: dict, path: str, f: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = dict(zip(PCTS, ("tab:green", "tab:blue", "tab:orange", "tab:red")))
    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=110)
    series = {
        name: [s for s in res.get("probe", {}).get(name, []) if s["percentiles_us"] or saturated(s)]
        for name in ("posenc", "floor", "bare")
    }
    # Scale to the steps that kept up; a step that fell behind sits at the top edge, marked x.
    kept = [s["percentiles_us"][p] for v in series.values() for s in v if not saturated(s) for p in PCTS]
    top = max(kept) * 2.5 if kept else 10_000.0
    low = min(kept + [f["target"]["p99_us"]]) * 0.6 if kept else 10.0
    for name, style, lw in (("posenc", "-", 2.0), ("floor", "--", 1.2), ("bare", ":", 1.2)):
        steps = series[name]
        if not steps:
            continue
        ok = [s for s in steps if not saturated(s)]
        for p in PCTS:
            ax.plot(
                [s["rate"] / 1000 for s in ok],
                [s["percentiles_us"][p] for s in ok],
                style,
                color=colors[p],
                lw=lw,
                marker="o" if name == "posenc" else ".",
                label=f"{name} {p}",
            )
        xs = [s["rate"] / 1000 for s in steps if saturated(s)]
        if xs:
            ax.plot(xs, [top] * len(xs), "x", color="black", ms=9, mew=2, clip_on=False)
    ax.set_ylim(low, top)
    sat = f["saturation_rps"] / 1000
    if sat:
        for frac, ls in ((1.0, "-"), (0.8, ":"), (0.5, ":")):
            ax.axvline(frac * sat, color="grey", ls=ls, lw=0.8)
            ax.text(
                frac * sat,
                0.01,
                f"{frac:.0%} sat",
                rotation=90,
                transform=ax.get_xaxis_transform(),
                fontsize=8,
                ha="right",
                va="bottom",
                color="grey",
            )
    ax.axhline(
        f["target"]["p99_us"], color="purple", ls="-.", lw=1, label=f"target p99 {f['target']['p99_us']:g} µs"
    )
    ax.set_yscale("log")
    ax.set_xlabel("offered rate (k requests/s, open loop)")
    ax.set_ylabel("latency from scheduled send (µs)")
    kinds = ", ".join(s["kind"] for s in res.get("probe_requests", []))
    if len(kinds) > 80:
        kinds = f"{res.get('scenario', {}).get('name', '')} ({len(res.get('probe_requests', []))} kinds)"
    ax.set_title(
        f"posenc vs raw ASGI floor and bare server, {kinds}; one server core\n"
        "x: fell behind (no latency; drawn at the top edge)",
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
