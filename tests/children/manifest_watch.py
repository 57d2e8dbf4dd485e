"""Parse an engine's manifest over and over from another process: ``python
tests/children/manifest_watch.py MANIFEST_PATH SECONDS``. Reads the file as any reader would
(open, read, json.loads) and prints one JSON line: how many reads parsed, how many did not (a torn
manifest), and how many distinct contents were seen."""

from __future__ import annotations

import json
import sys
import time


def main(path: str, seconds: float) -> None:
    ok = torn = 0
    seen = set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            continue
        try:
            m = json.loads(data)
            assert isinstance(m["tables"], dict)
            ok += 1
            seen.add(hash(data))
        except (ValueError, KeyError, AssertionError):
            torn += 1
    print(json.dumps({"ok": ok, "torn": torn, "distinct": len(seen)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
