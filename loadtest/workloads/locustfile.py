"""Locust user classes for posenc's real traffic mix (FastHttpUser: ~5k requests/s per process).

    locust -f loadtest/workloads/locustfile.py --host http://127.0.0.1:8000            # web UI
    locust -f loadtest/workloads/locustfile.py --headless -u 32 -r 32 -t 30s --host ... --csv out/locust

Users (class weights set how many of each run; ``--posenc-weights`` / $LOADTEST_WEIGHTS):
- ``DecodeUser``: inference decode steps — one RoPE row and one ALiBi decode row block (one query
  against every key so far, all heads), binary. The sub-100 µs hot path.
- ``PipelineUser``: feature-pipeline batches — hundreds to thousands of positions, binary
  (a RoPE position range, a shuffled sinusoidal batch).
- ``JsonUser``: JSON clients — small RoPE and T5-bucket selections, ``Accept: application/json``.
- ``NewSpecUser``: occasionally (once per ``--posenc-new-spec-every`` seconds per user) a rope spec
  never seen before, which the engine builds on demand.
- ``V2RestUser`` and ``GrpcUser`` (KServe v2): the decode RoPE row as a v2 REST binary request and
  as a gRPC ModelInfer call (``--posenc-grpc HOST:PORT``; loadtest/workloads/grpc_user.py).
- ``MixUser``: the ``realistic-mix`` scenario (loadtest/workloads/mix.py): each request drawn at random over the
  table config's models (``--posenc-tables FILE``, default the embedded set), positions over each
  table and past it, binary and JSON, /v1 and v2 REST. ``--posenc-scenario realistic-mix`` runs it
  with ``NewSpecUser`` alone beside it (its weight 0 otherwise).

Payload specs and sizes: ``--posenc-payloads FILE`` / $LOADTEST_PAYLOADS (see loadtest/workloads/payloads.py).
Think time: ``--posenc-wait SECONDS`` (default 0: each user sends back to back, closed loop).
Locust records whole milliseconds and runs closed-loop; for microsecond, open-loop figures use
``python -m posenc.loadtest.drivers.probe`` (``python -m posenc.loadtest report`` runs both).
"""

from __future__ import annotations

import json
import random

from locust import FastHttpUser, constant_pacing, events, task

from posenc.loadtest.workloads import mix, payloads
from posenc.loadtest.workloads.grpc_user import GrpcUser as _GrpcBase

_state = {"cfg": payloads.load(), "wait": 0.0, "tables": None}


@events.init_command_line_parser.add_listener
def _options(parser):
    parser.add_argument(
        "--posenc-weights",
        env_var="LOADTEST_WEIGHTS",
        default="decode=10,pipeline=2,json=2,newspec=1,v2rest=2,grpc=2,mix=0",
        help="user class weights: decode=N,pipeline=N,json=N,newspec=N,v2rest=N,grpc=N,mix=N",
    )
    parser.add_argument(
        "--posenc-grpc",
        env_var="LOADTEST_GRPC",
        default="",
        help="gRPC target HOST:PORT (default: the --host's host, port 8001)",
    )
    parser.add_argument(
        "--posenc-payloads",
        env_var="LOADTEST_PAYLOADS",
        default="",
        help="JSON file overriding loadtest/workloads/payloads.py DEFAULTS",
    )
    parser.add_argument(
        "--posenc-wait",
        env_var="LOADTEST_WAIT",
        type=float,
        default=0.0,
        help="think time between a user's requests, seconds (0: back to back)",
    )
    parser.add_argument(
        "--posenc-new-spec-every",
        env_var="LOADTEST_NEW_SPEC_EVERY",
        type=float,
        default=5.0,
        help="seconds between a NewSpecUser's requests",
    )
    parser.add_argument(
        "--posenc-scenario",
        env_var="LOADTEST_SCENARIO",
        default="",
        choices=["", mix.NAME],
        help="realistic-mix: MixUser and NewSpecUser only (weights mix=8,newspec=1)",
    )
    parser.add_argument(
        "--posenc-tables",
        env_var="LOADTEST_TABLES",
        default="",
        help="the server's table config (realistic-mix draws its specs from it; default: the embedded set)",
    )


_CLASSES = {}


@events.init.add_listener
def _configure(environment, **_kw):
    opts = environment.parsed_options
    if opts is None:  # library use: keep the defaults
        return
    _state["cfg"] = payloads.load(opts.posenc_payloads or None)
    _state["wait"] = opts.posenc_wait
    NewSpecUser.wait_time = constant_pacing(opts.posenc_new_spec_every)
    _state["tables"] = mix.tables(opts.posenc_tables or None)
    MixUser.weight = 0  # unless the weights or the scenario name it
    weights = opts.posenc_weights
    if opts.posenc_scenario == mix.NAME:
        weights = ",".join(f"{n}={ {'mix': 8, 'newspec': 1}.get(n, 0) }" for n in _CLASSES)
    for part in weights.split(","):
        name, _, w = part.strip().partition("=")
        if name not in _CLASSES:
            raise ValueError(f"--posenc-weights: unknown user {name!r}; known: {', '.join(_CLASSES)}")
        _CLASSES[name].weight = int(w)


def _think(user) -> float:
    w = _state["wait"]
    return random.uniform(0.5 * w, 1.5 * w) if w else 0.0


class _PosencUser(FastHttpUser):
    abstract = True
    wait_time = _think
    # Connection reuse as a real client does it; bounded so a wedged server fails the run instead of hanging it.
    network_timeout = 10.0
    connection_timeout = 5.0

    def on_start(self):
        self.mix = payloads.Mix(_state["cfg"], random.Random())

    def post(self, kind: str, name: str | None = None):
        path, accept, _ = payloads.KINDS[kind]
        with self.client.post(
            path,
            data=payloads.body(self.mix, kind),
            name=name or kind,
            headers={"Accept": accept, "Content-Type": "application/json"},
            catch_response=True,
        ) as r:
            if r.status_code != 200:
                r.failure(f"HTTP {r.status_code}: {(r.text or '')[:200]}")
            elif accept == payloads.BINARY and not r.content[:8]:
                r.failure("empty binary response")
            elif accept == payloads.JSON:
                try:
                    json.loads(r.content)
                except ValueError:
                    r.failure("response is not JSON")
                    return
                r.success()
            else:
                r.success()


class DecodeUser(_PosencUser):
    weight = 10

    @task(1)
    def rope_row(self):
        self.post("rope-row")

    @task(1)
    def alibi_decode(self):
        self.post("alibi-decode")


class PipelineUser(_PosencUser):
    weight = 2

    @task(1)
    def rope_batch(self):
        self.post("pipeline-rope")

    @task(1)
    def sinusoidal_batch(self):
        self.post("pipeline-sinusoidal")


class JsonUser(_PosencUser):
    weight = 2

    @task(2)
    def rope(self):
        self.post("json-rope")

    @task(1)
    def t5(self):
        self.post("json-t5")


class NewSpecUser(_PosencUser):
    weight = 1
    wait_time = constant_pacing(5.0)

    @task
    def new_spec(self):
        self.post("new-spec")


class V2RestUser(_PosencUser):
    """KServe v2 over REST: the decode RoPE row, binary tensor data both ways."""

    weight = 2

    @task
    def rope_row(self):
        body, n = payloads.v2_rest_body(*payloads.v2_rope_row(self.mix))
        with self.client.post(
            "/v2/models/rope/infer",
            data=body,
            name="v2-rope-row",
            catch_response=True,
            headers={"Inference-Header-Content-Length": str(n), "Content-Type": "application/octet-stream"},
        ) as r:
            if r.status_code != 200 or "inference-header-content-length" not in {
                k.lower() for k in r.headers
            }:
                r.failure(f"HTTP {r.status_code}: {(r.text or '')[:200]}")
            else:
                r.success()


class MixUser(_PosencUser):
    """The realistic mix: every request a random table, way and positions (loadtest/workloads/mix.py). Its weight
    is 0 unless --posenc-weights or --posenc-scenario gives it one (locust drops a class that
    starts at 0 before the options are read)."""

    weight = 1

    def on_start(self):
        super().on_start()
        self.tables = _state["tables"] or mix.tables()

    @task
    def draw(self):
        t, way = self.mix.rng.choice(self.tables), self.mix.rng.choice(mix.WAYS)
        path, headers, body = mix.request(t, way, self.mix.rng)
        with self.client.post(
            path, data=body, headers=headers, name=f"mix {t['family']} {way}", catch_response=True
        ) as r:
            if r.status_code != 200 or not r.content:
                r.failure(f"HTTP {r.status_code}: {(r.text or '')[:200]}")
            elif way.endswith("json") and not _parses(r.content):
                r.failure("response is not JSON")
            else:
                r.success()


def _parses(content: bytes) -> bool:
    try:
        json.loads(content)
    except ValueError:
        return False
    return True


class GrpcUser(_GrpcBase):
    """KServe v2 over gRPC: the decode RoPE row as ModelInfer."""

    weight = 2
    wait_time = _think

    def on_start(self):
        super().on_start()
        self.mix = payloads.Mix(_state["cfg"], random.Random())

    @task
    def rope_row(self):
        self.call("grpc-rope-row", payloads.v2_grpc_request(*payloads.v2_rope_row(self.mix)))


_CLASSES.update(
    decode=DecodeUser,
    pipeline=PipelineUser,
    json=JsonUser,
    newspec=NewSpecUser,
    v2rest=V2RestUser,
    grpc=GrpcUser,
    mix=MixUser,
)
