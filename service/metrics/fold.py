"""Counts that outlive their worker: the persistent total of workers that are gone.

Each worker counts into ``{ns}.metrics.{pid}`` (service/metrics/counters.py). When a worker exits its
counts are folded into ``{ns}.metrics.total`` (``retire``); when it dies without that (SIGKILL),
the next ``/metrics`` on any worker folds them (``collect``). Both hold ``{ns}.metrics.lock``
(flock). Exactly once: every worker file carries a random token (its header row), the total
records the tokens it has folded, and it is replaced atomically (rename) *before* the dead file is
unlinked; a file whose token the total already holds is only unlinked. The total is written with
write(), never through a mapping, so a full tmpfs answers ENOSPC (the dead file then stays, still
counted, and is folded by a later scrape) instead of SIGBUS.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

import numpy as np

from posenc.service.metrics.layout import KINDS, SHAPE, alive, prefix

_SIZE = int(np.prod(SHAPE))


def _path(shm_dir: str, namespace: str, what: str) -> str:
    return os.path.join(shm_dir, f"{prefix(namespace)}{what}")


@contextlib.contextmanager
def _locked(shm_dir: str, namespace: str):
    fd = os.open(_path(shm_dir, namespace, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _read_total(shm_dir: str, namespace: str) -> tuple[set, np.ndarray]:
    """(tokens folded, counts): [n, token * n, counts...] in one float64 file."""
    try:
        a = np.fromfile(_path(shm_dir, namespace, "total"), dtype=np.float64)
        n = int(a[0])
        if a.size == 1 + n + _SIZE:
            return set(a[1 : 1 + n].tolist()), a[1 + n :].reshape(SHAPE).copy()
    except (OSError, ValueError, IndexError):
        pass
    return set(), np.zeros(SHAPE)


def _write_total(shm_dir: str, namespace: str, tokens: set, counts: np.ndarray) -> None:
    path = _path(shm_dir, namespace, "total")
    tmp = f"{path}.tmp{os.getpid()}"
    a = np.concatenate(([len(tokens)], sorted(tokens), counts.ravel()))
    try:
        with open(tmp, "wb") as f:
            f.write(a.astype(np.float64).tobytes())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def retire(shm_dir: str, namespace: str, path: str, counts: np.ndarray) -> None:
    """A worker's last act: fold its counts into the total, then remove its file. If the total
    cannot be written, the file stays and a later scrape folds it."""
    try:
        with _locked(shm_dir, namespace):
            tokens, total = _read_total(shm_dir, namespace)
            token = float(counts[-1, 0, 0])
            if token not in tokens:
                mine = counts.copy()
                mine[-1] = 0
                _write_total(shm_dir, namespace, tokens | {token}, total + mine)
            _unlink(path)
    except OSError:
        pass


def collect(shm_dir: str, namespace: str, own_path: str) -> tuple[np.ndarray, list[tuple[str, int]]]:
    """(every count ever made on this server, (kind, pid) of each live counting process: layout.KINDS):
    the total plus each live process's file; dead ones' files are folded into the total first, once."""
    with _locked(shm_dir, namespace):
        tokens, total = _read_total(shm_dir, namespace)
        try:
            names = os.listdir(shm_dir)
        except OSError:  # e.g. EMFILE: this worker's own counts still answer
            names = [os.path.basename(own_path)]
        live, pids, dead = np.zeros(SHAPE), [], []
        for name in names:
            if not name.startswith(prefix(namespace)):
                continue
            path = os.path.join(shm_dir, name)
            try:
                pid = int(name[len(prefix(namespace)) :])
                a = np.fromfile(path, dtype=np.float64)
            except (ValueError, OSError):
                continue  # the total, the lock, a temporary file
            if a.size != _SIZE:
                continue
            a = a.reshape(SHAPE)
            if pid == os.getpid() or alive(pid):
                live += a
                kind = int(a[-1, 0, 1])
                pids.append((KINDS[kind] if 0 <= kind < len(KINDS) else KINDS[0], pid))
            else:
                dead.append((path, a))
        new = [(p, a) for p, a in dead if float(a[-1, 0, 0]) not in tokens]
        if new:
            folded = total + sum(a for _, a in new)
            folded[-1] = 0
            keep = {float(a[-1, 0, 0]) for _, a in dead}  # tokens of files not yet unlinked
            try:
                _write_total(shm_dir, namespace, keep, folded)
                total = folded
            except OSError:  # no room: count them this time, fold them at a later scrape
                live += sum(a for _, a in new)
                dead = [(p, a) for p, a in dead if not any(p == q for q, _ in new)]
        for p, _ in dead:
            _unlink(p)
    out = total + live
    out[-1] = 0  # the header row holds tokens, not counts
    return out, sorted(pids)
