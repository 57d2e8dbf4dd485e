"""A co-located reader running as another user: ``python tests/children/group_reader.py NS SHM``.
Maps a table, asks the engine for a new one, and tries what group read-only access must not
allow (opening a segment for writing, unlinking it, writing the manifest). Prints one JSON line."""

from __future__ import annotations

import json
import os
import sys

from posenc.engine.client import Client


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
    c.table("rope", {"head_dim": 12, "rope_theta": 77.0})   # asks the engine to build it, and waits
    out["built"] = c.lookup("rope", {"head_dim": 12, "rope_theta": 77.0, "positions": [2]})["cos"].tolist()
    seg = next(e["file"] for e in c.manifest(force=True)["tables"].values())
    path = os.path.join(shm, seg)
    out["write"] = attempt(lambda: os.close(os.open(path, os.O_RDWR)))
    out["unlink"] = attempt(lambda: os.unlink(path))
    out["chmod"] = attempt(lambda: os.chmod(path, 0o666))
    out["manifest"] = attempt(lambda: os.close(os.open(os.path.join(shm, f"{ns}.manifest.json"), os.O_RDWR)))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
