"""Tampering with a running server's storage, as another process of the same user can, under a
checked load (every HTTP answer compared byte for byte with the float64 reference) and with a
co-located reader process holding views and checking its own lookups: the tables (configured,
named, on-demand) are sealed segments, reached through /proc/PID/fd of the engine and of serve's
keeper, and every way of changing them is refused; every file the namespace has in /dev/shm
(manifest head and table log, metrics files, locks) is truncated, overwritten or appended to
with lies, or unlinked. Nothing may die,
no byte may be wrong, named tables answer by name throughout."""

from __future__ import annotations

import errno
import fcntl
import json
import mmap
import os
import random
import threading

import httpx

from posenc.engine.answer.pipeline import compute
from posenc.engine.core.formats import read_safetensors
from tests.integration.engine_cases import LOOP_CASES, SMALL_CONFIG, reader
from tests.procs import wait_for
from tests.service_cases import BIN, reference_safetensors
from tests.shm import SHM_DIR, assert_no_leftovers, held_segments, read_manifest, segment_fds, shm_files

ON_DEMAND = {"head_dim": 32, "rope_theta": 77.0}


def _requests(rng: random.Random, named: str):
    """(route, body, the spec body whose reference it must equal): configured by spec, by name,
    on demand; positions on both sides of the tables' ends."""
    p = sorted(rng.sample(range(0, 9000), 3))
    return rng.choice(
        [
            ("rope", {"head_dim": 64, "positions": p}, None),
            ("rope", {"table": named, "positions": p}, {"head_dim": 64, "positions": p}),
            ("rope", {**ON_DEMAND, "positions": p}, None),
            ("sinusoidal", {"d_model": 33, "positions": p}, None),
            ("alibi", {"num_heads": 8, "query": p[:2], "key": p}, None),
        ]
    )


def _load(url: str, named: str, stop: threading.Event, out: list, seed: int) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=url, timeout=30) as c:
        while not stop.is_set():
            family, body, ref = _requests(rng, named)
            try:
                r = c.post(f"/v1/{family}", json=body, headers=BIN)
                if ref is None:
                    ok = r.content == reference_safetensors(family, body)
                else:  # by name: the arrays of its spec's answer (the metadata names the table)
                    got, want = read_safetensors(r.content)[0], compute(family, ref)
                    ok = all(got[k].tobytes() == want[k].tobytes() for k in ("cos", "sin"))
                out.append((r.status_code, ok, body))
            except httpx.HTTPError as e:
                out.append((repr(e), False, body))


def _try_tables(pid: int, ns: str) -> dict[str, int]:
    """Every way to change a segment through /proc/PID/fd, sealed or being filled (a table the
    load makes grow may be building meanwhile); {attempt: refusals, "segments": how many}."""
    refused = {"truncate": 0, "grow": 0, "write": 0, "map": 0}
    fds = segment_fds(pid, ns)
    attacked = 0
    for fd, name in fds.items():
        path = f"/proc/{pid}/fd/{fd}"
        if not _sealed_soon(path, name):
            continue  # closed meanwhile (a build discarded): not a segment any more
        try:  # a reopen for writing is allowed; nothing through it is
            own = os.open(path, os.O_RDWR)
        except OSError:
            continue  # closed since (a table replaced by a longer one)
        if _seal_state(f"/proc/self/fd/{own}", name) == "gone":  # the number reused meanwhile
            os.close(own)
            continue
        attacked += 1
        try:  # (through the reopened file, which cannot close under us as the engine's number can)
            for what, attempt in (
                ("truncate", lambda: os.ftruncate(own, 4096)),
                ("grow", lambda: os.ftruncate(own, 1 << 30)),
            ):
                try:
                    attempt()
                except OSError as e:
                    assert e.errno == errno.EPERM, e
                    refused[what] += 1
            try:
                os.pwrite(own, b"\xff" * 64, 64)
            except OSError as e:
                assert e.errno == errno.EPERM, e
                refused["write"] += 1
            try:
                mmap.mmap(own, 0, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            except OSError as e:
                assert e.errno == errno.EPERM, e
                refused["map"] += 1
        finally:
            os.close(own)
    return {**refused, "segments": attacked}


def _seal_state(path: str, name: str) -> str:
    """ "sealed", "unsealed" (being filled), or "gone": the descriptor closed, or its number now
    another file's (a /proc link read again, not trusted from the listing)."""
    try:
        if os.readlink(path).removeprefix("/memfd:").removesuffix(" (deleted)") != name:
            return "gone"
        own = os.open(path, os.O_RDONLY)
    except OSError:
        return "gone"
    try:
        return "sealed" if fcntl.fcntl(own, fcntl.F_GET_SEALS) else "unsealed"
    except OSError:
        return "gone"
    finally:
        os.close(own)


def _sealed_soon(path: str, name: str) -> bool:
    """Whether the segment ``name`` at ``path`` is sealed, waiting for one being filled: the engine
    seals a segment three calls after it creates it (ftruncate, its one writable mapping, the
    filling seals), and a listing may fall between. False when it is gone (a build discarded);
    one that never gets its seals fails the wait."""
    state = wait_for(
        lambda: (st := _seal_state(path, name)) != "unsealed" and st,
        120,
        0.001,
        f"{name} ({path}) sealed or closed",
        seen=lambda: _seal_state(path, name),
    )
    return state == "sealed"


def _tamper_files(ns: str, readers_went_on) -> list[str]:
    """Truncate every file of the namespace in /dev/shm, write lies into the manifest (its head:
    every named table pointing at another's digest; its table log: every table's arrays at wrong
    offsets, appended as the engine appends; then ``readers_went_on()``: they have answered and
    read since), then unlink it."""
    done = []
    for n in shm_files(ns):
        path = os.path.join(SHM_DIR, n)
        if n.endswith(".sock"):
            continue
        try:
            if n.endswith(".manifest.json"):
                try:
                    m = read_manifest(ns)
                    digests = list(m["tables"])
                    digests[0]
                except (ValueError, KeyError, IndexError, TypeError):  # truncated last round (or
                    continue  # rewritten since): lie again next round
                for e in m["named"]:
                    e["digest"] = digests[0]
                    e["spec"] = {"head_dim": 8}
                with open(path, "w") as f:
                    json.dump({k: v for k, v in m.items() if k not in ("tables", "seq")}, f)
                with open(os.path.join(SHM_DIR, f"{ns}.manifest.log"), "a") as f:
                    for d, e in m["tables"].items():
                        e["nbytes"] *= 4
                        for a in e["arrays"].values():
                            a["offset"] += 4096
                        f.write(json.dumps({"seq": m.get("seq", 0) + 1000, "digest": d, "entry": e}) + "\n")
                readers_went_on()  # readers have met the lying files and acted on them
            os.truncate(path, 0)
            done.append(n)
        except OSError:
            pass
    return done


def test_tampering_kills_nothing_and_changes_no_answer(procs, ns, tmp_path):
    server = procs.serve(SMALL_CONFIG, workers=2, namespace=ns)
    with open(os.path.join(SHM_DIR, f"{ns}.manifest.json"), "rb") as f:
        named = next(e["name"] for e in json.load(f)["named"] if e["family"] == "rope")
    stop_file = tmp_path / "stop"
    co = reader(procs, ns, "loop", name="co-located", cases=LOOP_CASES, stop=str(stop_file))
    co.wait_json(lambda m: m.get("i", 0) >= 2, timeout=60, what="the co-located reader's first rounds")
    httpx.post(server.url + "/v1/rope", json={**ON_DEMAND, "positions": [1]}, headers=BIN, timeout=30)
    # (six tables by name: while a reader attaches, the engine holds a second descriptor of one)
    wait_for(lambda: len(set(held_segments(server.engine_pid(), ns))) == 6, 60, 0.05, "the on-demand table")
    pids = {"engine": server.engine_pid(), "workers": sorted(server.worker_pids()), "serve": server.pid}
    # the serve process maps the on-demand table at its own manifest recheck, later than the engine
    # holds it (under load, after the attack below began: 5 segments, not 6)
    wait_for(
        lambda: len(segment_fds(pids["serve"], ns)) >= 6,
        60,
        0.05,
        "the serve process mapping the on-demand table",
        seen=lambda: sorted(segment_fds(pids["serve"], ns).values()),
    )
    stop, out = threading.Event(), []
    threads = [threading.Thread(target=_load, args=(server.url, named, stop, out, k)) for k in range(2)]
    for t in threads:
        t.start()

    def co_round() -> int:
        return max((m.get("i", 0) for m in co.json_lines()), default=0)

    def readers_went_on(answers: int = 4, rounds: int = 3) -> None:
        """The workers answered ``answers`` more requests and the co-located reader finished
        ``rounds`` more rounds (3 outlast its client's manifest recheck, 0.05 s): a positive end,
        not a sleep."""
        n, i = len(out), co_round()
        wait_for(
            lambda: len(out) >= n + answers and co_round() >= i + rounds,
            60,
            0.02,
            f"{answers} more answers and {rounds} more rounds of the co-located reader",
        )

    try:
        wait_for(lambda: len(out) >= 10, 30, 0.02, "the load answered")
        refused = [_try_tables(pids["engine"], ns), _try_tables(pids["serve"], ns)]
        tampered = []
        for _ in range(3):
            tampered += _tamper_files(ns, readers_went_on)
            readers_went_on()
        for manifest in (os.path.join(SHM_DIR, f"{ns}.manifest.{x}") for x in ("json", "log")):
            if os.path.exists(manifest):
                os.unlink(manifest)
        readers_went_on(answers=max(20, 51 - len(out)), rounds=6)  # and nothing died meanwhile (below)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    # 6 tables at least (2 rope dtypes, sinusoidal, alibi, t5, on-demand; its grown successor too
    # once it is building), each refused each way
    for r in refused:
        assert r["segments"] >= 6 and r == dict.fromkeys(
            ("truncate", "grow", "write", "map", "segments"), r["segments"]
        ), refused
    assert (
        any(".metrics." in n for n in tampered)
        and any(n.endswith("manifest.json") for n in tampered)
        and any(n.endswith("manifest.log") for n in tampered)
    ), tampered
    bad = [(s, body) for s, ok, body in out if s != 200 or not ok]
    assert not bad and len(out) > 50, (bad[:5], len(out))
    named_ok = [ok for s, ok, body in out if "table" in body]
    assert named_ok and all(named_ok)
    # nothing died
    assert (
        server.alive()
        and server.engine_pid() == pids["engine"]
        and sorted(server.worker_pids()) == pids["workers"]
    ), server.output()
    assert co.alive(), co.logs()
    stop_file.touch()
    co.expect_exit(0, timeout=30)
    assert server.stop() == 0, server.output()
    assert_no_leftovers(ns)
