"""Parse an engine's manifest over and over from another process: ``python
tests/children/manifest_watch.py MANIFEST_PATH SECONDS``. Reads the head file and the table log
beside it (``.manifest.log``) as any tool would (open, read, json.loads; the log's lines but a
last one still being written) and prints one JSON line: how many reads parsed, how many did not
(a torn head, or a log whose first line or last whole line does not parse: appends land at its
end, a rewrite is a rename), and how many distinct contents were seen."""

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
            with open(path[: -len(".json")] + ".log", "rb") as f:
                log = f.read()
        except FileNotFoundError:
            continue
        try:
            m = json.loads(data)
            assert isinstance(m["generation"], int)
            lines = log.split(b"\n")  # (the last: b"" after a whole line, or one being appended)
            for line in (lines[0], lines[-2]):  # its head; the last whole line: where appends land
                assert isinstance(json.loads(line), dict)
            ok += 1
            seen.add(hash(data + log))
        except (ValueError, KeyError, AssertionError):
            torn += 1
    print(json.dumps({"ok": ok, "torn": torn, "distinct": len(seen)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
