"""The C reader (engine/reader/posenc_shm.c, docs/shm-format.md) against a real engine process:
built with the system compiler (``-std=c11 -Wall -Wextra -Werror``, and again under
``-fsanitize=address,undefined``), driven by tests/engine/c/reader_driver.c, its gathered bytes
held to ``posenc.engine.answer.pipeline`` (the service's answers) for every family whose stored arrays are
answer columns, and past the table's end a distinct status. The C++ example compiles with
``-Wall -Wextra -Werror`` and runs."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import threading
import types
from pathlib import Path

import numpy as np
import pytest

from posenc.engine import kernels
from posenc.engine.answer.pipeline import compute
from tests.procs import Procs, unique_namespace
from tests.shm import SHM_DIR, remove_leftovers

ROOT = Path(__file__).resolve().parents[2]
READER = ROOT / "engine" / "reader"
DRIVER = Path(__file__).resolve().parent / "c" / "reader_driver.c"
CC = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
CXX = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g", f"-I{READER}"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]

pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler (cc, gcc or clang)")

LENGTH = 4096
YARN = {
    "head_dim": 32,
    "max_position_embeddings": 4096,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024},
}
NTK = {
    "head_dim": 16,
    "max_position_embeddings": 2048,
    "rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
}
CONFIG = {
    "length": LENGTH,
    "tables": [
        {
            "name": "rope64",
            "family": "rope",
            "spec": {"head_dim": 64},
            "dtypes": ["float32", "bfloat16", "float16"],
        },
        {"name": "yarn", "family": "rope", "spec": YARN},
        {"name": "ntk", "family": "rope", "spec": NTK},
        {"name": "sin33", "family": "sinusoidal", "spec": {"d_model": 33}, "dtypes": ["float32", "float16"]},
        {"name": "fairseq31", "family": "sinusoidal", "spec": {"d_model": 31, "layout": "fairseq"}},
        {"name": "alibi8", "family": "alibi", "spec": {"num_heads": 8}, "dtypes": ["float32", "bfloat16"]},
        {"name": "t5bi", "family": "t5-buckets", "spec": {"bidirectional": True}},
        {"name": "t5uni", "family": "t5-buckets", "spec": {"bidirectional": False, "max_distance": 64}},
    ],
}
FLOATS = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}


@pytest.fixture(scope="module")
def binaries(tmp_path_factory) -> dict[str, Path]:
    """The driver built plainly and under ASan + UBSan."""
    out = tmp_path_factory.mktemp("c-reader")
    built = {}
    for kind, extra in (("plain", []), ("sanitized", SANITIZE)):
        exe = out / f"driver-{kind}"
        subprocess.run(
            [CC, *CFLAGS, *extra, str(READER / "posenc_shm.c"), str(DRIVER), "-o", str(exe), "-lm"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        built[kind] = exe
    return built


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    ns = unique_namespace("creader")
    reg = Procs(tmp_path_factory.mktemp("procs"))
    try:
        yield reg.engine(CONFIG, ns)
    finally:
        reg.cleanup()
        left = remove_leftovers(ns)
        assert not left, f"{ns} left {left} in {SHM_DIR}"


class Reader:
    """Both builds of the driver; every command's answer must be the same from each."""

    def __init__(self, binaries, engine):
        self.binaries, self.engine = binaries, engine

    def run(self, *commands: str) -> list[str]:
        env = {
            **os.environ,
            "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
        }
        answers = []
        for exe in self.binaries.values():
            p = subprocess.run(
                [str(exe), self.engine.shm_dir, self.engine.namespace],
                input="\n".join(commands) + "\n",
                capture_output=True,
                text=True,
                timeout=30,
                env=env,
            )
            assert p.returncode == 0 and not p.stderr, f"{exe.name} exited {p.returncode}\n{p.stderr}"
            answers.append(p.stdout.splitlines())
        assert answers[0] == answers[1], "the sanitized build answers differently"
        assert len(answers[0]) == len(commands)
        return answers[0]

    def digest(self, name: str, dtype: str | None = None) -> str:
        (line,) = self.run(f"named {name} {dtype or '-'}")
        assert line.startswith("OK "), line
        return line[3:]

    def gather(self, how: str, digest: str, array: str, positions) -> bytes:
        (line,) = self.run(f"{how} {digest} {array} {','.join(map(str, positions))}")
        assert line.startswith("OK "), line
        return bytes.fromhex(line[3:])


@pytest.fixture(scope="module")
def reader(binaries, engine) -> Reader:
    return Reader(binaries, engine)


def _positions(rng, n=64) -> list[int]:
    return [0, LENGTH - 1, *rng.integers(0, LENGTH, n).tolist(), 5, 5]


def _entry(engine, digest: str) -> dict:
    return engine.manifest()["tables"][digest]


def test_names_open_the_configured_tables_of_each_dtype(reader, engine):
    m = engine.manifest()
    for item in CONFIG["tables"]:
        for dtype in item.get("dtypes", ["float32"]) if item["family"] != "t5-buckets" else [None]:
            d = reader.digest(item["name"], dtype)
            e = m["tables"][d]
            assert (e["name"], e["family"], e["dtype"]) == (item["name"], item["family"], dtype)
            assert hashlib.sha1(e["key"].encode()).hexdigest()[:20] == d  # as docs/shm-format.md says
    assert reader.run("named nosuch -", "named rope64 float64", "gen") == [
        "ERR -3 no such table or array stored",
        "ERR -3 no such table or array stored",
        f"OK {m['generation']}",
    ]


@pytest.mark.parametrize(
    "name,spec,dtype", [*(("rope64", {"head_dim": 64}, dt) for dt in FLOATS), ("yarn", YARN, "float32")]
)  # (attention_scaling 1.139)
def test_rope_rows_are_the_answers_columns(reader, rng, name, spec, dtype):
    d = reader.digest(name, dtype)
    pos = _positions(rng)
    half = spec["head_dim"] // 2
    got = {
        k: np.frombuffer(reader.gather("rows", d, k, pos), FLOATS[dtype]).reshape(len(pos), half)
        for k in ("cos", "sin")
    }
    for layout in ("half_split", "interleaved"):
        want = compute("rope", {**spec, "positions": pos, "dtype": dtype, "layout": layout})
        for k in ("cos", "sin"):
            cols = (
                (want[k][:, :half], want[k][:, half:])
                if layout == "half_split"
                else (want[k][:, 0::2], want[k][:, 1::2])
            )
            for c in cols:
                assert np.ascontiguousarray(c).tobytes() == got[k].tobytes(), (name, dtype, layout, k)
    inv = reader.gather("rows", d, "inv_freq", range(half))
    assert inv == want["inv_freq"].tobytes()
    (scaling,) = reader.run(f"meta {d} attention_scaling")
    assert float(scaling[3:]) == want["attention_scaling"]


@pytest.mark.parametrize(
    "name,spec,dtype", [*(("rope64", {"head_dim": 64}, dt) for dt in FLOATS), ("yarn", YARN, "float32")]
)
@pytest.mark.skipif(
    kernels.BACKEND != "simd",
    reason="rows past a table are libm's, as the simd kernels compute "
    "them; the numpy backend's own sin/cos may differ from libm by an ulp before rounding",
)
def test_rope_rows_on_both_sides_of_the_end(reader, rng, name, spec, dtype):
    """posenc_rope_rows: stored rows copied, rows past the end computed with the engine's own
    rounding and sincos row (engine/kernels/round_f64.h): the service's bits at every position."""
    d = reader.digest(name, dtype)
    pos = [
        *_positions(rng, 16),
        LENGTH,
        LENGTH + 1,
        *rng.integers(LENGTH, 1 << 31, 32).tolist(),
        2**31 - 1,
        7,
    ]
    half = spec["head_dim"] // 2
    (line,) = reader.run(f"rope {d} {','.join(map(str, pos))}")
    assert line.startswith("OK "), line
    raw = bytes.fromhex(line[3:])
    got = np.frombuffer(raw, FLOATS[dtype]).reshape(2, len(pos), half)
    want = compute("rope", {**spec, "positions": pos, "dtype": dtype})  # half_split: [c | c]
    for i, k in enumerate(("cos", "sin")):
        assert np.ascontiguousarray(want[k][:, :half]).tobytes() == got[i].tobytes(), (name, dtype, k)


def test_rope_rows_past_a_table_that_follows_the_length_are_a_status(reader):
    """Dynamic NTK: past its table the frequencies depend on the request's length, which the
    reader does not know (the table's meta rows_past is 0): PAST, as before."""
    d = reader.digest("ntk", "float32")
    assert reader.run(
        f"rope {d} 1,{LENGTH + 5}", f"rope {d} -1", f"rope {reader.digest('sin33', 'float32')} 1"
    ) == ["PAST 1", "ERR -5 bad argument", "ERR -5 bad argument"]
    m = NTK["max_position_embeddings"]  # rows a request below the model's context reads: the answer's
    (line,) = reader.run(f"rope {d} 0,5,{m - 1}")
    got = np.frombuffer(bytes.fromhex(line[3:]), np.float32).reshape(2, 3, 8)
    want = compute("rope", {**NTK, "positions": [0, 5, m - 1]})
    assert want["cos"][:, :8].tobytes() == np.ascontiguousarray(got[0]).tobytes()


@pytest.mark.skipif(
    kernels.BACKEND != "simd",
    reason="rows past a table are libm's, as the simd kernels compute "
    "them; the numpy backend's own sin/cos may differ from libm by an ulp before rounding",
)
@pytest.mark.parametrize(
    "name,spec,dtype",
    [
        ("sin33", {"d_model": 33, "layout": "concat"}, "float32"),
        ("sin33", {"d_model": 33, "layout": "concat"}, "float16"),
        ("fairseq31", {"d_model": 31, "layout": "fairseq"}, "float32"),
    ],
)
def test_sinusoidal_rows_on_both_sides_of_the_end(reader, rng, name, spec, dtype):
    """posenc_sinusoidal_rows: the stored [sin | cos] rows, past the end computed from the table's
    freqs64 with the engine's own code: the concat answer (fairseq's less its zero column)."""
    d = reader.digest(name, dtype)
    rows = [*_positions(rng, 16), LENGTH, *rng.integers(LENGTH, 1 << 31, 24).tolist(), 2**31 - 1, 3]
    (line,) = reader.run(f"sin {d} {','.join(map(str, rows))}")
    assert line.startswith("OK "), line
    want = compute("sinusoidal", {**spec, "positions": rows, "dtype": dtype})["encoding"]
    width = want.shape[1] - (spec["layout"] == "fairseq" and spec["d_model"] % 2)
    assert np.ascontiguousarray(want[:, :width]).tobytes() == bytes.fromhex(line[3:]), (name, dtype)
    assert reader.run(f"sin {d} {2**53}", f"sin {d} -1") == ["ERR -5 bad argument"] * 2


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_alibi_cells_on_both_sides_of_the_end(reader, rng, dtype):
    """posenc_alibi_dist: every head's cells at distances inside the stored table and past it
    (computed with the engine's own cell and rounding): a decode row's bias, far past the table."""
    q = 5 * LENGTH
    keys = sorted(set(rng.integers(0, q + 1, 64).tolist()) | {0, q, q - LENGTH, q - LENGTH + 1})
    (line,) = reader.run(f"alibi {reader.digest('alibi8', dtype)} {','.join(str(q - k) for k in keys)}")
    assert line.startswith("OK "), line
    bias = compute("alibi", {"num_heads": 8, "query": [q], "key": keys, "dtype": dtype})["bias"]
    assert np.ascontiguousarray(bias[:, 0, :]).tobytes() == bytes.fromhex(line[3:])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_sinusoidal_rows_are_the_concat_and_interleaved_answers(reader, rng, dtype):
    d = reader.digest("sin33", dtype)
    pos = _positions(rng)
    stored = np.frombuffer(reader.gather("rows", d, "table", pos), FLOATS[dtype]).reshape(len(pos), 33)
    concat = compute("sinusoidal", {"d_model": 33, "layout": "concat", "positions": pos, "dtype": dtype})
    assert concat["encoding"].tobytes() == stored.tobytes()
    inter = compute("sinusoidal", {"d_model": 33, "positions": pos, "dtype": dtype})["encoding"]
    assert np.ascontiguousarray(inter[:, 0::2]).tobytes() == np.ascontiguousarray(stored[:, :17]).tobytes()
    assert np.ascontiguousarray(inter[:, 1::2]).tobytes() == np.ascontiguousarray(stored[:, 17:]).tobytes()


def test_fairseq_rows_are_the_answer_less_its_zero_column(reader, rng):
    pos = _positions(rng)
    stored = reader.gather("rows", reader.digest("fairseq31", "float32"), "table", pos)
    want = compute("sinusoidal", {"d_model": 31, "layout": "fairseq", "positions": pos})["encoding"]
    assert np.ascontiguousarray(want[:, :30]).tobytes() == stored
    assert not want[:, 30].any()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_alibi_distances_are_the_bias_of_a_decode_row(reader, rng, dtype):
    q = LENGTH - 1
    keys = sorted(set(rng.integers(0, q + 1, 64).tolist()) | {0, q})
    dist = reader.gather("cols", reader.digest("alibi8", dtype), "dist", [q - k for k in keys])
    bias = compute("alibi", {"num_heads": 8, "query": [q], "key": keys, "dtype": dtype})["bias"]
    assert np.ascontiguousarray(bias[:, 0, :]).tobytes() == dist


@pytest.mark.parametrize(
    "name,spec", [("t5bi", {"bidirectional": True}), ("t5uni", {"bidirectional": False, "max_distance": 64})]
)
def test_t5_lut_rows_are_the_buckets_with_rel_clamped(reader, engine, rng, name, spec):
    d = reader.digest(name)
    radius = _entry(engine, d)["length"]
    q = 1000
    keys = sorted(set(rng.integers(0, 2001, 80).tolist()) | {q, q - radius, q + radius, 0, 2000})
    idx = [int(np.clip(k - q, -radius, radius)) + radius for k in keys]
    got = reader.gather("rows", d, "lut", idx)
    assert compute("t5-buckets", {**spec, "query": [q], "key": keys})["buckets"][0].tobytes() == got


def test_past_the_end_is_a_status_and_nothing_else_is_read(reader):
    rope, alibi = reader.digest("rope64", "float32"), reader.digest("alibi8", "float32")
    assert reader.run(
        f"rows {rope} cos 5,{LENGTH},7",
        f"rows {rope} sin {LENGTH - 1},{2**40}",
        f"cols {alibi} dist 0,{LENGTH}",
        f"rows {rope} cos -1",
        f"rows {rope} nosuch 1",
        "rows 0000000000000000dead cos 1",
        'rows "],"x":[" cos 1',
    ) == [
        "PAST 1",
        "PAST 1",
        "PAST 1",
        "ERR -5 bad argument",
        "ERR -3 no such table or array stored",
        "ERR -3 no such table or array stored",
        "ERR -5 bad argument",
    ]


@pytest.mark.skipif(CXX is None, reason="no C++ compiler")
def test_cpp_example_compiles_and_reads_a_table(engine, tmp_path):
    obj, exe = tmp_path / "posenc_shm.o", tmp_path / "example"
    subprocess.run([CC, *CFLAGS, "-c", str(READER / "posenc_shm.c"), "-o", str(obj)], check=True, timeout=60)
    subprocess.run(
        [
            CXX,
            "-std=c++17",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{READER}",
            str(READER / "example.cpp"),
            str(obj),
            "-o",
            str(exe),
            "-lm",
        ],
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    )
    env = {**os.environ, "POSENC_SHM_DIR": engine.shm_dir, "POSENC_NAMESPACE": engine.namespace}
    p = subprocess.run(
        [str(exe), "rope64", "1", str(LENGTH + 10)], capture_output=True, text=True, env=env, timeout=30
    )
    assert p.returncode == 0, p.stderr
    want = compute("rope", {"head_dim": 64, "positions": [1]})["cos"][0, :4]
    assert f"cos[1][0..3] = {' '.join(f'{x:g}' for x in want)} (d=64)" in p.stdout, p.stdout
    assert "past the table" in p.stdout


class Session:
    """One driver process kept running across engine changes (the sanitized build)."""

    def __init__(self, exe: Path, engine):
        self.p = subprocess.Popen(
            [str(exe), engine.shm_dir, engine.namespace],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"},
        )

    def __call__(self, command: str) -> str:
        self.p.stdin.write(command + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        assert line, f"the driver died: {self.p.wait()} {self.p.stderr.read()}"
        return line.rstrip("\n")

    def close(self) -> None:
        _, err = self.p.communicate(timeout=30)
        assert self.p.returncode == 0 and not err, err


def _ensure(engine, key: str, reach: int) -> dict:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(os.path.join(engine.shm_dir, f"{engine.namespace}.sock"))
        s.sendall(json.dumps({"op": "ensure", "table": key, "reach": reach}).encode() + b"\n")
        reply = s.makefile("rb").readline()
    out = json.loads(reply)
    assert out["ok"], out
    return out


def test_a_held_table_reads_through_restart_and_growth_and_the_reader_sees_the_changes(binaries, tmp_path):
    ns, reg = unique_namespace("creader"), Procs(tmp_path / "procs")
    config = {"length": LENGTH, "tables": [CONFIG["tables"][0] | {"dtypes": ["float32"]}]}
    try:
        eng = reg.engine(config, ns)
        s = Session(binaries["sanitized"], eng)
        (digest,) = eng.manifest()["tables"]
        rows = f"0,1,{LENGTH - 1}"
        assert s(f"hold {digest}") == "OK"
        before = s(f"held cos {rows}")
        assert before.startswith("OK ") and s("changed") == "OK 0"
        gen = int(s("gen")[3:])
        assert eng.stop() == 0  # the engine goes away: the mapping stays
        assert s(f"held cos {rows}") == before
        eng = reg.engine(config, ns)  # a new engine, a new generation
        assert s("changed") == "OK 1"
        assert int(s("refresh")[3:]) > gen  # (a new connection: the old one died)
        assert s(f"hold {digest}") == "OK" and s(f"held cos {rows}") == before

        key = eng.manifest()["tables"][digest]["key"].replace('"rope_theta":10000.0', '"rope_theta":31.0')
        whole, seq = s("whole"), int(s("seq")[3:])
        grown = _ensure(eng, key, 100)["digest"]  # on demand: 4096 rows, then rebuilt longer
        assert s("changed") == "OK 1"
        s("refresh")  # the change alone: no whole manifest
        assert int(s("seq")[3:]) > seq and s("whole") == whole
        assert s(f"hold {grown}") == "OK" and s(f"held cos {LENGTH}") == "PAST 0"
        assert _ensure(eng, key, LENGTH + 1)["length"] == 2 * LENGTH
        assert s(f"held cos {LENGTH}") == "PAST 0"  # what it holds is unchanged
        assert s("changed") == "OK 1" and s("refresh").startswith("OK ")
        assert s(f"hold {grown}") == "OK"
        got = s(f"held cos 5,{LENGTH},{2 * LENGTH - 1}")
        want = compute("rope", {"head_dim": 64, "rope_theta": 31.0, "positions": [5, LENGTH, 2 * LENGTH - 1]})
        assert bytes.fromhex(got[3:]) == np.ascontiguousarray(want["cos"][:, :32]).tobytes()
        s.close()
        assert eng.stop() == 0
    finally:
        reg.cleanup()
        left = remove_leftovers(ns)
        assert not left, f"{ns} left {left} in {SHM_DIR}"


def _memfd(nbytes: int, seals: int | None, size: int | None = None) -> int:
    fd = os.memfd_create("fake", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size if size is not None else nbytes)
    os.pwrite(fd, np.arange(nbytes // 4, dtype=np.float32).tobytes(), 0)
    if seals is not None:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def test_segments_that_are_not_sealed_as_documented_are_refused(binaries, tmp_path):
    """A fake engine (the protocol of docs/shm-format.md, spoken by hand) hands out descriptors:
    unsealed, missing a seal, of another size, arrays outside the segment; and a format-2 manifest."""
    all_seals = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
    arrays = {"cos": {"offset": 0, "shape": [16, 4], "dtype": "float32"}}
    cases = {  # digest -> (entry changes, descriptor)
        "a0": ({}, lambda: _memfd(256, all_seals)),  # as documented
        "b1": ({}, lambda: _memfd(256, None)),  # unsealed
        "b2": ({}, lambda: _memfd(256, all_seals & ~fcntl.F_SEAL_WRITE)),  # writable
        "b3": ({}, lambda: _memfd(256, all_seals, size=512)),  # another size
        "b4": (
            {"arrays": {"cos": {"offset": 64, "shape": [16, 4], "dtype": "float32"}}},  # past nbytes
            lambda: _memfd(256, all_seals),
        ),
    }
    entry = {"family": "rope", "dtype": "float32", "length": 16, "nbytes": 256, "meta": {}, "arrays": arrays}
    tables = {d: entry | changes for d, (changes, _) in cases.items()}
    fmt = {"value": 2}
    path = tmp_path / "fake.sock"
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    srv.listen()

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn, conn.makefile("rb") as lines:
                for line in lines:
                    msg, fds = json.loads(line), []
                    if msg["op"] == "manifest":
                        reply = {
                            "ok": True,
                            "manifest": {"format": fmt["value"], "generation": 7, "seq": 0, "tables": tables},
                        }
                    else:
                        fds = [cases[d][1]() for d in msg["digests"]]
                        reply = {
                            "ok": True,
                            "generation": 7,
                            "tables": {d: tables[d] for d in msg["digests"]},
                        }
                    socket.send_fds(conn, [json.dumps(reply).encode() + b"\n"], fds)
                    for fd in fds:
                        os.close(fd)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        r = Reader(binaries, types.SimpleNamespace(shm_dir=str(tmp_path), namespace="fake"))
        assert r.run(*(f"rows {d} cos 0,15" for d in cases)) == [
            "OK " + np.array([0, 1, 2, 3, 60, 61, 62, 63], np.float32).tobytes().hex(),
            *["ERR -4 descriptor is not a sealed segment of the recorded size"] * 3,
            "ERR -2 unexpected reply from the engine",
        ]
        fmt["value"] = 1  # (the format before the table log)
        p = subprocess.run(
            [str(binaries["plain"]), str(tmp_path), "fake"],
            input="",
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert p.returncode == 1 and "format is not 2" in p.stderr
    finally:
        srv.shutdown(socket.SHUT_RDWR)  # wakes the accept
        srv.close()
        server.join(10)
