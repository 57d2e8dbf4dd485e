"""Real processes for the integration tests: engines, ``posenc serve``, child programs, commands.

One API for every child a test starts:

    procs = Procs(tmp_path)                       # one per test (or per module); cleanup() after
    ns = unique_namespace()                       # "ptest-1a2b3c4d"
    eng = procs.engine(config_dict, ns)           # started and ready (all configured tables mapped)
    srv = procs.serve(config_dict, workers=2)     # `posenc serve`, ready on /readyz
    r = procs.child("reader", "lookup", ns, SHM_DIR, json.dumps(args))   # tests/children/reader.py
    r.wait_json(lambda m: m.get("ready"))         # a child's stdout is JSON lines
    eng.stop(signal.SIGTERM); assert_no_leftovers(ns)

Children start in the test's log directory, never in the checkout: what they import is the
installed ``posenc``, and a folder of the checkout (``engine/``, ``service/``) can never shadow it.
A child gets SIGTERM when pytest dies, teardown or not (``die_with_pytest``): none outlives it.
Their environment is the test's minus every ``POSENC_*`` variable except ``POSENC_BACKEND`` (a
developer's settings must not change what a test starts, but CI's numpy pass must run its engines
and readers on numpy too). Output goes to files, never to pipes, so a chatty child cannot block
on a full pipe and a failing test can show its logs.

The engine's files in /dev/shm are read by tests/shm.py.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from signal import SIGKILL, SIGTERM

from posenc.engine.process.proclife import PR_SET_PDEATHSIG
from tests.shm import SHM_DIR, read_manifest, unique_namespace  # noqa: F401  (tests import it from here)
from tests.waits import wait_for  # noqa: F401  (tests import it from here)

REPO = Path(__file__).resolve().parents[1]
CHILDREN = Path(__file__).resolve().parent / "children"
PYTHON = sys.executable
ENGINE_MODULE = "posenc.engine.process.main"
CLI_MODULE = "posenc"
KEPT_ENV = ("POSENC_BACKEND",)  # the one POSENC_* variable children inherit: the suite's backend


_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: the child calls it between fork and exec


def die_with_pytest() -> None:
    """``preexec_fn`` of every child: SIGTERM once pytest's main thread exits, however it does."""
    _LIBC.prctl(PR_SET_PDEATHSIG, int(SIGTERM))


def child_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_") or k in KEPT_ENV}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- /proc ----------------------------------------------------------------------------------------


def bytes_read(pid: int | str = "self") -> int:
    """Bytes process ``pid`` has passed to read(2), pread(2) and the like (/proc/PID/io ``rchar``):
    a count of work that tests compare where timing it would be a benchmark."""
    with open(f"/proc/{pid}/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def children_of(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                out.append(int(d))
    return out


def _holds(pid: int, name: str) -> bool:
    """Whether process ``pid`` has a file named ``name`` open (its /proc fd links)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").endswith("/" + name):
                return True
        except OSError:
            continue
    return False


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


# -- processes ------------------------------------------------------------------------------------


class Proc:
    """A child process with stdout and stderr in files under ``log_dir``, started in ``cwd``
    (the log directory unless told otherwise)."""

    def __init__(
        self,
        argv: list[str],
        log_dir: os.PathLike,
        name: str,
        env: dict | None = None,
        cwd: os.PathLike | None = None,
    ):
        self.argv = [str(a) for a in argv]
        self.name = name
        self.out_path = Path(log_dir) / f"{name}.out"
        self.err_path = Path(log_dir) / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.popen = subprocess.Popen(
                self.argv,
                cwd=cwd or log_dir,
                env=env or child_env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                preexec_fn=die_with_pytest,
            )
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
            raise TimeoutError(
                f"{self.name} (pid {self.pid}) still running after {timeout}s\n{self.logs()}"
            ) from None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)  # by pid only

    def kill9(self, timeout: float = 10.0) -> int:
        self.signal(SIGKILL)
        return self.wait(timeout)

    def stop(self, sig: int = SIGTERM, timeout: float = 30.0) -> int:
        """Send ``sig`` and wait for the exit status; a child still running after ``timeout`` is
        killed and the test fails (a clean stop is part of what is tested)."""
        self.signal(sig)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"{self.name} ignored signal {sig} for {timeout}s\n{self.logs()}") from None

    # -- output ---------------------------------------------------------------------------------
    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def logs(self) -> str:
        return (
            f"--- {self.name} argv: {self.argv[:4]}... rc={self.returncode}\n"
            f"--- stdout:\n{self.stdout()[-4000:]}\n--- stderr:\n{self.stderr()[-4000:]}"
        )

    def json_lines(self) -> list[dict]:
        """stdout parsed as JSON lines (a trailing partial line is ignored)."""
        out = []
        for line in self.stdout().split("\n")[:-1]:
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
                raise AssertionError(
                    f"{self.name} exited before {what or 'the expected output'}\n{self.logs()}"
                )

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
                raise AssertionError(
                    f"engine exited with {self.returncode} before it was ready\n{self.logs()}"
                )

        try:
            return wait_for(ready, timeout, 0.01, f"engine {self.namespace} ready", check)
        except TimeoutError as e:
            raise AssertionError(f"{e}\n{self.logs()}") from None

    def client(self, **kw):
        from posenc.engine.reader.client import Client

        return Client(shm_dir=self.shm_dir, namespace=self.namespace, **kw)


class Server(Proc):
    """``posenc serve`` on a free port of 127.0.0.1 (uvicorn workers and, unless
    ``--attach-only``, its own engine); over HTTPS when given the CA file that signed its
    certificate (``verify``: what httpx takes to trust it)."""

    def __init__(
        self,
        argv,
        log_dir,
        name,
        namespace: str,
        port: int,
        workers: int,
        config_path: str | None,
        env=None,
        ca: str | None = None,
        grpc_port: int = 0,
    ):
        super().__init__(argv, log_dir, name, env)
        self.namespace = namespace
        self.port = port
        self.url = f"{'https' if ca else 'http'}://127.0.0.1:{port}"
        self.verify = ssl.create_default_context(cafile=ca) if ca else True
        self.grpc_port = grpc_port
        self.grpc_url = f"127.0.0.1:{grpc_port}"
        self.workers = workers
        self.config_path = config_path

    def _get(self, path: str) -> int | None:
        import httpx

        try:
            return httpx.get(self.url + path, timeout=1, verify=self.verify).status_code
        except httpx.HTTPError:
            return None

    def _wait_status(self, path: str, timeout: float) -> None:
        def check():
            if not self.alive():
                raise AssertionError(f"posenc serve exited with {self.returncode}\n{self.logs()}")

        try:
            wait_for(lambda: self._get(path) == 200, timeout, 0.1, f"{path} = 200", check)
        except TimeoutError as e:
            raise AssertionError(f"{e}\n{self.logs()}") from None

    def wait_ready(self, timeout: float = 60.0) -> None:
        self._wait_status("/readyz", timeout)

    def wait_alive(self, timeout: float = 30.0) -> None:
        self._wait_status("/healthz", timeout)

    def output(self) -> str:
        return self.logs()

    def worker_pids(self) -> list[int]:
        return [p for p in children_of(self.pid) if "spawn_main" in cmdline(p)]  # uvicorn's workers

    def engine_pid(self) -> int | None:
        """The running engine: serve's engine child, not its standby (engine/process/main.py
        ``--standby-fd``, imported and waiting); once a standby was sent ``go``, it is the engine
        from the moment it holds the namespace's lock file (None until then)."""
        engines = [p for p in children_of(self.pid) if ENGINE_MODULE in cmdline(p)]
        first = [p for p in engines if "--standby-fd" not in cmdline(p)]
        if first:  # the engine serve started first (no standby started it)
            return first[0]
        holding = [p for p in engines if _holds(p, f"{self.namespace}.lock")]
        return holding[0] if holding else None

    def standby_pid(self) -> int | None:
        """serve's standby engine, waiting for a ``go`` (None while there is none)."""
        engines = [p for p in children_of(self.pid) if ENGINE_MODULE in cmdline(p)]
        active = self.engine_pid()
        rest = [p for p in engines if p != active and "--standby-fd" in cmdline(p)]
        return rest[0] if rest else None


def count_tables(config: dict | str | None) -> int:
    """How many tables a config asks for (None: the embedded default), through the engine's own
    config parser: used only to know when an engine is ready."""
    from posenc.engine.process.configured import load_config, parse_config

    return len(parse_config(config) if isinstance(config, dict) else load_config(config))


class Procs:
    """Starts processes for one test (or one module) and, at cleanup, stops whatever is still
    running (by pid: SIGTERM first so an engine or a server removes its files, then SIGKILL)."""

    def __init__(self, log_dir: os.PathLike):
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.procs: list[Proc] = []
        self._n = 0

    def _name(self, base: str) -> str:
        self._n += 1
        return f"{self._n:02d}-{base}"

    def _config(self, name: str, config: dict | str | None) -> str | None:
        if config is None or isinstance(config, str):
            return config
        path = self.log_dir / f"{name}.tables.json"
        path.write_text(json.dumps(config))
        return str(path)

    def engine(
        self,
        config: dict | str | None,
        namespace: str,
        shm_dir: str = SHM_DIR,
        args: Iterable[str] = (),
        ready: bool = True,
        via_cli: bool = False,
        timeout: float = 30.0,
        env: dict | None = None,
    ) -> EngineProc:
        """Start ``python -m posenc.engine.process.main`` (or ``python -m posenc engine``) with a
        table config (a dict is written to a file; None means the embedded default)."""
        name = self._name("engine")
        argv = [PYTHON, "-m", *([CLI_MODULE, "engine"] if via_cli else [ENGINE_MODULE])]
        path = self._config(name, config)
        if path is not None:
            argv += ["--tables", path]
        argv += ["--namespace", namespace, "--shm-dir", shm_dir, *args]
        p = EngineProc(
            argv, self.log_dir, name, namespace, shm_dir, count_tables(config) if ready else None, env=env
        )
        self.procs.append(p)
        if ready:
            p.wait_ready(timeout)
        return p

    def serve(
        self,
        config: dict | str | None,
        workers: int = 2,
        args: Iterable[str] = (),
        ready: bool = True,
        namespace: str | None = None,
        env: dict | None = None,
        ca: str | None = None,
        grpc: bool = False,
        port: int | None = None,
    ) -> Server:
        """Start ``python -m posenc serve`` on a free port (or ``port``) under a fresh namespace
        (``ca``: it serves HTTPS, with a certificate this CA file signed, given in ``args``); its
        gRPC server too (on another free port) only when ``grpc``: the default port is shared."""
        name = self._name("serve")
        namespace = namespace or unique_namespace()
        port = port or free_port()
        grpc_port = 0
        while grpc and grpc_port in (0, port):  # two free ports in a row can be the same one
            grpc_port = free_port()
        path = self._config(name, config)
        argv = [
            PYTHON,
            "-m",
            CLI_MODULE,
            "serve",
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--namespace",
            namespace,
            "--log-level",
            "warning",
            "--grpc-port",
            str(grpc_port),
            *args,
        ]
        if path is not None:
            argv += ["--tables", path]
        s = Server(
            argv, self.log_dir, name, namespace, port, workers, path, env=env, ca=ca, grpc_port=grpc_port
        )
        self.procs.append(s)
        if ready:
            s.wait_ready()
        return s

    def child(self, program: str, *args, name: str | None = None, env: dict | None = None) -> Proc:
        """An unrelated Python process running ``tests/children/{program}.py ARGS...`` by path
        (a fresh interpreter, not a fork)."""
        p = Proc(
            [PYTHON, CHILDREN / f"{program}.py", *args], self.log_dir, self._name(name or program), env=env
        )
        self.procs.append(p)
        return p

    def run(
        self, argv: list[str], timeout: float = 120.0, env: dict | None = None, cwd: os.PathLike | None = None
    ) -> subprocess.CompletedProcess:
        """Run a command to completion (text output captured), in the log directory."""
        return subprocess.run(
            [str(a) for a in argv],
            cwd=cwd or self.log_dir,
            env=env or child_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=die_with_pytest,
        )

    def posenc(self, *args, timeout: float = 120.0) -> subprocess.CompletedProcess:
        """``python -m posenc ARGS...`` as a user runs it."""
        return self.run([PYTHON, "-m", CLI_MODULE, *args], timeout=timeout)

    def cleanup(self, timeout: float = 10.0) -> list[str]:
        """Stop every child still alive; returns the names of those that were."""
        stray = [p for p in self.procs if p.alive()]
        for p in stray:
            p.signal(signal.SIGTERM if isinstance(p, (EngineProc, Server)) else signal.SIGKILL)
        for p in stray:
            try:
                p.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                p.signal(signal.SIGKILL)
                p.popen.wait(timeout)
        return [p.name for p in stray]


def serve_for_module(tmp: Path, request, config: dict, workers: int = 2) -> Server:
    """``posenc serve`` of ``config`` for a test module's fixture: stopped when the module ends
    with SIGTERM, which must exit cleanly and leave no shared memory behind."""
    from tests.shm import shm_files

    procs = Procs(tmp)
    s = procs.serve(config, workers=workers)

    def stop():
        assert s.stop() == 0, s.output()
        procs.cleanup()
        assert shm_files(s.namespace) == []

    request.addfinalizer(stop)
    return s
