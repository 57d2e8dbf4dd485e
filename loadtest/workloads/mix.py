"""The ``realistic-mix`` scenario: what a fleet of pipelines sends, drawn at random.

Every request picks one table of the server's table config (the engine's default set, or
``--tables FILE``: several models' RoPE, sinusoidal, ALiBi and T5 specs, as
posenc.engine.process.configured reads them), asks with that table's spec (not its name, as a pipeline
holding a model's config does), at positions drawn uniformly over twice the table's length (its
model's context and as far again past it, where rows are computed), in one of four ways: /v1 binary
(safetensors), /v1 JSON, KServe v2 REST with binary tensor data, or v2 REST with JSON tensors
(``/v2/models/<family>/infer``). Shapes stay small, as decode steps and short feature lookups are:

- rope: one row (binary) or 16 consecutive rows (JSON);
- sinusoidal: 4 positions anywhere in the range;
- alibi: one query row t against 16 keys drawn from [0, t] (distances up to twice the table);
- t5-buckets: one query against 16 keys anywhere in the range.

``build`` returns a pool of such requests (the probe and wrk cycle through it: a few thousand
different requests, never one fixed request) and ``NewSpecs`` sends a few specs per second that no
table holds, alongside (loadtest/workloads/payloads.py ``Mix.new_spec``: each is built on demand).
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.request

from posenc.engine.process.configured import load_config

from . import payloads

NAME = "realistic-mix"
WAYS = ("v1-binary", "v1-json", "v2-binary", "v2-json")
# family -> (the v2 inputs / the /v1 selections it takes)
_SEL = {
    "rope": ("positions",),
    "sinusoidal": ("positions",),
    "alibi": ("query", "key"),
    "t5-buckets": ("query", "key"),
}


# multi-axis RoPE specs (flux.1's axes_dim, Qwen2-VL's mrope_section) are asked with per-axis
# position_ids, not positions: the mix leaves their tables out
_MULTI_AXIS = ("axes_dim", "mrope_section")


def tables(path: str | None = None) -> list[dict]:
    """The configured tables the mix draws from: name, family, spec, length."""
    return [
        {"name": t.name, "family": t.table.family, "spec": dict(t.spec), "length": t.table.length}
        for t in load_config(path)
        if t.table.family in _SEL and not any(k in t.spec for k in _MULTI_AXIS)
    ]


def selections(t: dict, way: str, rng: random.Random) -> dict:
    """The table's selections for one request: positions uniform over [0, 2 x length)."""
    hi = 2 * t["length"]
    fam = t["family"]
    if fam == "rope":
        if way.endswith("json"):
            s = rng.randrange(hi - 16)
            return {"positions": list(range(s, s + 16))}
        return {"positions": [rng.randrange(hi)]}
    if fam == "sinusoidal":
        return {"positions": [rng.randrange(hi) for _ in range(4)]}
    if fam == "alibi":
        q = rng.randrange(hi)
        return {"query": [q], "key": sorted(rng.randrange(q + 1) for _ in range(16))}
    return {"query": [rng.randrange(hi)], "key": [rng.randrange(hi) for _ in range(16)]}


def request(t: dict, way: str, rng: random.Random) -> tuple[str, dict, bytes]:
    """(path, headers, body) of one request to table ``t`` the way ``way`` asks."""
    return encode(t["family"], t["spec"], way, selections(t, way, rng))


def encode(family: str, spec: dict, way: str, sel: dict) -> tuple[str, dict, bytes]:
    """(path, headers, body) of the request for ``spec`` of ``family`` with selections ``sel``
    ({name: positions}; on /v1 a range {start, stop[, step]} too) the way ``way`` (WAYS) asks."""
    if way.startswith("v1"):
        accept = payloads.JSON if way.endswith("json") else payloads.BINARY
        body = json.dumps({**spec, **sel}, separators=(",", ":")).encode()
        return f"/v1/{family}", {"Accept": accept, "Content-Type": "application/json"}, body
    path = f"/v2/models/{family}/infer"
    spec = json.dumps(spec, separators=(",", ":"))
    if way == "v2-json":
        inputs = [{"name": k, "datatype": "INT64", "shape": [len(v)], "data": v} for k, v in sel.items()]
        body = json.dumps({"parameters": {"spec": spec}, "inputs": inputs}, separators=(",", ":")).encode()
        return path, {"Content-Type": "application/json"}, body
    head = json.dumps(
        {
            "parameters": {"spec": spec, "binary_data_output": True},
            "inputs": [
                {
                    "name": k,
                    "datatype": "INT64",
                    "shape": [len(v)],
                    "parameters": {"binary_data_size": 8 * len(v)},
                }
                for k, v in sel.items()
            ],
        },
        separators=(",", ":"),
    ).encode()
    data = b"".join(int(p).to_bytes(8, "little") for v in sel.values() for p in v)
    return (
        path,
        {"Inference-Header-Content-Length": str(len(head)), "Content-Type": "application/octet-stream"},
        head + data,
    )


def http_bytes(path: str, headers: dict, body: bytes, host: str) -> bytes:
    """The exact HTTP/1.1 keep-alive request the probe sends."""
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\n{head}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def build(host: str, tables_path: str | None = None, pool: int = 2048, seed: int = 1):
    """(request bytes, kind index per request, kind names, [(path, headers, body)]): ``pool``
    requests drawn at random, table and way uniformly; kinds are "<family> <way>"."""
    rng = random.Random(seed)
    ts = tables(tables_path)
    names: list[str] = []
    reqs, kinds, items = [], [], []
    for _ in range(pool):
        t, way = rng.choice(ts), rng.choice(WAYS)
        path, headers, body = request(t, way, rng)
        name = f"{t['family']} {way}"
        if name not in names:
            names.append(name)
        reqs.append(http_bytes(path, headers, body, host))
        kinds.append(names.index(name))
        items.append((path, headers, body))
    return reqs, kinds, names, items


class NewSpecs(threading.Thread):
    """A RoPE spec no table holds, ``per_s`` times a second (/v1 binary), while a measurement runs:
    each is built on demand. Records each answer's status and seconds."""

    def __init__(self, url: str, per_s: float, seed: int = 7):
        super().__init__(daemon=True, name="new-specs")
        self.url, self.per_s = url, per_s
        self.mix = payloads.Mix(payloads.load(), random.Random(seed))
        self.stop_event = threading.Event()
        self.results: list[tuple[int, float]] = []

    def run(self) -> None:
        while not self.stop_event.wait(1.0 / self.per_s):
            body = json.dumps(self.mix.new_spec()).encode()
            req = urllib.request.Request(
                self.url + "/v1/rope",
                data=body,
                method="POST",
                headers={"Accept": payloads.BINARY, "Content-Type": "application/json"},
            )
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    r.read()
                    status = r.status
            except urllib.error.HTTPError as e:
                status = e.code
            except OSError:
                status = 0
            self.results.append((status, time.perf_counter() - t0))

    def stop(self) -> dict:
        self.stop_event.set()
        self.join(timeout=35)
        secs = sorted(s for _, s in self.results)
        return {
            "sent": len(self.results),
            "ok": sum(1 for st, _ in self.results if st == 200),
            "per_s": self.per_s,
            "p50_ms": round(1000 * secs[len(secs) // 2], 1) if secs else None,
            "max_ms": round(1000 * secs[-1], 1) if secs else None,
        }
