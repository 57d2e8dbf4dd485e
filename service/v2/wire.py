"""Protobuf wire format, the little of it the gRPC answers are assembled with (service/v2/grpc_server.py,
service/v2/hot.py): a length-delimited field is its tag byte, the length as a varint, the bytes."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=4096)  # answers repeat their sizes
def varint(n: int) -> bytes:
    """``n`` (>= 0) as a minimal protobuf varint."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
