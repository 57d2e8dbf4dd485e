"""Process helpers for integration tests: real engines and real, unrelated reader processes.

Every child runs from the repository root with ``PYTHONPATH`` pointing at it and no inherited
``POSENC_*`` variables (a developer's environment must not change what a test starts). Output goes
to files under the test's log directory, never to pipes, so a chatty child can never block on a
full pipe and a failing test can show both logs.

    procs = ProcRegistry(tmp_path)               # one per test; procs.cleanup() in teardown
    ns = unique_namespace()                      # "ptest-1a2b3c4d"
    eng = procs.engine(config_dict, ns)          # started and ready (all configured tables mapped)
    r = procs.python(READER_CODE, ns, "/dev/shm", json.dumps(args))   # `python -c` reader
    r.wait_json(lambda m: m.get("ready"))         # its stdout is JSON lines
    eng.stop(signal.SIGTERM); assert_no_leftovers(ns)

The engine is found on disk only through its documented file names (``{ns}.manifest.json``,
``{ns}.seg.*``, ``{ns}.sock``, ``{ns}.lock``): these helpers read the manifest as plain JSON and
list files by prefix, independently of ``engine.store``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Iterable

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
SHM_DIR = "/dev/shm"
ENGINE_MODULE = "posenc.engine.engine_main"
CLI_MODULE = "posenc"


def unique_namespace(prefix: str = "ptest") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def child_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def shm_files(namespace: str, shm_dir: str = SHM_DIR) -> list[str]:
    """Names of every file of this namespace in shm_dir (anything starting with ``{ns}.``)."""
    try:
        names = os.listdir(shm_dir)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith(f"{namespace}."))


def snapshot(namespace: str, shm_dir: str = SHM_DIR) -> dict[str, tuple]:
    """name -> (inode, size, mtime_ns, mode) of the namespace's files: equal snapshots mean
    nothing was created, removed, replaced or rewritten."""
    out = {}
    for n in shm_files(namespace, shm_dir):
        try:
            st = os.stat(os.path.join(shm_dir, n))
        except FileNotFoundError:
            continue
        out[n] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode)
    return out


def assert_no_leftovers(namespace: str, shm_dir: str = SHM_DIR) -> None:
    left = shm_files(namespace, shm_dir)
    assert not left, f"left in {shm_dir} for namespace {namespace}: {left}"


def remove_leftovers(namespace: str, shm_dir: str = SHM_DIR) -> list[str]:
    """Delete whatever the namespace left (teardown after a failure); returns what was there."""
    left = shm_files(namespace, shm_dir)
    for n in left:
        try:
            os.unlink(os.path.join(shm_dir, n))
        except FileNotFoundError:
            pass
    return left


def read_manifest(namespace: str, shm_dir: str = SHM_DIR) -> dict | None:
    try:
        with open(os.path.join(shm_dir, f"{namespace}.manifest.json"), "rb") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        return None


def wait_for(predicate: Callable[[], object], timeout: float = 30.0, interval: float = 0.01,
             what: str = "condition", check: Callable[[], None] | None = None):
    """Poll until predicate() is truthy and return it; ``check`` may raise to stop early (e.g.
    the process we wait on died)."""
    deadline = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if check is not None:
            check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def write_config(path: os.PathLike, cfg: dict) -> str:
    Path(path).write_text(json.dumps(cfg))
    return str(path)


class Proc:
    """A child process with stdout and stderr in files."""

    def __init__(self, argv: list[str], log_dir: Path, name: str, env: dict | None = None,
                 cwd: os.PathLike = REPO):
        self.argv = argv
        self.name = name
        self.out_path = Path(log_dir) / f"{name}.out"
        self.err_path = Path(log_dir) / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.popen = subprocess.Popen(argv, cwd=cwd, env=env or child_env(), stdin=subprocess.DEVNULL,
                                          stdout=out, stderr=err, start_new_session=True)
        self.pid = self.popen.pid

    # -- state ----------------------------------------------------------------------------------
    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{self.name} (pid {self.pid}) still running after {timeout}s\n{self.logs()}") from None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)  # by pid only

    def kill9(self, timeout: float = 10.0) -> int:
        self.signal(signal.SIGKILL)
        return self.wait(timeout)

    # -- output ---------------------------------------------------------------------------------
    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def logs(self) -> str:
        return (f"--- {self.name} argv: {self.argv[:3]}... rc={self.returncode}\n"
                f"--- stdout:\n{self.stdout()[-4000:]}\n--- stderr:\n{self.stderr()[-4000:]}")

    def json_lines(self) -> list[dict]:
        """stdout parsed as JSON lines (a trailing partial line is ignored)."""
        out = []
        text = self.stdout()
        for line in text.split("\n")[:-1]:
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def wait_json(self, pred: Callable[[dict], bool], timeout: float = 30.0, what: str = "") -> dict:
        """The first JSON line on stdout for which pred is true; fails early if the process
        exits without printing one."""
        def find():
            for m in self.json_lines():
                if pred(m):
                    return m
            return None

        def check():
            if not self.alive() and find() is None:
                raise AssertionError(f"{self.name} exited before {what or 'the expected output'}\n{self.logs()}")

        try:
            return wait_for(find, timeout, 0.01, what or f"output of {self.name}", check)
        except TimeoutError as e:
            raise AssertionError(f"{e}\n{self.logs()}") from None

    def wait_stderr(self, text: str, timeout: float = 30.0) -> str:
        """stderr once it contains ``text``; fails early if the process exits without it."""
        def check():
            if not self.alive() and text not in self.stderr():
                raise AssertionError(f"{self.name} exited before printing {text!r}\n{self.logs()}")

        try:
            return wait_for(lambda: text in self.stderr() and self.stderr(), timeout, 0.01, repr(text), check)
        except TimeoutError as e:
            raise AssertionError(f"{e}\n{self.logs()}") from None

    def expect_exit(self, rc: int | Iterable[int] = 0, timeout: float = 30.0) -> int:
        got = self.wait(timeout)
        ok = got in rc if isinstance(rc, Iterable) else got == rc
        assert ok, f"{self.name} exited {got}, expected {rc}\n{self.logs()}"
        return got


class EngineProc(Proc):
    def __init__(self, argv, log_dir, name, namespace: str, shm_dir: str, n_tables: int | None, env=None):
        super().__init__(argv, log_dir, name, env)
        self.namespace = namespace
        self.shm_dir = shm_dir
        self.n_tables = n_tables

    def manifest(self) -> dict | None:
        try:
            return read_manifest(self.namespace, self.shm_dir)
        except ValueError:  # cannot happen with an atomic manifest; let the caller's wait retry
            return None

    def wait_ready(self, timeout: float = 30.0) -> dict:
        """The engine's manifest once it is this process's and holds every configured table."""
        def ready():
            m = self.manifest()
            if not m or m.get("pid") != self.pid:
                return None
            pinned = sum(1 for e in m["tables"].values() if e.get("pinned"))
            if self.n_tables is not None and pinned < self.n_tables:
                return None
            return m

        def check():
            if not self.alive():
                raise AssertionError(f"engine exited with {self.returncode} before it was ready\n{self.logs()}")

        try:
            return wait_for(ready, timeout, 0.01, f"engine {self.namespace} ready", check)
        except TimeoutError as e:
            raise AssertionError(f"{e}\n{self.logs()}") from None

    def client(self, **kw):
        from posenc.engine.client import Client
        return Client(shm_dir=self.shm_dir, namespace=self.namespace, **kw)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        self.signal(sig)
        return self.wait(timeout)


def count_tables(config: dict | str | None) -> int:
    """How many tables a config asks for (None: the embedded default), through the engine's own
    config parser: used only to know when an engine is ready."""
    from posenc.engine.config import load_config, parse_config
    return len(parse_config(config) if isinstance(config, dict) else load_config(config))


class ProcRegistry:
    """Starts processes for one test and, at cleanup, stops whatever is still running (by pid:
    SIGTERM first so an engine removes its files, then SIGKILL)."""

    def __init__(self, log_dir: os.PathLike):
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.procs: list[Proc] = []
        self._n = 0

    def _name(self, base: str) -> str:
        self._n += 1
        return f"{self._n:02d}-{base}"

    def engine(self, config: dict | str | None, namespace: str, shm_dir: str = SHM_DIR, args: Iterable[str] = (),
               ready: bool = True, via_cli: bool = False, timeout: float = 30.0, env: dict | None = None) -> EngineProc:
        """Start ``python -m posenc.engine.engine_main`` (or ``python -m posenc.engine.engine_main engine``) with a table
        config (a dict is written to a file; None means the embedded default)."""
        name = self._name("engine")
        argv = [PYTHON, "-m", *([CLI_MODULE, "engine"] if via_cli else [ENGINE_MODULE])]
        n_tables = None
        if config is not None:
            path = config if isinstance(config, str) else write_config(self.log_dir / f"{name}.tables.json", config)
            argv += ["--tables", path]
            if ready:
                n_tables = count_tables(config)
        elif ready:
            n_tables = count_tables(None)
        argv += ["--namespace", namespace, "--shm-dir", shm_dir, *args]
        p = EngineProc(argv, self.log_dir, name, namespace, shm_dir, n_tables, env=env)
        self.procs.append(p)
        if ready:
            p.wait_ready(timeout)
        return p

    def python(self, code: str, *args: str, name: str = "reader", env: dict | None = None) -> Proc:
        """An unrelated Python process: ``python -c CODE ARGS...`` (a fresh interpreter, not a fork)."""
        p = Proc([PYTHON, "-c", code, *map(str, args)], self.log_dir, self._name(name), env=env)
        self.procs.append(p)
        return p

    def run(self, argv: list[str], name: str = "cmd", timeout: float = 60.0) -> subprocess.CompletedProcess:
        return subprocess.run(argv, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=timeout)

    def cleanup(self, timeout: float = 10.0) -> list[str]:
        """Stop every child still alive; returns the names of those that were."""
        stray = [p for p in self.procs if p.alive()]
        for p in stray:
            p.signal(signal.SIGTERM if isinstance(p, EngineProc) else signal.SIGKILL)
        for p in stray:
            try:
                p.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                p.signal(signal.SIGKILL)
                p.popen.wait(timeout)
        return [p.name for p in stray]
