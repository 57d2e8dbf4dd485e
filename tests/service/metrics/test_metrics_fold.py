"""The request counts of every worker, live or gone, in /metrics' text: a worker that dies
(SIGKILL: its file stays) or exits (its close()) keeps its counts, folded exactly once into the
persistent total; the text parses with prometheus_client's parser. Workers here are real child
processes (tests/children/metrics_worker.py), counting into a private directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess

from prometheus_client.parser import text_string_to_metric_families

from posenc.service.metrics.counters import Metrics
from tests.procs import PYTHON, child_env


def samples(text: str) -> dict:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def count(text: str, route: str, status: str = "200") -> float:
    return samples(text).get(
        ("posenc_request_duration_seconds_count", (("route", route), ("status", status))), 0.0
    )


def start_worker(shm: str, n: int, exit_cleanly: bool) -> subprocess.Popen:
    p = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "tests.children.metrics_worker",
            shm,
            "mtest",
            str(n),
            "exit" if exit_cleanly else "hang",
        ],
        stdout=subprocess.PIPE,
        env=child_env(),
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
    )
    line = p.stdout.readline()
    p.stdout.close()
    assert json.loads(line)["counted"] == n
    return p


def test_dead_and_exited_workers_keep_their_counts_once(tmp_path):
    shm = str(tmp_path)
    me = Metrics(shm, "mtest")
    try:
        me.observe("/v1/rope", 200, 50e-6, 100)
        killed = start_worker(shm, 7, exit_cleanly=False)
        exited = start_worker(shm, 5, exit_cleanly=True)
        assert exited.wait(10) == 0
        before = me.render()
        assert count(before, "/v1/rope") == 1 + 7 + 5
        killed.send_signal(signal.SIGKILL)
        killed.wait(10)
        for _ in range(3):  # folded once, however many scrapes follow
            after = me.render()
            assert count(after, "/v1/rope") == 13
        assert not [
            n
            for n in os.listdir(shm)
            if n.startswith("mtest.metrics.") and n[14:].isdigit() and int(n[14:]) != os.getpid()
        ]
        s = samples(after)
        assert s[("posenc_workers", ())] == 1
        assert s[("posenc_response_bytes_total", (("route", "/v1/rope"),))] == 100 + 7 * 10 + 5 * 10
        assert s[("posenc_answer_path_total", (("path", "c"), ("route", "/v1/rope")))] == 12
        assert s[("posenc_answer_path_total", (("path", "python"), ("route", "/v1/rope")))] == 1
        assert s[("posenc_hot_path_total", (("path", "shortcut"), ("route", "/v1/rope")))] == 12
        assert s[("posenc_hot_path_total", (("path", "full"), ("route", "/v1/rope")))] == 1
    finally:
        me.close()


def test_a_fold_interrupted_before_the_unlink_is_not_counted_twice(tmp_path):
    """The total records the tokens it folded: a dead file still there after its fold (the
    scraper died between the two steps) is removed, not added again."""
    shm = str(tmp_path)
    me = Metrics(shm, "mtest")
    try:
        killed = start_worker(shm, 4, exit_cleanly=False)
        killed.send_signal(signal.SIGKILL)
        killed.wait(10)
        path = os.path.join(shm, f"mtest.metrics.{killed.pid}")
        with open(path, "rb") as f:
            saved = f.read()
        assert count(me.render(), "/v1/rope") == 4
        with open(path, "wb") as f:  # as if the unlink had not happened
            f.write(saved)
        assert count(me.render(), "/v1/rope") == 4
        assert not os.path.exists(path)
    finally:
        me.close()


def test_errors_by_status_and_the_text_parses(tmp_path):
    me = Metrics(str(tmp_path), "mtest")
    try:
        me.observe("/v1/rope", 422, 1e-3, 80)
        me.observe("/v1/rope", 401, 1e-3, 30)
        me.observe("/healthz", 200, 1e-5, 15)
        s = samples(me.render())
        assert s[("posenc_errors_total", (("route", "/v1/rope"), ("status", "422")))] == 1
        assert s[("posenc_errors_total", (("route", "/v1/rope"), ("status", "other")))] == 1
        assert ("posenc_errors_total", (("route", "/healthz"), ("status", "200"))) not in s
        assert (
            s[
                (
                    "posenc_request_duration_seconds_bucket",
                    (("le", "0.001"), ("route", "/v1/rope"), ("status", "422")),
                )
            ]
            == 1
        )
    finally:
        me.close()


def test_each_answer_counts_once_under_its_path_and_in_its_route(tmp_path):
    """Counts made at each path's offset (the ones the lane, the fronts and the gRPC server use)
    come out under that path, and the paths add up to the route's request count."""
    from posenc.service.metrics.layout import ANSWER_ROUTES, TO_SHORTCUT

    me = Metrics(str(tmp_path), "mtest")
    made = {}
    try:
        for k, route in enumerate(ANSWER_ROUTES):
            c, sc, py = k + 1, 2 * k + 1, k % 3
            for _ in range(c):
                me.observe_at(Metrics.path_index(route, "c"), 40e-6, 8)
            for i in range(sc):  # half as the lane and the /v1 front do, half by name
                if i % 2:
                    me.observe_at(Metrics.path_index(route, "c") + TO_SHORTCUT, 40e-6, 8)
                else:
                    me.observe_path(route, "shortcut", 40e-6, 8)
            for i in range(py):
                me.observe(route, 422 if i else 200, 1e-3, 8)
            made[route] = {"c": c, "shortcut": sc, "python": py}
        me.observe_path("/healthz", "c", 1e-5, 2)  # a route no C path answers: its own count
        s = samples(me.render())
        for route, want in made.items():
            got = {p: s[("posenc_answer_path_total", (("path", p), ("route", route)))] for p in want}
            assert got == want, route
            n = sum(
                v
                for (name, labels), v in s.items()
                if name == "posenc_request_duration_seconds_count" and dict(labels)["route"] == route
            )
            assert n == sum(want.values()), route
        assert count(me.render(), "/healthz") == 1
        assert not [k for k in s if k[0] == "posenc_answer_path_total" and dict(k[1])["route"] == "/healthz"]
    finally:
        me.close()
