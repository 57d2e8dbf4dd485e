"""The child processes of ``posenc serve`` other than uvicorn's workers: stopping one
(``terminate``) and the gRPC server processes (``Children``, each ``python -m
posenc.service.v2.grpc_main``), restarted when they die."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from posenc.engine.settings import Settings
from posenc.service.v2.grpc_main import EXIT_NO_PORT


def terminate(proc: subprocess.Popen, timeout: float, sig: int = signal.SIGTERM) -> int:
    """Signal a child (SIGTERM: let it clean up), wait up to ``timeout`` s, then kill it; its
    exit status. Nothing if it has already exited."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode



class Children:
    """The gRPC server processes (service/v2/grpc_main.py): each gets SIGTERM if this process
    dies; one that cannot bind its port stops the server, one that dies otherwise is restarted."""

    def __init__(self, settings: Settings):
        self.s = settings
        self.procs: list[subprocess.Popen] = []
        self.stopping = False
        self.failure: str | None = None   # why the server stopped itself (posenc serve exits with it, status 1)

    def start(self) -> None:
        if self.s.grpc_port == 0:
            return
        for i in range(self.s.grpc_workers):
            self.procs.append(self._spawn())
            threading.Thread(target=self._watch, args=(i,), daemon=True, name=f"grpc-watch-{i}").start()

    def _spawn(self) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "posenc.service.v2.grpc_main", "--exit-with-parent"])

    def _watch(self, i: int) -> None:
        while not self.stopping:
            rc = self.procs[i].wait()
            if self.stopping or rc == 0:   # 0: it was told to stop (a signal to the process group)
                return
            if rc == EXIT_NO_PORT:   # restarting cannot help
                self.failure = (f"posenc serve: the gRPC server cannot listen on {self.s.host}:{self.s.grpc_port}; "
                                "choose another port with --grpc-port (or 0: no gRPC server); stopping")
                print(self.failure, file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            print(f"posenc serve: gRPC server exited with {rc}; restarting", file=sys.stderr, flush=True)
            time.sleep(0.5)
            if not self.stopping:
                self.procs[i] = self._spawn()

    def stop(self) -> None:
        self.stopping = True
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            terminate(p, self.s.shutdown_timeout_s + 5)
