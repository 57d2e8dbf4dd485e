"""The engine's files in /dev/shm, found only through their documented names
(``{ns}.manifest.json``, ``{ns}.manifest.log``, ``{ns}.sock``, ``{ns}.lock``): the manifest is read
as plain JSON (the head, then the table log's lines replayed, as docs/shm-format.md says) and
files are listed by prefix, independently of ``posenc.engine.store.segments``; and the sealed segments a
process holds or maps (memfds named ``{ns}.seg.{generation}.{digest}[-rev]``), read from /proc."""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Iterable

from tests.waits import wait_for

SHM_DIR = "/dev/shm"

# Every namespace this pytest process handed out -> the test (and phase) that asked for it:
# tests/conftest.py checks at the session's end that none of them has a file left in /dev/shm.
ISSUED: dict[str, str] = {}


def unique_namespace(prefix: str = "ptest") -> str:
    ns = f"{prefix}-{uuid.uuid4().hex[:8]}"
    ISSUED[ns] = os.environ.get("PYTEST_CURRENT_TEST", "outside any test")
    return ns


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


def lock_pid(namespace: str, shm_dir: str = SHM_DIR) -> int | None:
    """The pid the namespace's engine wrote in ``{ns}.lock`` (None: no lock, or no pid in it)."""
    try:
        with open(os.path.join(shm_dir, f"{namespace}.lock")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def pid_alive(pid: int | None) -> bool:
    """Whether ``pid`` is a running process (a zombie is not: it has exited)."""
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def leftovers(
    namespaces: Iterable[str], shm_dir: str = SHM_DIR, grace: float = 10.0
) -> dict[str, tuple[list[str], int | None]]:
    """{namespace: (its files, the pid in its lock)} of the given namespaces that still have files
    in shm_dir once no live process owns them; an owner still running is waited for up to
    ``grace`` seconds in all (an engine may be removing its files), then reported all the same."""
    deadline = time.monotonic() + grace
    out = {}
    for ns in namespaces:
        with contextlib.suppress(TimeoutError):  # an owner still running past the grace: reported below
            wait_for(
                lambda ns=ns: not (shm_files(ns, shm_dir) and pid_alive(lock_pid(ns, shm_dir))),
                max(0.0, deadline - time.monotonic()),
                0.05,
                f"the owner of {ns} to remove its files or exit",
            )
        left = shm_files(ns, shm_dir)
        if left:
            out[ns] = (left, lock_pid(ns, shm_dir))
    return out


ENGINE_FILES = ("lock", "manifest.json", "manifest.log", "sock")  # an engine's files, but its segments


def read_head(namespace: str, shm_dir: str = SHM_DIR) -> dict | None:
    """The manifest's head file alone (generation, pid, named): cheap to poll."""
    try:
        with open(os.path.join(shm_dir, f"{namespace}.manifest.json"), "rb") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        return None


def read_manifest(namespace: str, shm_dir: str = SHM_DIR) -> dict | None:
    """The whole manifest: the head file, its ``tables`` those of the table log's lines of the
    head's generation (an entry, or null: dropped; the last wins; a last line still being written
    ends it), ``seq`` and ``stats`` those of its last line."""
    try:
        with open(os.path.join(shm_dir, f"{namespace}.manifest.json"), "rb") as f:
            m = json.loads(f.read())
    except FileNotFoundError:
        return None
    try:
        with open(os.path.join(shm_dir, f"{namespace}.manifest.log"), "rb") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        if m.get("format") == 1:  # (an engine before the table log: the tables are in the head)
            return m
        lines = []
    m["tables"], gen = {}, None
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            break
        if "base" in rec:
            gen = rec["generation"]
        elif gen == m["generation"]:
            if rec["digest"] is not None:
                if rec["entry"] is None:
                    m["tables"].pop(rec["digest"], None)
                else:
                    m["tables"][rec["digest"]] = rec["entry"]
            m["seq"] = rec["seq"]
            m.update({"stats": rec["stats"]} if "stats" in rec else {})
    return m


def segment_fds(pid: int, namespace: str, generation: int | None = None) -> dict[str, str]:
    """{fd number: segment name} of the namespace's sealed segments process ``pid`` holds a
    descriptor of (its /proc/PID/fd links read ``/memfd:NAME (deleted)``). A descriptor closed
    between the listing and its readlink (a socket, a discarded build) is not one."""
    pre = f"/memfd:{namespace}.seg." + ("" if generation is None else f"{generation}.")
    out = {}
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return {}
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith(pre):
            out[fd] = link[len("/memfd:") :].removesuffix(" (deleted)")
    return out


def held_segments(pid: int, namespace: str, generation: int | None = None) -> list[str]:
    """Names of the namespace's sealed segments process ``pid`` holds a descriptor of."""
    return sorted(segment_fds(pid, namespace, generation).values())


def mapped_segments(pid: int, namespace: str) -> dict[str, str]:
    """{segment name: permissions} of the namespace's sealed segments process ``pid`` maps."""
    out = {}
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith(f"/memfd:{namespace}.seg."):
                out[parts[5].strip()[len("/memfd:") :].removesuffix(" (deleted)")] = parts[1]
    return out
