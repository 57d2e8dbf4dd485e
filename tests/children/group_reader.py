"""A co-located reader running as another user: ``python tests/children/group_reader.py NS SHM``.
Maps a table, asks the engine for a new one, and tries what it must not be able to do: write,
truncate or map for writing a sealed segment it was handed, reach the engine's own descriptors
through /proc, write the manifest. Prints one JSON line."""

from __future__ import annotations

import json
import mmap
import os
import sys

from posenc.engine.reader.client import Client


def attempt(fn) -> str:
    try:
        fn()
    except PermissionError:
        return "refused"
    except OSError as e:
        return f"error {e.errno}"
    return "allowed"


def main(ns: str, shm: str) -> None:
    c = Client(shm_dir=shm, namespace=ns)
    c.wait_ready(30)
    out = {"uid": os.getuid(), "gid": os.getgid()}
    out["lookup"] = c.lookup("rope", {"head_dim": 64, "positions": [3]})["cos"].tolist()
    c.table("rope", {"head_dim": 12, "rope_theta": 77.0})  # asks the engine to build it, and waits
    out["built"] = c.lookup("rope", {"head_dim": 12, "rope_theta": 77.0, "positions": [2]})["cos"].tolist()
    m = c.manifest(force=True)
    reply, fds = c.call_fds({"op": "open", "digests": list(m["tables"])[:1]})
    fd = fds[0]
    out["write"] = attempt(lambda: os.pwrite(fd, b"x", 0))
    out["truncate"] = attempt(lambda: os.ftruncate(fd, 0))
    out["map"] = attempt(lambda: mmap.mmap(fd, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE))
    out["engine_fds"] = attempt(lambda: os.listdir(f"/proc/{m['pid']}/fd"))
    out["manifest"] = attempt(lambda: os.close(os.open(os.path.join(shm, f"{ns}.manifest.json"), os.O_RDWR)))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
