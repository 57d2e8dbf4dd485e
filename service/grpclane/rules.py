"""What grpcio refuses in a request's headers, judged by the gRPC lane in grpcio's own words.

The lane answers some calls itself and relays the rest through a grpc.aio client, which re-encodes
the metadata and the deadline: neither path would otherwise refuse what grpcio's HTTP/2 transport
refuses before any handler runs. ``judge(headers)`` gives grpcio's answer to such a request, or
None, and the call's ``grpc-timeout``. Each rule is grpcio's, as a server with ``--grpc-lane off``
answers it over raw HTTP/2 (tests/integration/test_grpc_lane.py sends each to both servers):

- ``:method`` other than POST, or no ``te`` header: RST_STREAM INTERNAL_ERROR, no headers;
- in header order, the first of: a ``grpc-timeout`` grpcio cannot parse, a ``grpc-encoding``
  other than identity, deflate or gzip, a ``-bin`` value that is not strict base64, a metadata
  key outside ``[0-9a-z_.-]``: INTERNAL with grpcio's message (nghttp2 has already reset a ``te``
  other than ``trailers``);
- a ``grpc-timeout`` of zero: DEADLINE_EXCEEDED.

What grpcio accepts and a grpc.aio client cannot send (a metadata value with bytes outside
printable ASCII) is for the relay to leave out (``forwardable``), never to fail on.
"""

from __future__ import annotations

import binascii
import re

import grpc

# grpcio's answer to a call whose deadline passes before its answer is made (its status and message)
DEADLINE = (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
RESET = "reset"  # judge()'s answer: reset the stream with INTERNAL_ERROR, as grpcio does
INTERNAL_ERROR = 2  # HTTP/2's error code

ENCODINGS = frozenset((b"identity", b"deflate", b"gzip"))
ACCEPT_ENCODING = (b"grpc-accept-encoding", b"identity, deflate, gzip")  # grpcio's, on its response headers
_UNIT_NS = {b"n": 1, b"u": 10**3, b"m": 10**6, b"S": 10**9, b"M": 60 * 10**9, b"H": 3600 * 10**9}
# grpcio's timeout parser: spaces, digits, spaces, a unit, spaces
_TIMEOUT = re.compile(rb" *([0-9]+) *([numSMH]) *\Z")
_TIMEOUT_CAP = 10**9  # past it grpcio reads the timeout as infinite
# headers every call carries that no rule reads (skipped first: judge runs on every call)
_USUAL = frozenset(
    (
        b":scheme",
        b":path",
        b":authority",
        b"content-type",
        b"user-agent",
        b"grpc-accept-encoding",
        b"authorization",
    )
)
_KEY_CHARS = b"0123456789abcdefghijklmnopqrstuvwxyz_.-"  # a metadata key's, as grpcio allows them
_B64 = re.compile(rb"[A-Za-z0-9+/]*\Z")
_PRINTABLE = re.compile(rb"[\x20-\x7e]*\Z")


def timeout_s(value: bytes) -> float | None:
    """Seconds of a ``grpc-timeout`` value as grpcio reads it: None when it cannot parse it,
    ``inf`` past its cap; nanoseconds and microseconds are rounded up to a millisecond, as grpcio does."""
    unit = _UNIT_NS.get(value[-1:])
    if unit is not None and value[:-1].isdigit():  # the usual form: digits, then the unit
        n = int(value[:-1])
    elif (m := _TIMEOUT.match(value)) is not None:
        n, unit = int(m[1]), _UNIT_NS[m[2]]
    else:
        return None
    if n > _TIMEOUT_CAP:
        return float("inf")
    ns = n * unit
    return -(-ns // 10**6) / 1e3


def b64(value: bytes) -> bytes | None:
    """A ``-bin`` value decoded as grpcio decodes it (trailing ``=`` dropped, the rest strict
    base64 whose unused bits are zero), or None where grpcio refuses it."""
    body = value.rstrip(b"=")
    if not _B64.match(body) or len(body) % 4 == 1:
        return None
    out = binascii.a2b_base64(body + b"=" * (-len(body) % 4))
    return out if binascii.b2a_base64(out, newline=False).rstrip(b"=") == body else None


def judge(headers) -> tuple[str | tuple[grpc.StatusCode, str] | None, float | None]:
    """(grpcio's answer to a request with these headers before any handler runs: RESET, a
    (status, message), or None (grpcio goes on with the call); its ``grpc-timeout`` in seconds, or
    None). One pass: it runs on every call."""
    method = te = verdict = timeout = None
    zero = False
    for k, v in headers:
        if k in _USUAL:
            pass
        elif k[:1] == b":":
            if k == b":method":
                method = v
        elif k == b"te":  # nghttp2 has reset any value but ``trailers``
            te = v
        elif verdict is not None:
            pass
        elif k == b"grpc-timeout":
            timeout = timeout_s(v)
            if timeout is None:
                verdict = grpc.StatusCode.INTERNAL, "Error parsing 'grpc-timeout' metadata"
            zero = zero or timeout == 0
        elif k == b"grpc-encoding":
            if v not in ENCODINGS:
                verdict = grpc.StatusCode.INTERNAL, "Error parsing 'grpc-encoding' metadata"
        elif k.translate(None, _KEY_CHARS):
            verdict = grpc.StatusCode.INTERNAL, f"Illegal header key: {k.decode('latin-1')}"
        elif k.endswith(b"-bin") and b64(v) is None:
            verdict = (
                grpc.StatusCode.INTERNAL,
                f"Error parsing '{k.decode()}' metadata: illegal base64 encoding",
            )
    if method != b"POST" or te is None:
        return RESET, None
    if verdict is None and zero:
        return DEADLINE, None
    return verdict, timeout


def forwardable(value: bytes) -> bool:
    """A metadata value a grpc.aio client can send (printable ASCII): grpcio's server takes others,
    and its handlers see them undecoded; the relay leaves them out."""
    return bool(_PRINTABLE.match(value))
