"""``posenc serve``'s engine child and its standby (``EngineChild``): started, watched, restarted
when it dies (at once; only a crash loop waits), the standby kept; and the generation of the
manifest an engine published last, for the restart-to-ready line of the log."""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from posenc.engine.process.keeper import Keeper
from posenc.engine.store import fdpass
from posenc.engine.store import segments as store
from posenc.service.core.settings import Settings
from posenc.service.supervise.children import restart_delay, terminate

log = logging.getLogger("posenc.serve")

FIRST_STANDBY_DELAY_S = 2.0  # the first standby waits this long after the engine is up (serve's start)
CRASH_S = 1.0  # engines dying this soon after their start twice in a row (or before ready) are a crash loop
WATCH_S = 1.0  # the watch wakes at the latest after this (else when a process it watches exits)
POLL_S = 0.05  # how often it looks instead, where the kernel has no pidfd_open


def engine_delay(streak: int) -> float:
    """Seconds before the next engine starts, after ``streak`` crash-loop deaths in a row (0: the
    engine died after it was up, however soon after the one before: at once); the gRPC processes'
    back-off (children.py ``restart_delay``), whose first death in a row is its streak 1."""
    return restart_delay(streak + 1)


def generation_of(shm_dir: str, namespace: str):
    """The head file's generation, or None (no file: not published yet, or no room for it)."""
    try:
        return (store.read_head(shm_dir, namespace) or {}).get("generation")  # (the head file: small)
    except (ValueError, OSError, RuntimeError):
        return None


class EngineChild:
    """The engine child, and its standby: once an engine is up (the first one: FIRST_STANDBY_DELAY_S
    after, past serve's own start), a second engine process is started with ``--standby-fd``
    (engine/process/main.py), imported and waiting; when the engine dies the standby is sent ``go``
    with a fresh keeper channel and becomes the engine (no interpreter start, no imports: about half
    a second of a restart), and a new standby is started as soon as it is up.
    Without a live standby (it died, or the first engine is not up yet) a new process starts.

    An engine is up when it says so on its ``--ready-fd`` pipe (after it published its first
    manifest, whether or not a full shm_dir let the file be written). The watch waits on the
    engine's and the standby's pidfds and that pipe at once, so a standby that dies is reaped and
    replaced at once too (after engine_delay only while standbys keep dying within CRASH_S of
    their start), not left a zombie until the engine's next death."""

    def __init__(self, settings: Settings):
        self.s = settings
        self.proc: subprocess.Popen | None = None
        self.ready: int | None = None  # the read end of the engine's --ready-fd pipe
        self.standby: tuple[subprocess.Popen, socket.socket, int] | None = None  # and its pipe
        self.keeper = Keeper()  # holds every table the engine publishes, for the next engine
        self.stopping = False
        self.failure: str | None = None  # why the server stopped itself (posenc serve exits with it)
        self._standby_streak, self._standby_at, self._standby_started = 0, 0.0, 0.0
        self._pidfds: dict[int, int | None] = {}  # pid -> its pidfd (None: none to be had)
        # the watch thread and stop() (serve's main thread) both close these descriptors: each
        # close happens under this lock, after the descriptor is taken out of its field, so none
        # is closed twice (a second close would close whatever reused its number: grpcio's epoll
        # descriptor in this process aborted it, 'epoll_wait: Bad file descriptor')
        self._fds = threading.Lock()

    def _cmd(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "posenc.engine.process.main",
            "--exit-with-parent",
            "--shm-dir",
            self.s.shm_dir,
            "--namespace",
            self.s.namespace,
            "--memory-budget",
            str(self.s.memory_budget_bytes),
        ]
        if self.s.tables:
            cmd += ["--tables", self.s.tables]
        if self.s.shm_group:
            cmd += ["--group", self.s.shm_group]
        return cmd

    def _spawn(self, flag: str, fd: int) -> tuple[subprocess.Popen, int]:
        """An engine process given ``flag fd`` (its keeper channel or its standby socket) and a
        ready pipe: (the process, the pipe's read end)."""
        r, w = os.pipe()
        try:
            os.set_blocking(r, False)
            proc = subprocess.Popen([*self._cmd(), flag, str(fd), "--ready-fd", str(w)], pass_fds=(fd, w))
        except BaseException:
            os.close(r)
            raise
        finally:
            os.close(w)
        return proc, r

    def start(self) -> None:
        channel = self.keeper.channel()  # (made now: it hands over what is held now)
        self._close_ready()
        with channel:
            with self._fds:
                standby, self.standby = self.standby, None
            if standby is not None:
                proc, sock, ready = standby
                try:
                    with sock:
                        fdpass.send_packet(sock, {"op": "go"}, channel.fileno())
                    self.proc, self.ready = proc, ready
                    return
                except OSError:  # the standby died meanwhile: a new process, as without one
                    terminate(proc, 1.0)
                    self._forget(proc)
                    os.close(ready)
            self.proc, self.ready = self._spawn("--keeper-fd", channel.fileno())

    def _is_up(self) -> bool:
        """Whether the engine said it is ready (its pipe then holds "ready"; EOF: it died first,
        and the pipe is closed, no longer waited on)."""
        with self._fds:
            if self.ready is None:
                return False
            try:
                got = os.read(self.ready, 64)
            except (BlockingIOError, OSError):
                return False
            if not got:
                os.close(self.ready)
                self.ready = None
        return got.startswith(b"ready")

    def _close_ready(self) -> None:
        with self._fds:
            fd, self.ready = self.ready, None
            if fd is not None:
                os.close(fd)

    def _pidfd(self, proc: subprocess.Popen) -> int | None:
        """A descriptor readable once ``proc`` exits (opened while it is our unreaped child: its
        pid cannot be another process's yet), or None."""
        with self._fds:
            if self.stopping:  # stop() closes them: none is opened after it
                return None
            if proc.pid not in self._pidfds:
                try:
                    self._pidfds[proc.pid] = os.pidfd_open(proc.pid)
                except (AttributeError, OSError):  # pragma: no cover - Linux before 5.3
                    self._pidfds[proc.pid] = None
            return self._pidfds[proc.pid]

    def _forget(self, proc: subprocess.Popen) -> None:
        with self._fds:
            fd = self._pidfds.pop(proc.pid, None)
            if fd is not None:
                os.close(fd)

    def _wait(self, up: bool, due: float | None) -> None:
        """Until the engine exits or says it is up, the standby exits, ``due`` (monotonic) comes,
        or WATCH_S passes."""
        fds = [self._pidfd(self.proc)]
        if not up and self.ready is not None:
            fds.append(self.ready)
        standby = self.standby
        if standby is not None:
            fds.append(self._pidfd(standby[0]))
        left = WATCH_S if due is None else min(WATCH_S, max(0.0, due - time.monotonic()))
        if None in fds:
            time.sleep(min(left, POLL_S))
            return
        try:
            select.select(fds, [], [], left)
        except (OSError, ValueError):  # a descriptor stop() closed meanwhile: the loop sees why
            time.sleep(min(left, POLL_S))

    def _keep_standby(self) -> None:
        """Reap a standby that died (saying so) and start one where none lives, unless a standby
        crash loop's delay runs."""
        now = time.monotonic()
        with self._fds:
            standby = self.standby
            rc = None if standby is None else standby[0].poll()
            if standby is not None and rc is None:
                return
            if standby is not None:  # it died: taken out under the lock, so stop() never sees it
                self.standby = None
                os.close(standby[2])
        if standby is not None:
            proc, sock, _ = standby
            self._forget(proc)
            sock.close()
            lived = now - self._standby_started
            self._standby_streak = self._standby_streak + 1 if lived < CRASH_S else 0
            delay = engine_delay(self._standby_streak)
            self._standby_at = now + delay
            why = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exited with {rc}"
            log.warning("standby engine %s after %.1fs; another in %.1fs", why, lived, delay)
        if self.stopping or now < self._standby_at:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            theirs.set_inheritable(True)
            proc, ready = self._spawn("--standby-fd", theirs.fileno())
        with self._fds:
            late = self.stopping  # stop() ran meanwhile and saw no standby: this one ends here
            if not late:
                self.standby, self._standby_started = (proc, ours, ready), now
        if late:
            ours.close()
            terminate(proc, 5.0)
            os.close(ready)

    def _run_until_exit(self, standby_delay: float, exited_at: float | None) -> tuple[int, bool]:
        """Watch the running engine until it exits: (its status, whether it was up). Once it is up
        (the restart-to-ready time logged, when ``exited_at`` is its predecessor's death) and then
        ``standby_delay`` seconds have passed (not before: a standby's imports, half a second of a
        core, would slow the engine's start, and at serve's start the workers' and the first
        requests', on a small machine), a standby is kept."""
        up_at = None
        while True:
            rc = self.proc.poll()
            if rc is not None or self.stopping:
                if rc is not None:
                    self._forget(self.proc)
                return rc, up_at is not None
            now = time.monotonic()
            if up_at is None and self._is_up():
                up_at = now
                if exited_at is not None:
                    log.warning(
                        "engine restarted: generation %s ready %.2f s after the previous engine exited",
                        generation_of(self.s.shm_dir, self.s.namespace),
                        now - exited_at,
                    )
            due = None  # when a standby is to be started (None: none is due, or it runs)
            if up_at is not None and now - up_at >= standby_delay:
                self._keep_standby()
            if up_at is not None and self.standby is None and not self.stopping:
                due = max(up_at + standby_delay, self._standby_at)
            self._wait(up_at is not None, due)

    def watch(self) -> None:
        """Restart the engine if it dies while we serve (not while we stop), saying why each time:
        at once (its successor adopts its intact tables, so workers lose nothing), also when it is
        killed again soon after; only a crash loop (deaths before the engine was ready, or within
        CRASH_S of its start twice in a row) waits, a delay doubling from 0.5 s to 4 s."""
        streak, quick, delay, exited_at = 0, False, FIRST_STANDBY_DELAY_S, None
        while not self.stopping:
            started = time.monotonic()
            rc, was_up = self._run_until_exit(delay, exited_at)
            delay = 0.0  # after a restart at once: the next kill may come soon
            if self.stopping:
                return
            if rc == 2:  # invalid table config: restarting cannot help
                self.failure = (
                    "posenc serve: the engine refused its table config (--tables; its log above says why)"
                )
                log.error("the engine refused its table config; stopping")
                os.kill(os.getpid(), signal.SIGTERM)
                return
            exited_at = time.monotonic()
            lived = exited_at - started
            # a crash loop: it died before it was up, or soon after its start twice in a row
            streak = streak + 1 if not was_up or (lived < CRASH_S and quick) else 0
            quick = lived < CRASH_S
            wait = engine_delay(streak)
            why = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exited with {rc}"
            log.warning(
                "engine %s after %.1fs; restarting in %.1fs (its log above says why)", why, lived, wait
            )
            deadline = time.monotonic() + wait
            while not self.stopping and time.monotonic() < deadline:
                time.sleep(0.1)
            if not self.stopping:
                self.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._fds:
            self.stopping = True
            standby, self.standby = self.standby, None
        if standby is not None:
            standby[1].close()  # no go: it exits at once
            terminate(standby[0], timeout)
            os.close(standby[2])
        if self.proc:
            terminate(self.proc, timeout)
        self._close_ready()
        with self._fds:
            pidfds, self._pidfds = self._pidfds, {}
            for fd in pidfds.values():
                if fd is not None:
                    os.close(fd)
        # an engine killed before a successor took its files over (or one that ignored SIGTERM)
        # left its lock, manifest and socket: nobody else would remove them
        left = store.remove_dead(self.s.shm_dir, self.s.namespace)
        if left:
            log.warning("removed %d file(s) a dead engine left in %s", len(left), self.s.shm_dir)
        self.keeper.close()
