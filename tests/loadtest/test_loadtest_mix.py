"""The realistic-mix scenario end to end (issue #21): ``posenc loadtest --scenario realistic-mix`` on its
own ``posenc serve`` for a few seconds, and the locustfile's MixUser. The report must show the mix's
throughput against the raw-ASGI floor answering the same bytes, and which way posenc answered.
"""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest

for _mod in ("locust", "hdrh", "uvicorn"):
    if importlib.util.find_spec(_mod) is None:
        pytest.fail(f"{_mod} not installed: pip install -e '.[test]' (or .[loadtest])", pytrace=False)

from posenc.loadtest.drivers import locustrun
from posenc.loadtest.floors import asgi_app as floor
from posenc.loadtest.workloads import mix
from posenc.service.shortcut.templates import shortcut_in_use
from tests.loadtest.loadtest_cases import TABLES
from tests.procs import PYTHON

SHORTCUT = shortcut_in_use("auto") == "c"  # what `posenc serve` runs here by default


@pytest.fixture
def tables(tmp_path):
    path = tmp_path / "tables.json"
    path.write_text(json.dumps(TABLES))
    return str(path)


@pytest.mark.slow
def test_realistic_mix_report_end_to_end(procs, tables, tmp_path):
    for tool, package in (("wrk", "wrk"), ("h2load", "nghttp2-client")):
        assert shutil.which(tool), (
            f"{tool} is not installed: `apt-get install -y {package}` (.ci/run installs it)"
        )
    out = tmp_path / "report"
    cmd = [
        PYTHON,
        "-m",
        "posenc",
        "loadtest",
        "--scenario",
        "realistic-mix",
        "--tables",
        tables,
        "--out",
        str(out),
        "--server-cpus",
        "",
        "--client-cpus",
        "",
        "--saturation",
        "400",
        "--fractions",
        "0.5",
        "--probe-duration",
        "1",
        "--probe-warmup",
        "0.2",
        "--connections",
        "8",
        "--wrk-duration",
        "1",
        "--locust-time",
        "4",
        "--locust-users",
        "4",
        "--new-specs-per-s",
        "4",
        "--idle-budget",
        "0",
    ]
    p = procs.run(cmd, timeout=240, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert res["shm_leftovers"] == []
    assert res["scenario"]["name"] == "realistic-mix" and res["scenario"]["pool"] == 2048
    # every family, every way: /v1 and v2 REST, binary and JSON
    assert set(res["scenario"]["kinds"]) == {
        f"{f} {w}" for f in ("rope", "sinusoidal", "alibi", "t5-buckets") for w in mix.WAYS
    }
    # The floors answered each request with posenc's own bytes (captured per request).
    answers = json.loads((out / "floor_requests.json").read_text())
    assert len(answers) == 2048 and {a[0] for a in answers} >= {"/v1/rope", "/v2/models/alibi/infer"}
    for s in res["probe"]["posenc"] + res["probe"]["floor"]:
        assert s["errors"] == 0 and s["sender"] == "c", s
    assert res["wrk"]["posenc_max"]["failures"] == 0 and res["wrk"]["floor_max"]["rps"] > 0
    # which way posenc answered (posenc_answer_path_total's differences): /v1 and v2 REST, every
    # answer under one path; the pool's requests were each answered once before (the full path
    # learnt them), so the lane's one C call answers some (none where the C shortcut is off: the
    # numpy backend)
    for key in ("wrk_max", "probe"):
        ps = res["paths"][key]
        assert set(ps["counts"]) == {"c", "shortcut", "python"}
        assert ps["requests"] > 0 and (ps["counts"]["c"] > 0) == SHORTCUT
        routes = ps["by_route"]
        assert any(r.startswith("/v1/") for r in routes) and any(r.startswith("/v2/models/") for r in routes)
        assert sum(ps["counts"].values()) == ps["requests"] == sum(sum(c.values()) for c in routes.values())
        assert abs(sum(ps["shares"].values()) - 1) < 1e-9
        assert (0 < ps["lane"] if SHORTCUT else ps["lane"] == 0) and ps["lane"] <= ps["requests"]
    # new specs went alongside, each answered
    sent = sum(n["sent"] for n in res["new_specs"])
    assert sent > 0 and sum(n["ok"] for n in res["new_specs"]) == sent
    md = (out / "summary.md").read_text()
    assert "## Realistic mix" in md and "the floor" in md and "### Which way posenc answered" in md
    assert res["locust"]["Aggregated"]["failures"] == 0
    assert any(k.startswith("mix ") for k in res["locust"]), sorted(res["locust"])


def test_floor_answers_each_request_with_its_bytes(tmp_path):
    """The raw-ASGI floor looks each request up by path and body (the mix gives every request its own answer)."""
    import asyncio

    path = tmp_path / "answers.json"
    floor.save_requests(
        str(path),
        [
            ("/v1/rope", b'{"a":1}', "application/json", b"one", []),
            (
                "/v1/rope",
                b'{"a":2}',
                "application/octet-stream",
                b"two",
                [("inference-header-content-length", "3")],
            ),
        ],
    )
    app = floor.make_app({}, floor.load_requests(str(path)))

    async def call(body: bytes):
        sent = []

        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(msg):
            sent.append(msg)

        await app({"type": "http", "path": "/v1/rope"}, receive, send)
        return dict(sent[0]["headers"]), sent[1]["body"]

    assert asyncio.run(call(b'{"a":1}')) == (
        {b"content-type": b"application/json", b"content-length": b"3"},
        b"one",
    )
    h, b = asyncio.run(call(b'{"a":2}'))
    assert b == b"two" and h[b"inference-header-content-length"] == b"3"


@pytest.mark.slow
def test_locust_mix_user(procs, tables, tmp_path):
    srv = procs.serve(tables, workers=1)
    prefix = str(tmp_path / "locust")
    stats = locustrun.run(
        srv.url,
        prefix,
        users=4,
        run_time=3,
        log_path=str(tmp_path / "locust.log"),
        extra=["--posenc-scenario", "realistic-mix", "--posenc-tables", tables],
    )
    agg = stats["Aggregated"]
    assert agg["requests"] > 0 and agg["failures"] == 0, (tmp_path / "locust.log").read_text()[-2000:]
    names = {k for k in stats if k.startswith("mix ")}
    assert len(names) >= 8, sorted(stats)  # many families and ways drawn in a few seconds
    # the scenario runs MixUser and NewSpecUser only
    assert set(stats) - names - {"Aggregated"} <= {"new-spec"}, sorted(stats)


def test_every_v1_request_the_mix_draws_from_the_default_tables_parses():
    """The default table config's tables, as the mix asks them: each /v1 body parses (multi-axis
    RoPE tables, asked with per-axis position_ids, are left out of the mix)."""
    from posenc.engine.answer import pipeline

    _, _, _, items = mix.build("t", None, pool=512)
    v1 = [(path, body) for path, _, body in items if path.startswith("/v1/")]
    assert len({path for path, _ in v1}) == 4
    for path, body in v1:
        pipeline.parse(path[len("/v1/") :], json.loads(body))
