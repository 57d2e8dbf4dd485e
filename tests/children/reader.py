"""A reader process unrelated to the engine: ``python tests/children/reader.py TASK NS SHM ARGS``.

Run by path (so its folder, not the checkout, is first on ``sys.path``, and what it imports is
the installed ``posenc``). It attaches a ``Client`` to namespace NS in SHM, runs TASK with the
JSON object ARGS and reports on stdout as JSON lines. Tasks that must start together say
``{"ready": true}`` and wait for the file ARGS["go"].
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import time

import numpy as np
from bits import bits_equal, digest_of

from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from posenc.engine.reader.client import Client


def _suite_waits():
    """tests/waits.py, the suite's one wait helper, loaded by its path: this program runs by path,
    and putting the checkout on sys.path could shadow the installed posenc."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "waits.py")
    spec = importlib.util.spec_from_file_location("waits", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wait_for = _suite_waits().wait_for


def emit(**kw) -> None:
    print(json.dumps(kw), flush=True)


def wait_file(path: str, timeout: float = 60.0) -> None:
    wait_for(lambda: os.path.exists(path), timeout, 0.001, f"the file {path}")


def lookup(client, args):
    """Look every case up once and save the arrays (refusals by their loc) for the test to check."""
    out, errors = {}, {}
    for i, (fam, req) in enumerate(args["cases"]):
        try:
            res = client.lookup(fam, req)
        except SpecError as e:
            errors[str(i)] = list(e.loc)
            continue
        for k, v in res.items():
            out[f"{i}/{k}"] = np.asarray(v)
    np.savez(args["out"], **out)
    emit(done=True, errors=errors, generation=client.generation, pid=os.getpid())


def _check_cases(client, cases, expected) -> None:
    for (f, r), want in zip(cases, expected):
        if not bits_equal(client.lookup(f, r), want):
            emit(error=f"mismatch {f} {r}")
            sys.exit(1)


def read_for(client, args):
    """Released with the others, compare every case with the library round after round, saying so
    after the first round, until the file ARGS["stop"] exists (the test makes it once every reader
    has said so, so they all read at once however late one was scheduled)."""
    expected = [compute(f, r) for f, r in args["cases"]]
    emit(ready=True)
    wait_file(args["go"])
    start, n = time.time(), 0
    while True:
        _check_cases(client, args["cases"], expected)
        n += 1
        if n == 1:
            emit(reading=True)
        if os.path.exists(args["stop"]):
            break
    emit(n=n, start=start, end=time.time(), generation=client.generation)


def ask(client, args):
    """Released with the others, ask for one RoPE table (maybe not built yet) and check rows."""
    emit(ready=True)
    wait_file(args["go"])
    t = client.table("rope", args["spec"])
    rows = [0, 1, 4097, 131071]
    want = compute("rope", {**args["spec"], "positions": rows})
    h = want["cos"].shape[1] // 2
    ok = bits_equal(
        {"cos": t.cos[rows], "sin": t.sin[rows]}, {"cos": want["cos"][:, :h], "sin": want["sin"][:, :h]}
    )
    emit(digest=digest_of(t), generation=t.generation, ok=ok, length=t.length)


def loop(client, args):
    """Compare every case with the library until the file ARGS["stop"] exists, saying which
    generation each round read."""
    expected = [compute(f, r) for f, r in args["cases"]]
    i, gens = 0, []
    while not os.path.exists(args["stop"]):
        _check_cases(client, args["cases"], expected)
        i += 1
        g = client.generation
        if not gens or gens[-1] != g:
            gens.append(g)
        emit(i=i, gen=g)
        time.sleep(0.02)  # paces the rounds (a reader at work, not a busy loop); not a wait
    emit(done=i, gens=gens)


def _check_rope_rows(tables: dict, rows) -> None:
    """Each held RoPE view against the library at ``rows`` (the view holds the first half)."""
    for spec, t in tables:
        want = compute("rope", {**spec, "positions": rows})
        h = want["cos"].shape[1] // 2
        assert bits_equal(
            {"c": t.cos[rows], "s": t.sin[rows]}, {"c": want["cos"][:, :h], "s": want["sin"][:, :h]}
        ), spec
        assert t.segment.verify(), spec


def hold(client, args):
    """Map each RoPE spec of ARGS["specs"], say so (with their digests), then after ARGS["go"]
    read them again: mapped segments stay readable after the engine unlinks or evicts them."""
    held = [(spec, client.table("rope", spec)) for spec in args["specs"]]
    emit(mapped=[digest_of(t) for _, t in held])
    wait_file(args["go"])
    _check_rope_rows(held, args["rows"])
    emit(ok=True)


def read_only(client, args):
    """Try to write through mapped arrays; then exit as ARGS["exit"] says."""
    t = client.table("rope", {"head_dim": 64}, dtype="bfloat16")
    u = client.table("sinusoidal", {"d_model": 10})
    res = {}
    for name, a in (("cos", t.cos), ("table", u.table), ("inv_freq", t.inv_freq)):
        res[name + "_flag"] = bool(a.flags.writeable)
        try:
            a[0] = 0
            res[name + "_assign"] = "no error"
        except ValueError:
            res[name + "_assign"] = "ValueError"
        try:
            a.setflags(write=True)
            res[name + "_setflags"] = "no error"
        except ValueError:
            res[name + "_setflags"] = "ValueError"
    with open("/proc/self/maps") as f:
        maps = [line for line in f if client.namespace + ".seg." in line]
    res["map_perms"] = sorted({line.split()[1] for line in maps})
    emit(**res)
    how = args["exit"]
    if how == "os._exit":
        os._exit(0)
    if how == "sigkill":
        emit(waiting=True)
        while True:
            signal.pause()  # until killed
    sys.exit(0)


def torch_write(client, args):
    """Write through a torch view of a mapped table (must fault before "wrote" is printed)."""
    t = client.table("rope", {"head_dim": 64}).torch("cos")
    emit(before=float(t[1, 1]))
    t[1, 1] = 42.0
    emit(wrote=True)


TASKS = {f.__name__: f for f in (lookup, read_for, ask, loop, hold, read_only, torch_write)}


def main(argv: list[str]) -> None:
    task, ns, shm = argv[:3]
    args = json.loads(argv[3]) if len(argv) > 3 else {}
    client = Client(shm_dir=shm, namespace=ns)
    client.wait_ready(30)
    TASKS[task](client, args)


if __name__ == "__main__":
    main(sys.argv[1:])
