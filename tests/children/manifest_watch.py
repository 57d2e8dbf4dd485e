"""Parse an engine's manifest over and over from another process: ``python
tests/children/manifest_watch.py MANIFEST_PATH STOP_FILE``. Reads the head file and the table log
beside it (``.manifest.log``) as any tool would (open, read, json.loads; the log's lines but a
last one still being written) until STOP_FILE exists; prints one JSON line each time it sees a
content it has not seen before, and a last one with ``"final": true``: how many reads parsed, how
many did not (a torn head, or a log whose first line or last whole line does not parse: appends
land at its end, a rewrite is a rename), and how many distinct contents were seen."""

from __future__ import annotations

import json
import os
import sys


def main(path: str, stop: str) -> None:
    ok = torn = 0
    seen = set()
    while True:
        done = os.path.exists(stop)  # (before the last read: every write before the stop is read)
        try:
            with open(path, "rb") as f:
                data = f.read()
            with open(path[: -len(".json")] + ".log", "rb") as f:
                log = f.read()
        except FileNotFoundError:
            data = None
        if data is not None:
            try:
                m = json.loads(data)
                assert isinstance(m["generation"], int)
                lines = log.split(b"\n")  # (the last: b"" after a whole line, or one being appended)
                for line in (lines[0], lines[-2]):  # its head; the last whole line: where appends land
                    assert isinstance(json.loads(line), dict)
                ok += 1
                if hash(data + log) not in seen:
                    seen.add(hash(data + log))
                    print(json.dumps({"ok": ok, "torn": torn, "distinct": len(seen)}), flush=True)
            except (ValueError, KeyError, AssertionError, IndexError):
                torn += 1
        if done:
            break
    print(json.dumps({"ok": ok, "torn": torn, "distinct": len(seen), "final": True}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
