"""wrk (C, closed loop) as a second measure: the most a server core answers (many connections),
and the round trip a C client sees on one connection (the probe's overhead is its difference to
that on the raw floor). The Lua script cycles through the probe's own request bodies and prints
wrk's exact latency percentiles (µs) as one JSON line at the end."""

from __future__ import annotations

import json
import shutil
import subprocess

from ..servers import pinned

_LUA = r"""
local reqs = {%(reqs)s}
local i = 0
request = function()
  i = i %% #reqs + 1
  return reqs[i]
end
init = function(args)
  for j, r in ipairs(reqs) do
    reqs[j] = wrk.format("POST", r[1], r[2], r[3])
  end
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests": %%d, "duration_us": %%d, "bytes": %%d, "errors": {"connect": %%d, "read": %%d, "write": %%d, "status": %%d, "timeout": %%d}, "latency_us": {"p50": %%d, "p90": %%d, "p99": %%d, "p99.9": %%d, "max": %%d, "mean": %%.1f}}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
    latency.max, latency.mean))
end
"""


def available() -> str | None:
    return shutil.which("wrk")


def _lua_str(b: bytes) -> str:
    safe = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 {}[]:,._-")
    return '"' + "".join(chr(c) if c in safe else "\\%03d" % c for c in b) + '"'


def script(path: str, items: list[tuple[str, dict | str, bytes]]) -> None:
    """items: (path, headers, body) cycled in order; headers as a dict, or an Accept value alone
    (with a JSON body: Content-Type application/json)."""

    def table(headers: dict | str) -> str:
        if isinstance(headers, str):
            headers = {"Accept": headers, "Content-Type": "application/json"}
        return (
            "{"
            + ", ".join(
                "[%s] = %s" % (_lua_str(k.encode()), _lua_str(v.encode())) for k, v in headers.items()
            )
            + "}"
        )

    reqs = ",\n  ".join("{%s, %s, %s}" % (_lua_str(p.encode()), table(h), _lua_str(b)) for p, h, b in items)
    with open(path, "w") as f:
        f.write(_LUA % {"reqs": reqs})


def run(
    url: str,
    lua: str,
    duration: float,
    connections: int,
    threads: int = 1,
    cpus: str | None = None,
    timeout_s: float = 2.0,
) -> dict:
    cmd = pinned(
        [
            "wrk",
            "-t",
            str(threads),
            "-c",
            str(connections),
            "-d",
            f"{max(1, round(duration))}s",
            "--timeout",
            f"{timeout_s:g}s",
            "-s",
            lua,
            url,
        ],
        cpus,
    )
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 30, check=False)
    for line in p.stdout.splitlines():
        if line.startswith("WRKJSON "):
            r = json.loads(line[8:])
            r["rps"] = r["requests"] / (r["duration_us"] / 1e6) if r["duration_us"] else 0.0
            r["connections"] = connections
            r["failures"] = sum(r["errors"].values())
            return r
    raise RuntimeError(f"wrk produced no summary (rc {p.returncode}): {p.stdout[-500:]} {p.stderr[-500:]}")


def run_clean(url: str, lua: str, duration: float, connections: int, cpus: str | None = None) -> dict:
    """One run (``run``, a 10 s timeout per request) that any error fails: {"rps", "p50_us",
    "requests"}; what the benchmarks that hold posenc to a floor cell by cell take."""
    r = run(url, lua, duration, connections, cpus=cpus, timeout_s=10.0)
    if r["failures"]:
        raise RuntimeError(f"wrk saw errors on {url}: {r['errors']}")
    return {"rps": r["rps"], "p50_us": r["latency_us"]["p50"], "requests": r["requests"]}
