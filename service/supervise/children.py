"""The child processes of ``posenc serve`` other than uvicorn's workers: stopping one
(``terminate``) and the gRPC server processes (``Children``, each ``python -m
posenc.service.supervise.grpc_main``), restarted when they die."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from posenc.service.core.settings import Settings
from posenc.service.supervise.grpc_main import EXIT_NO_PORT


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


STABLE_S = 10.0  # a gRPC process that served this long restarts at once, its back-off forgotten
FIRST_BACKOFF_S = 0.5  # the delay after a second death in a row within STABLE_S, doubling ...
MAX_BACKOFF_S = 4.0  # ... up to this


def restart_delay(streak: int) -> float:
    """Seconds before restarting a process that died young ``streak`` times in a row (1: it had
    lived STABLE_S, or it is its first death): 0, then 0.5, 1, 2, 4, 4, ..."""
    return 0.0 if streak <= 1 else min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (streak - 2))


class Children:
    """The gRPC server processes (service/supervise/grpc_main.py, ``grpc_workers`` of them sharing the
    port with SO_REUSEPORT, so a process that dies loses only the calls in flight on it): each
    gets SIGTERM if this process dies; one that cannot bind its port stops the server, one that
    dies otherwise is restarted (``restart_delay``)."""

    def __init__(self, settings: Settings):
        self.s = settings
        self.procs: list[subprocess.Popen] = []
        self.stopping = False
        self.failure: str | None = (
            None  # why the server stopped itself (posenc serve exits with it, status 1)
        )

    def start(self) -> None:
        if self.s.grpc_port == 0:
            return
        for i in range(self.s.grpc_workers):
            self.procs.append(self._spawn())
            threading.Thread(target=self._watch, args=(i,), daemon=True, name=f"grpc-watch-{i}").start()

    def _spawn(self) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "posenc.service.supervise.grpc_main", "--exit-with-parent"]
        )

    def _watch(self, i: int) -> None:
        """Restart process ``i`` when it dies: at once when it had served for STABLE_S (or it is
        its first death), else after a delay doubling from FIRST_BACKOFF_S to MAX_BACKOFF_S while
        it keeps dying young (a crash loop costs a restart every few seconds, not a spin)."""
        streak = 0
        while not self.stopping:
            started = time.monotonic()
            rc = self.procs[i].wait()
            if self.stopping or rc == 0:  # 0: it was told to stop (a signal to the process group)
                return
            if rc == EXIT_NO_PORT:  # restarting cannot help
                self.failure = (
                    f"posenc serve: the gRPC server cannot listen on {self.s.host}:{self.s.grpc_port}; "
                    "choose another port with --grpc-port (or 0: no gRPC server); stopping"
                )
                print(self.failure, file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            lived = time.monotonic() - started
            streak = 1 if lived > STABLE_S else streak + 1
            delay = restart_delay(streak)
            why = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exited with {rc}"
            print(
                f"posenc serve: gRPC server {self.procs[i].pid} {why} after {lived:.1f}s; restarting in {delay:.1f}s",
                file=sys.stderr,
                flush=True,
            )
            deadline = time.monotonic() + delay
            while not self.stopping and time.monotonic() < deadline:
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            if not self.stopping:
                self.procs[i] = self._spawn()

    def stop(self) -> None:
        self.stopping = True
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            terminate(p, self.s.shutdown_timeout_s + 5)
