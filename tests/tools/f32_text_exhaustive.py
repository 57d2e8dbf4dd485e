"""Every float32 bit pattern's JSON text from the shortcut (_hot.f32_json, hot_f32text.c) against
the full path's writer (orjson), 2^24 patterns at a time: all 2^32 of them by default.

    .venv/bin/python tests/tools/f32_text_exhaustive.py [--first CHUNK] [--chunks N]

Prints each chunk that differs (its first differing value) and the total; exits 1 on a difference.
Runs against orjson 3.13.0, all 4,294,967,296 patterns equal each time: hot_f32text.c over f2s's
text (405 s on one core), f2d called directly (ea4c7ea, 403 s), digits two at a time and copied
with memcpy (366 s), digits as one word stored in place (361 s), zmij's digits (382 s).
Run it again after any change to hot_f32text.c, the vendored zmij or the orjson pin.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import orjson

from posenc.service.shortcut import _hot

CHUNK_BITS = 24


def first_difference(values: np.ndarray) -> tuple[int, bytes, bytes]:
    """The first value whose texts differ: (its bits, ours, orjson's)."""
    for v in values:
        ours = _hot.f32_json(np.array([v], np.float32))
        theirs = orjson.dumps(np.array([v], np.float32), option=orjson.OPT_SERIALIZE_NUMPY)[1:-1]
        if ours != theirs:
            return int(np.array([v], np.float32).view(np.uint32)[0]), ours, theirs
    raise AssertionError("the chunk's texts differ but no value's does")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=int, default=0, help="first chunk of 2^24 patterns")
    parser.add_argument("--chunks", type=int, default=1 << (32 - CHUNK_BITS), help="how many chunks")
    args = parser.parse_args()
    start, bad = time.monotonic(), 0
    for c in range(args.first, args.first + args.chunks):
        values = (
            np.arange(c << CHUNK_BITS, (c + 1) << CHUNK_BITS, dtype=np.uint64)
            .astype(np.uint32)
            .view(np.float32)
        )
        if _hot.f32_json(values) != orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1]:
            bad += 1
            print(f"chunk {c}: 0x%08x ours %r, orjson %r" % first_difference(values), flush=True)
    print(f"{args.chunks << CHUNK_BITS} patterns, {bad} chunks differ, {time.monotonic() - start:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
