"""Start and stop a real ``posenc serve`` for integration tests (uvicorn workers + engine)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import httpx

from posenc.service.serve_main import terminate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHM = "/dev/shm"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def leftovers(namespace: str, shm_dir: str = SHM) -> list[str]:
    return sorted(n for n in os.listdir(shm_dir) if n.startswith(namespace + "."))


def children(pid: int) -> list[int]:
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


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class Server:
    def __init__(self, tables: dict | None, workers: int = 2, tmp_path=None, extra_env=None, args=()):
        self.namespace = f"ptest-{uuid.uuid4().hex[:8]}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workers = workers
        self.config_path = None
        if tables is not None:
            self.config_path = os.path.join(str(tmp_path), f"{self.namespace}.json")
            with open(self.config_path, "w") as f:
                json.dump(tables, f)
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(extra_env or {}))
        cmd = [sys.executable, "-m", "posenc", "serve", "--port", str(self.port), "--workers", str(workers),
               "--namespace", self.namespace, "--log-level", "warning", *args]
        if self.config_path:
            cmd += ["--tables", self.config_path]
        self.log_path = os.path.join(str(tmp_path), f"{self.namespace}.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"posenc serve exited with {self.proc.returncode}: {self.output()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"not ready in {timeout}s: {self.output()}")

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")[-4000:]

    def worker_pids(self) -> list[int]:
        return [p for p in children(self.proc.pid) if "spawn_main" in cmdline(p)]  # uvicorn's workers

    def engine_pid(self) -> int | None:
        for p in children(self.proc.pid):
            if "posenc.engine.engine_main" in cmdline(p):
                return p
        return None

    def stop(self, sig=signal.SIGTERM, timeout: float = 30.0) -> int:
        terminate(self.proc, timeout, sig)
        self.log.close()
        return self.proc.returncode
