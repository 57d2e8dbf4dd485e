"""Coverage-guided fuzz of the hot lane's whole-request parser (service/shortcut/hot_lane.c
``lane``): an input is the bytes of a connection's buffer, answered against real learnt templates
of rope, sinusoidal and ALiBi. Besides the sanitizers, each input is held to:

- anything the lane reads as a whole plain request (a tuple: answered; False: declined) httptools
  reads as the same request: POST, the same target and body, no parse error, keep-alive alike;
- a v2 REST infer's answer is the v2 head around its entry's parts and fill()'s rows; a JSON-tensor
  infer's, the JSON head around its parts and the pipeline's values (service/v2/rest.py's flat lists);
- an answer is the HTTP head the lane is given for its format around answer()'s bytes for the
  same body (a JSON answer: the full path's JSON), and those are the full path's bytes; a
  safetensors decline is answer()'s None.

    python tests/fuzz/fuzz_lane.py tests/fuzz/corpus/lane   (.ci/fuzz runs it; see README.md)
"""

from __future__ import annotations

import sys

import httptools  # noqa: E402
import numpy as np  # noqa: E402

from posenc.service.metrics.layout import BUCKETS_F64, SHAPE  # noqa: E402
from tests.fuzz import hot_targets as ht  # first: it loads the instrumented shortcut


class _Reader:
    def __init__(self):
        self.url, self.body, self.headers, self.done, self.keep_alive = b"", b"", [], 0, None
        self.parser = None

    def on_headers_complete(self):  # where uvicorn asks it
        self.keep_alive = self.parser.should_keep_alive()

    def on_url(self, url):
        self.url += url

    def on_header(self, name, value):
        self.headers.append((name.lower(), value))

    def on_body(self, body):
        self.body += body

    def on_message_complete(self):
        self.done += 1


def httptools_reads(data: bytes, start: int) -> tuple[_Reader, httptools.HttpRequestParser]:
    """httptools' reading of the request at data[start:]: its head, then as many bytes of body as
    its own Content-Length says (the bytes after it are the next request's)."""
    r = _Reader()
    p = r.parser = httptools.HttpRequestParser(r)
    head_end = data.index(b"\r\n\r\n", start) + 4
    try:
        p.feed_data(data[start:head_end])
        length = [int(v) for n, v in r.headers if n == b"content-length"]
        assert len(length) == 1, f"the lane took a request without one Content-Length: {data!r}"
        p.feed_data(data[head_end : head_end + length[0]])
    except httptools.HttpParserUpgrade:
        raise AssertionError(f"httptools reads an upgrade in what the lane took: {data!r}") from None
    except httptools.HttpParserError as exc:
        raise AssertionError(f"httptools refuses what the lane took ({exc}): {data!r}") from exc
    return r, p


def check_v2(r, out: bytes, keep_alive: bool) -> None:
    """A v2 answer: its entry's parts around fill()'s rows of the positions after the header (a
    block entry's: fill_block()'s block of its two inputs); a JSON-tensor infer's (no length
    header): its parts around the pipeline's values as flat lists."""
    close = b"" if keep_alive else b"connection: close\r\n"
    if r.url in ht.V2J_SPECS:
        assert not any(k in (b"inference-header-content-length", b"content-encoding") for k, _ in r.headers)
        want = ht.v2_json_answer(r.url, r.body)
        assert want is not None, f"lane answered a JSON-tensor infer the full path refuses: {r.body!r}"
        assert out == ht.PRE[1] + b"%d" % len(want) + ht.V2J_POST + close + b"\r\n" + want, r.body
        return
    entry = ht.V2_ROUTES[r.url].entries[ht.V2_HEAD]
    n = [int(v) for k, v in r.headers if k == b"inference-header-content-length"]
    if isinstance(entry, ht.replay.BlockEntry):  # hot_blocks.c: its two inputs, fill_block()'s block
        (nb1, nb2), post = entry.nbytes, entry.post
        want = ht.replay.fill_block(
            entry.template,
            r.body[n[0] : n[0] + nb1],
            r.body[n[0] + nb1 :],
            entry.itemsizes,
            entry.key_first,
            entry.parts,
        )
        nbytes = nb1 + nb2
    else:
        nbytes, post = entry.nbytes, entry.post
        want = ht.replay.fill(entry.template, r.body[n[0] :], entry.itemsize, entry.parts)
    assert n == [len(ht.V2_HEAD)] and r.body[: n[0]] == ht.V2_HEAD and len(r.body) - n[0] == nbytes, r.body
    assert not any(k == b"content-encoding" for k, _ in r.headers)
    assert want is not None, r.body
    assert out == ht.PRE[2] + b"%d" % len(want) + post + close + b"\r\n" + want


def _lane(close: bool) -> dict:
    """lane()'s arguments after data and start, by name."""
    return {
        "routes": ht.LANE_ROUTES,
        "accepts": ht.ACCEPTS,
        "native": ht.TEMPLATES.native,
        "pre": ht.PRE,
        "post": ht.POST,
        "close": close,
    }


def check(data: bytes, start: int, close: bool) -> None:
    got = ht.hot.lane(data, start, **_lane(close))
    if got is NotImplemented:  # a header to compute first: as the service calls it
        got = ht.replay.answer_request(
            data, start, ht.LANE_ROUTES, ht.ACCEPTS, ht.TEMPLATES.native, ht.PRE, ht.POST, close
        )
    if got is None:
        return
    if got is False:
        head_end = data.index(b"\r\n\r\n", start) + 4
        r, p = httptools_reads(data, start)
        assert r.done >= 1 and p.get_method() == b"POST", data
        if r.url in ht.V2_ROUTES:
            return
        family = ht.ROUTES[r.url][0]
        accept = [v for n, v in r.headers if n == b"accept"]
        if accept and len(r.body) <= ht.replay.current().max_body_bytes:
            assert ht.answer(r.body, family, accept[0]) is None, (
                f"lane declined what answer() answers: {data!r}"
            )
        assert data[head_end : head_end + len(r.body)] == r.body
        return
    end, route, out, keep_alive = got
    assert start < end <= len(data)
    head_end = data.index(b"\r\n\r\n", start) + 4
    r, p = httptools_reads(data, start)
    assert r.done == 1 and p.get_method() == b"POST" and p.get_http_version() == "1.1", data
    assert (ht.ROUTES.get(r.url) or ht.V2_ROUTES[r.url]) == route, data
    assert r.body == data[head_end:end], data
    assert keep_alive == (r.keep_alive and not close), data
    if isinstance(route, ht.replay.V2Route):
        return check_v2(r, out, keep_alive)
    accept = [v for n, v in r.headers if n == b"accept"]
    assert len(accept) <= 1, data
    fmt = ht.ACCEPTS[accept[0] if accept else None]
    if fmt == 0:
        want = ht.answer(r.body, route[0], accept[0])
        assert want is not None, f"lane answered what answer() declines: {data!r}"
        ht.check_answer(r.body, route[0], want)
    else:
        want = ht.full_path(route[0], r.body, "json")
        assert want is not None, f"lane answered in JSON what the full path refuses: {data!r}"
    assert out == (
        ht.PRE[fmt]
        + b"%d" % len(want)
        + ht.POST
        + (b"" if keep_alive else b"connection: close\r\n")
        + b"\r\n"
        + want
    ), data


_FLOW = type("Flow", (), {"write_paused": False})()
_COUNTS = (bytearray(8 * int(np.prod(SHAPE))), BUCKETS_F64)
_READER = ht.hot.Reader(
    **{k: v for k, v in _lane(False).items() if k not in ("pre", "close")},
    counts=_COUNTS[0],
    buckets=_COUNTS[1],
    again=None,
    fresh=lambda: True,
    every=1e9,
)


def check_serve(data: bytes) -> None:
    """A connection's Reader over the whole buffer: the answers lane() gives one request after another."""
    out: list[bytes] = []
    at, done, state, error = _READER.bind(out.append, _FLOW)(data, ht.PRE, 0.0)
    assert error is None, (error, data)
    want, pos, why = [], 0, ht.replay.SERVE_DONE
    while pos < len(data):
        got = ht.hot.lane(data, pos, **_lane(False))
        if type(got) is not tuple:
            why = {None: ht.replay.SERVE_NOT_REQUEST, False: ht.replay.SERVE_DECLINED}.get(
                got, ht.replay.SERVE_AGAIN
            )
            break
        pos, _, answer, keep_alive = got
        want.append(answer)
        if not keep_alive:
            why = ht.replay.SERVE_CLOSED
            break
    assert (at, done, state, out) == (pos, len(want), why, want), data


def one_input(data: bytes) -> None:
    check(data, 0, False)
    check_serve(data)
    if data:  # the same bytes after a previous request's end, closing
        check(b"\r\n" * (data[0] & 3) + data, 2 * (data[0] & 3), True)


if __name__ == "__main__":
    import atheris  # here: tests/fuzz/test_corpus.py replays one_input without it

    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
