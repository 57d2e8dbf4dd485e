"""The traffic mix: what each kind of client sends, shared by the locustfile, the probe and wrk.

Every request kind is a path, an Accept header and a body generator. The specs default to tables
of the embedded default set (llama-2-7b rope, alibi-32, sinusoidal-768, t5), so against a default
``posenc serve`` everything but the ``new-spec`` kind is served from shared memory. They can be
overridden with a JSON file (``--payloads FILE`` / ``LOADTEST_PAYLOADS``) holding any subset of
``DEFAULTS`` below, e.g. ``{"rope_spec": {"head_dim": 64}, "pipeline_min": 100}``.
"""

from __future__ import annotations

import json
import os
import random

BINARY = "application/x-safetensors"
JSON = "application/json"

DEFAULTS = {
    # The table every rope request reads (llama-2-7b in the default set).
    "rope_spec": {"head_dim": 128, "rope_theta": 10000.0},
    # ALiBi decode: one query row against every key so far, all heads (MPT-7B / BLOOM-7b1: 32).
    "alibi_spec": {"num_heads": 32},
    "sinusoidal_spec": {"d_model": 768},
    "t5_spec": {"bidirectional": True},
    # Decode steps happen at context lengths drawn uniformly from this range.
    "decode_context": [1, 2048],
    # Feature-pipeline batches: this many positions (hundreds to thousands), binary.
    "pipeline_min": 256,
    "pipeline_max": 4096,
    # Position range the requests draw from (inside the default 131072-row tables).
    "max_position": 131072,
    # New specs: rope tables with a head_dim and a theta never asked for before -> on-demand build.
    "new_spec_head_dims": [32, 64],
    # JSON clients: small selections (JSON costs ~20x binary per value).
    "json_positions": 16,
}


def load(path: str | None = None) -> dict:
    """DEFAULTS updated from ``path`` (or $LOADTEST_PAYLOADS); an unknown key is an error."""
    cfg = dict(DEFAULTS)
    path = path or os.environ.get("LOADTEST_PAYLOADS") or None
    if path:
        with open(path) as f:
            extra = json.load(f)
        unknown = set(extra) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"{path}: unknown payload keys {sorted(unknown)}; known: {sorted(DEFAULTS)}")
        cfg.update(extra)
    return cfg


class Mix:
    """Body generators for every request kind; ``rng`` makes runs reproducible."""

    def __init__(self, cfg: dict | None = None, rng: random.Random | None = None):
        self.cfg = cfg or load()
        self.rng = rng or random.Random()

    # -- inference decode steps: the sub-100 µs hot path ----------------------------------------
    def rope_row(self) -> dict:
        lo, hi = self.cfg["decode_context"]
        return {**self.cfg["rope_spec"], "positions": [self.rng.randrange(lo, hi)]}

    def alibi_decode(self) -> dict:
        lo, hi = self.cfg["decode_context"]
        t = self.rng.randrange(lo, hi)
        return {**self.cfg["alibi_spec"], "query": [t], "key": {"start": 0, "stop": t + 1}}

    # -- feature pipelines: big binary batches ---------------------------------------------------
    def pipeline_rope(self) -> dict:
        n = self.rng.randint(self.cfg["pipeline_min"], self.cfg["pipeline_max"])
        start = self.rng.randrange(0, max(1, self.cfg["max_position"] - n))
        return {**self.cfg["rope_spec"], "positions": {"start": start, "stop": start + n}}

    def pipeline_sinusoidal(self) -> dict:
        n = self.rng.randint(self.cfg["pipeline_min"], self.cfg["pipeline_max"])
        # A shuffled batch of positions (packed sequences), not a range.
        return {
            **self.cfg["sinusoidal_spec"],
            "positions": [self.rng.randrange(self.cfg["max_position"]) for _ in range(n)],
        }

    # -- JSON clients ----------------------------------------------------------------------------
    def json_rope(self) -> dict:
        start = self.rng.randrange(self.cfg["max_position"] - self.cfg["json_positions"])
        return {
            **self.cfg["rope_spec"],
            "positions": {"start": start, "stop": start + self.cfg["json_positions"]},
        }

    def json_t5(self) -> dict:
        n = self.cfg["json_positions"]
        return {**self.cfg["t5_spec"], "query": {"start": 0, "stop": n}, "key": {"start": 0, "stop": n}}

    # -- occasional new specs: each one is built on demand by the engine -------------------------
    def new_spec(self) -> dict:
        d = self.rng.choice(self.cfg["new_spec_head_dims"])
        theta = float(self.rng.randrange(10_000, 10_000_000))  # practically never seen before
        return {"head_dim": d, "rope_theta": theta, "positions": [self.rng.randrange(4096)]}


# kind -> (path, accept, Mix method name). The probe and wrk use the decode kinds.
KINDS = {
    "rope-row": ("/v1/rope", BINARY, "rope_row"),
    "alibi-decode": ("/v1/alibi", BINARY, "alibi_decode"),
    "pipeline-rope": ("/v1/rope", BINARY, "pipeline_rope"),
    "pipeline-sinusoidal": ("/v1/sinusoidal", BINARY, "pipeline_sinusoidal"),
    "json-rope": ("/v1/rope", JSON, "json_rope"),
    "json-t5": ("/v1/t5-buckets", JSON, "json_t5"),
    "new-spec": ("/v1/rope", BINARY, "new_spec"),
}


def body(mix: Mix, kind: str) -> bytes:
    return json.dumps(getattr(mix, KINDS[kind][2])(), separators=(",", ":")).encode()


def http_request(kind: str, body_bytes: bytes, host: str) -> bytes:
    """The exact HTTP/1.1 bytes of one keep-alive request (the probe sends these as they are)."""
    path, accept, _ = KINDS[kind]
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAccept: {accept}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body_bytes)}\r\n\r\n"
    ).encode() + body_bytes


# -- KServe v2 (the Open Inference Protocol): the decode RoPE row as a v2 request -----------------
def v2_rope_row(mix: Mix) -> tuple[dict, list]:
    """(the ``spec`` parameter, positions) of a v2 request for the ``rope`` model."""
    body = mix.rope_row()
    return {k: v for k, v in body.items() if k != "positions"}, body["positions"]


def v2_rest_body(spec: dict, positions: list) -> tuple[bytes, int]:
    """A v2 REST binary request (JSON header + INT64 positions) and its header length."""
    head = json.dumps(
        {
            "parameters": {"spec": json.dumps(spec), "binary_data_output": True},
            "inputs": [
                {
                    "name": "positions",
                    "datatype": "INT64",
                    "shape": [len(positions)],
                    "parameters": {"binary_data_size": 8 * len(positions)},
                }
            ],
        },
        separators=(",", ":"),
    ).encode()
    return head + b"".join(int(p).to_bytes(8, "little") for p in positions), len(head)


def v2_grpc_request(spec: dict, positions: list) -> bytes:
    """The same request as a serialized gRPC ModelInferRequest."""
    from posenc.service.v2.proto import grpc_service_pb2 as pb

    r = pb.ModelInferRequest(model_name="rope")
    r.parameters["spec"].string_param = json.dumps(spec)
    r.inputs.add(name="positions", datatype="INT64", shape=[len(positions)])
    r.raw_input_contents.append(b"".join(int(p).to_bytes(8, "little") for p in positions))
    return r.SerializeToString()
