"""Coverage-guided fuzz of gRPC's door (service/shortcut/hot_grpc.c): grpc_cut, the cut of a
serialized ModelInferRequest before its trailing raw_input_contents fields, and grpc_answer, its
lookup, length checks, fill and framing. Byte 0 picks the call: framed (0x01: the 5-byte gRPC prefix
before the message, its flag byte 0x04's bit), a stream message (0x02), the entry filled by a real
RowsTemplate (0x08: the first row template, int64 positions when 0x10, else int32); the rest is the
message. Besides the sanitizers: where protobuf reads the message as its own canonical bytes with 1
or 2 raw inputs, the cut is exactly the bytes before them when they come last (else None); a cut's
tail is exactly those raw fields as protobuf writes them, and protobuf reads the same raw inputs
from the whole message wherever it reads it; an entry under the cut's key is found with those
positions (an entry C does not fill), or answers what fill() answers between the same parts, framed
as the lane's stream message when asked; a compressed or not-whole framed message is declined.

    python -m tests.fuzz.fuzz_grpc tests/fuzz/corpus/grpc
"""

from __future__ import annotations

import sys

from google.protobuf.message import DecodeError

from posenc.service.v2.proto import grpc_service_pb2 as pb  # (protobuf alone: no shortcut)
from tests.fuzz import hot_targets as ht  # before the shortcut: it loads the instrumented one

hot = ht.replay._hot
ROWS = ht.rows_templates()
PARTS = (b"<head>", b"|", b"<tail>")


def _protobuf(msg: bytes):
    """(the key, the raw inputs) protobuf reads from msg when msg is its canonical bytes, else None."""
    try:
        r = pb.ModelInferRequest.FromString(msg)
    except DecodeError:
        return None
    if r.SerializeToString() != msg:
        return None
    raws = list(r.raw_input_contents)
    r.ClearField("raw_input_contents")
    return r.SerializeToString(), raws


def _frame(message: bytes) -> bytes:
    return b"\x00" + len(message).to_bytes(4, "big") + message


def _stream_message(answer: bytes) -> bytes:
    """The lane's ModelStreamInferResponse message holding ``answer`` (its infer_response field, 2,
    as protobuf writes a length-delimited field: the raw input field's bytes with field 2's tag)."""
    field = pb.ModelInferRequest(raw_input_contents=[answer]).SerializeToString()
    return _frame(b"\x12" + field[1:])


def one_input(data: bytes) -> None:
    if not data:
        return
    flags, msg = data[0], data[1:]
    cut = hot.grpc_cut(msg)
    canonical = _protobuf(msg)
    if canonical is not None and 1 <= len(canonical[1]) <= 2:
        key, raws = canonical
        tail = pb.ModelInferRequest(raw_input_contents=raws).SerializeToString()
        assert cut == ((len(key), tuple(map(len, raws))) if msg == key + tail else None), msg
    if cut is None:
        return
    start, lens = cut
    assert 1 <= len(lens) <= 2 and start + sum(lens) < len(msg), msg
    tail = pb.ModelInferRequest.FromString(msg[start:])
    assert tail.SerializeToString() == msg[start:] and tuple(map(len, tail.raw_input_contents)) == lens
    raws = list(tail.raw_input_contents)
    try:
        assert list(pb.ModelInferRequest.FromString(msg).raw_input_contents) == raws, msg
    except DecodeError:  # the bytes before the cut: whole fields, not all of them valid protobuf
        pass
    framed, stream = bool(flags & 1), bool(flags & 2)
    data = (bytes([flags >> 2 & 1]) + len(msg).to_bytes(4, "big") + msg) if framed else msg
    kw = {"framed": framed, "stream": stream, "counts": None, "buckets": b""}
    t = ROWS[0][0]
    isz = 8 if flags & 0x10 else 4
    rows = flags & 8 and len(lens) == 1 and ROWS[0][1] == 2
    fill = hot.RowsEntry(template=t, itemsize=isz, nbytes=lens[0], parts=PARTS, post=b"") if rows else None
    e = hot.GrpcEntry(fill=fill, nbytes=lens, size=len(msg), metrics=-1, stream_metrics=-1, entry="e")
    answer = lambda most: hot.grpc_answer(data, {msg[:start]: e}, most=most, **kw)  # noqa: E731
    if framed and flags & 4:
        assert answer(1 << 30) is None  # compressed: the full path decodes it
        return
    if fill is None:
        assert answer(1 << 30) == answer(-1) == ("e", raws[0] if len(raws) == 1 else tuple(raws)), msg
        return
    try:
        want = ht.replay.fill(t, raws[0], isz, PARTS)
    except ValueError:  # not a whole, non-zero number of positions: fill() and the door say so alike
        try:
            answer(1 << 30)
        except ValueError:
            return
        raise AssertionError(msg) from None
    assert answer(1 << 30) == (_stream_message(want) if stream and want is not None else want), msg


if __name__ == "__main__":
    import atheris  # here: tests/fuzz/test_corpus.py replays one_input without it

    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
