"""Start, wait for and stop the servers a load run measures: ``posenc serve`` and the raw ASGI
floor, each optionally pinned to cores with taskset. Only processes started here are signalled,
by their own PID."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from posenc.service.supervise.children import terminate

# a floor's kind (its name in the results) -> the module that serves it
FLOOR_MODULES = {"floor": "posenc.loadtest.floors.asgi_app", "bare": "posenc.loadtest.floors.http_protocol"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pinned(cmd: list[str], cpus: str | None) -> list[str]:
    """``cmd`` under ``taskset -c cpus`` (taskset execs it: the PID is the command's)."""
    if cpus and shutil.which("taskset"):
        return ["taskset", "-c", cpus, *cmd]
    return cmd


def http_get(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def http_json(url: str, timeout: float = 5.0) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return {}


def http_post_headers(url: str, body: bytes, headers: dict, timeout: float = 30.0) -> tuple[int, dict, bytes]:
    """(status, lower-cased response headers, body) of one POST."""
    req = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


class Server:
    """A child process serving HTTP on 127.0.0.1:port."""

    def __init__(
        self,
        name: str,
        cmd: list[str],
        port: int,
        ready_path: str,
        env: dict | None = None,
        cpus: str | None = None,
        log_path: str | None = None,
    ):
        self.name, self.port, self.ready_path = name, port, ready_path
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self._log = open(log_path, "wb") if log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            pinned(cmd, cpus), env={**os.environ, **(env or {})}, stdout=self._log, stderr=subprocess.STDOUT
        )

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode} before it was ready"
                    + (f"; see {self.log_path}" if self.log_path else "")
                )
            if http_get(self.url + self.ready_path) == 200:
                return
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"{self.name} not ready at {self.url}{self.ready_path} after {timeout:.0f} s")

    def stop(self, timeout: float = 20.0) -> int | None:
        terminate(self.proc, timeout)
        if self._log is not subprocess.DEVNULL:
            self._log.close()
            self._log = subprocess.DEVNULL
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start_posenc(
    port: int,
    namespace: str,
    tables: str | None = None,
    workers: int = 1,
    cpus: str | None = None,
    log_path: str | None = None,
    shm_dir: str | None = None,
    env: dict | None = None,
    grpc_port: int = 0,
    args: tuple = (),
) -> Server:
    """``posenc serve``; with ``grpc_port`` (default 0: none) also its gRPC server."""
    cmd = [
        sys.executable,
        "-m",
        "posenc",
        "serve",
        "--host",
        "127.0.0.1",
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
    if tables:
        cmd += ["--tables", os.path.abspath(tables)]
    if shm_dir:
        cmd += ["--shm-dir", shm_dir]
    return Server("posenc serve", cmd, port, "/readyz", env=env, cpus=cpus, log_path=log_path)


def start_floor(
    port: int,
    bodies: str | None = None,
    cpus: str | None = None,
    log_path: str | None = None,
    kind: str = "floor",
    requests: str | None = None,
) -> Server:
    """The raw-ASGI floor (kind "floor", loadtest/floors/asgi_app.py) or the bare asyncio + httptools
    server (kind "bare", loadtest/floors/http_protocol.py), answering each request (or path) with the captured bytes."""
    cmd = [sys.executable, "-m", FLOOR_MODULES[kind], "--port", str(port)]
    if bodies:
        cmd += ["--bodies", os.path.abspath(bodies)]
    if requests:
        cmd += ["--requests", os.path.abspath(requests)]
    return Server(kind, cmd, port, "/", cpus=cpus, log_path=log_path)


def shm_leftovers(namespace: str, shm_dir: str = "/dev/shm") -> list[str]:
    try:
        return sorted(n for n in os.listdir(shm_dir) if n.startswith(namespace + "."))
    except FileNotFoundError:
        return []


def wait_shm_clean(
    namespace: str, shm_dir: str = "/dev/shm", timeout: float = 10.0
) -> tuple[list[str], float]:
    """Poll until no ``{namespace}.*`` file is left; (what is left, seconds waited)."""
    t0 = time.monotonic()
    while True:
        left = shm_leftovers(namespace, shm_dir)
        waited = time.monotonic() - t0
        if not left or waited > timeout:
            return left, round(waited, 3)
        time.sleep(0.02)
