"""Coverage-guided fuzz of the gRPC lane's HTTP/2 session (service/grpclane/_h2.c, on libnghttp2):
the input is what a client sends after the connection preface, fed to a server Session in chunks
(byte 0 picks the chunk size), and every stream the session reports is answered as the lane
answers (a whole unary answer, headers then DATA then trailers, a Trailers-Only refusal, a reset,
writes to a stream already gone), with send() after each read. Byte 0 also picks a small header
list bound (refusals) and whether the session is closed midway (the connection gone). Besides ASan
and UBSan: every event has its documented shape, a unary body is cut at the session's limit with its
true length given, a stream ended or reset is never reported again, and once the Session is gone
nothing it held is left (``_h2.live()``: its streams, their header lists, bodies and answers, and
nghttp2's own blocks, counted through its allocator). .ci/fuzz runs it under LeakSanitizer too
(libFuzzer's per-input leak check); ``POSENC_FUZZ_CANARY=1`` leaks 48 bytes an input on purpose, the
canary by which .ci/fuzz proves that check is on.

    python -m tests.fuzz.fuzz_h2 tests/fuzz/corpus/h2
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
UNARY = frozenset([b"/inference.GRPCInferenceService/ModelInfer", b"/u"])
MAX_MESSAGE = 100
MAX_REQUEST = 250  # unary bodies kept, all streams: past it the connection's window stays shut
CHUNKS = (1, 7, 64, 1 << 20)
CANARY = os.environ.get("POSENC_FUZZ_CANARY") == "1"


def _session_module():
    path = os.environ.get("POSENC_FUZZ_H2")
    if not path:
        from posenc.service.grpclane import _h2

        return _h2
    spec = importlib.util.spec_from_file_location("posenc.service.grpclane._h2", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


h2 = _session_module()
DUE = 3.0  # expire()'s clock: the deadlines 1-3 have passed, 4-6 not
EXPIRED = [(b"grpc-status", b"4"), (b"grpc-message", b"Deadline Exceeded")]


def _answer(s, ev, k: int) -> None:
    sid = ev[1]
    way = (sid + k) % 5
    if k % 3 == 0:  # a deadline, past or not by the time _run's expire() looks (DUE)
        assert s.deadline(sid, float(1 + k % 6)) in (True, False)  # (False: reset since)
    if way == 0:
        s.answer(sid, [(b"x-a", b"1")] if k & 1 else (), b"m" * (k % 300))
    elif way == 1:
        s.start(sid, [(b":status", b"200"), (b"content-type", b"application/grpc")])
        s.write(sid, b"\0\0\0\0\3abc" * (1 + k % 50000 // 1000))
        s.finish(sid, [(b"grpc-status", b"0")])
    elif way == 2:
        s.only(sid, [(b":status", b"200"), (b"grpc-status", b"3"), (b"grpc-message", b"bad%20x")])
    elif way == 3:
        s.reset(sid, 8)
    else:
        s.start(sid, [(b":status", b"200")])  # left open: written to later, or never
    assert s.write(sid, b"late") in (True, False) and s.reset(sid, 2) in (True, False)


def one_input(data: bytes) -> None:
    if not data:
        return
    size, rest = CHUNKS[data[0] & 3], data[1:]
    max_header = 300 if data[0] & 4 else 16384
    close_at = len(rest) // 2 if data[0] & 8 else -1
    before = h2.live()  # any other Session of the process (the suite's replay) is left as it is
    s = h2.Session(UNARY, MAX_MESSAGE, 16, 65535, max_header, MAX_REQUEST)
    _run(s, size, rest, close_at)
    assert s.held[0] == s.open_streams >= 0 and s.held[1] >= 0 and s.held[2] == s.buffered >= 0, s.held
    del s
    assert h2.live() == before, (h2.live(), before)  # nothing the Session held outlives it
    if CANARY:  # never freed: LeakSanitizer must report it
        ctypes.CDLL(None).malloc(48)


def _run(s, size: int, rest: bytes, close_at: int) -> None:
    gone: set[int] = set()
    k = 0
    stream = PREFACE + rest
    for at in range(0, len(stream), size):
        if 0 <= close_at <= at:  # the connection is gone: everything is freed now
            s.close()
            assert s.held == (0, 0, 0) and s.done and s.send() == b"", s.held
            return
        try:
            events = s.recv(stream[at : at + size])
        except h2.Error:
            s.send()  # nghttp2's GOAWAY
            break
        for ev in events:
            kind, sid = ev[0], ev[1]
            assert isinstance(sid, int) and sid > 0 and sid % 2 == 1, ev
            assert sid not in gone, ev
            if kind == "call":
                _, _, path, headers, body, total = ev
                assert path in UNARY and type(body) is bytes and len(body) <= MAX_MESSAGE, ev
                assert total == len(body) or (total > len(body) == MAX_MESSAGE), ev
                assert all(type(n) is bytes and type(v) is bytes for n, v in headers), ev
                _answer(s, ev, k)
            elif kind == "open":
                assert ev[2] not in UNARY and type(ev[3]) is list, ev
                _answer(s, ev, k)
            elif kind == "data":
                assert type(ev[2]) is bytes, ev
            elif kind in ("end", "closed"):
                if kind == "closed":
                    gone.add(sid)
                    assert s.write(sid, b"x") is False
            else:
                raise AssertionError(ev)
            k += 1
        ended, due = s.expire(DUE, EXPIRED)  # the answers unsent past their deadline, ended
        assert ended >= 0 and (due is None or due > DUE), (ended, due)
        try:
            s.send()
        except h2.Error:
            break
    assert isinstance(s.done, bool) and s.open_streams >= 0
    s.shutdown()
    s.goaway()
    try:
        s.send()
    except h2.Error:
        pass


if __name__ == "__main__":
    import atheris  # here: tests/fuzz/test_corpus.py replays one_input without it

    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
