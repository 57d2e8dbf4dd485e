"""Writes the seed corpus of each fuzz target into tests/fuzz/corpus/<target>/ (checked in; run
again after changing the seeds below: python -m tests.fuzz.make_corpus; it keeps regression-* files). Small on
purpose: valid inputs of each shape and a few edge cases; the fuzzer finds the rest. Files are named by their
content's hash, as libFuzzer names what it adds."""

from __future__ import annotations

import hashlib
import pathlib
import struct

import orjson

SPECS = [  # as tests/fuzz/hot_targets.py SPECS, without importing the shortcut
    ("rope", {"head_dim": 64}),
    ("rope", {"head_dim": 36, "partial_rotary_factor": 0.5, "layout": "interleaved", "dtype": "bfloat16"}),
    ("sinusoidal", {"d_model": 33, "layout": "concat", "offset": 2, "dtype": "float16"}),
    ("sinusoidal", {"d_model": 8}),
    ("alibi", {"num_heads": 12}),
    ("alibi", {"num_heads": 16, "mode": "symmetric", "heads": [0, 3]}),
    ("alibi", {"num_heads": 8, "mask_future": True}),
    ("alibi", {"num_heads": 8, "dtype": "float16"}),
    ("alibi", {"num_heads": 5, "mode": "symmetric", "dtype": "bfloat16"}),
    ("alibi", {"num_heads": 2, "max_bias": 0.5, "mask_future": True, "dtype": "float16"}),
    ("t5-buckets", {"num_buckets": 16, "max_distance": 40}),
]
AXES = [  # as hot_targets.py's per-axis SPECS: bodies with position_ids
    {"head_dim": 64, "mrope_section": [8, 12, 12]},
    {"head_dim": 32, "axes_dim": [8, 8, 16], "layout": "interleaved", "dtype": "float16"},
]
GRID = {
    "embed_dim": 32,
    "grid_size": [600, 700],
    "temporal_size": 5,
    "extra_tokens": 2,
    "interpolation_scale": 1.5,
    "dtype": "bfloat16",
}  # as hot_targets.py's grid: stored per axis
POSITION_IDS = [
    [[0], [7], [511]],
    [[1, 2], [3, 4], [600, 5]],
    [[1], [2]],
    [[1, 2], [3], [4]],
    [[1], [2], [3], [4]],
]
SELECTIONS = [
    [0],
    [7, 1, 511],
    [509, 510],
    {"start": 3, "stop": 9},
    {"start": 0, "stop": 64, "step": 2},
    [600],
    [0, 0, 0],
]
ACCEPT = b"application/x-safetensors"


def bodies() -> list[tuple[str, bytes]]:
    out = []
    for family, spec in SPECS:
        for i, sel in enumerate(SELECTIONS):
            body = (
                {**spec, "positions": sel}
                if family not in ("alibi", "t5-buckets")
                else {**spec, "query": sel, "key": SELECTIONS[(i + 2) % len(SELECTIONS)]}
            )
            out.append((family, orjson.dumps(body)))
    out += [("rope", orjson.dumps({**spec, "position_ids": ids})) for spec in AXES for ids in POSITION_IDS]
    out += [
        ("sinusoidal-grid", orjson.dumps({**GRID, "positions": sel}))
        for sel in SELECTIONS + [[2100001, 0, 1], [2100002]]
    ]  # the grid's last row, and past it
    return out


def request(family: str, body: bytes, head: bytes = b"", accept: bytes = ACCEPT) -> bytes:
    return b"POST /v1/%s HTTP/1.1\r\nhost: t\r\naccept: %s\r\n%scontent-length: %d\r\n\r\n%s" % (
        family.encode(),
        accept,
        head,
        len(body),
        body,
    )


def v2(model: int, rows: list[int], head: bytes = b"") -> bytes:
    body = b'{"inputs":[]}' + struct.pack("<%dq" % len(rows), *rows)
    return (
        b"POST /v2/models/m%d/infer HTTP/1.1\r\nhost: t\r\ninference-header-content-length: 13\r\n%s"
        b"content-length: %d\r\n\r\n%s" % (model, head, len(body), body)
    )


def v2_json(model: int, *lists, head: bytes = b"") -> bytes:
    """A v2 JSON-tensor infer to hot_targets.py's route j<model> (its SPECS index)."""
    body = orjson.dumps({"inputs": [{"data": x} for x in lists]})
    return b"POST /v2/models/j%d/infer HTTP/1.1\r\nhost: t\r\n%scontent-length: %d\r\n\r\n%s" % (
        model,
        head,
        len(body),
        body,
    )


def v2_block(model: int, query: list[int], key: list[int]) -> bytes:
    """A block route's request (hot_targets V2_BLOCK: int64 queries, then int32 keys)."""
    body = b'{"inputs":[]}' + struct.pack("<%dq" % len(query), *query) + struct.pack("<%di" % len(key), *key)
    return (
        b"POST /v2/models/b%d/infer HTTP/1.1\r\nhost: t\r\ninference-header-content-length: 13\r\n"
        b"content-length: %d\r\n\r\n%s" % (model, len(body), body)
    )


def lane() -> list[bytes]:
    out = [request(f, b) for f, b in bodies()[::2]]
    f, b = bodies()[0]
    plain = request(f, b)
    out += [
        request(f, b, b"connection: close\r\n"),
        request(f, b, b"Connection: Keep-Alive\r\n"),
        request(f, b, accept=b"*/*;q=0.1, application/x-safetensors"),
        request(f, b, accept=b"text/html"),
        request(f, b, accept=b"application/json"),
        plain.replace(b"accept: " + ACCEPT + b"\r\n", b""),  # JSON
        *(request(f2, b2, accept=b"application/json") for f2, b2 in bodies()[1::3]),
        *(
            request(f2, b2, accept=b"application/json") for f2, b2 in bodies()[::2] if f2 == "alibi"
        ),  # JSON blocks
        request(
            "alibi",
            b'{"num_heads":12,"query":[2147483647,0],"key":[0,2147483647]}',
            accept=b"application/json",
        ),
        request(
            "alibi",
            b'{"num_heads":2,"max_bias":0.5,"mask_future":true,"dtype":"float16","query":[80000],"key":[0]}',
            accept=b"application/json",
        ),  # a float16 cell that overflows: declined
        plain.replace(b"content-length", b"Content-Length"),
        plain.replace(b"host: t", b"HOST:\tt"),
        plain + plain,
        plain + request(*bodies()[-1]),
        plain[:-3],
        plain.replace(b"host: t", b"transfer-encoding: chunked"),
        plain.replace(b"host: t", b"expect: 100-continue"),
        plain.replace(b"host: t", b"content-length: 0"),
        plain.replace(b"host: t", b"host: t\r\n folded"),
        plain.replace(b"host: t", b"host: a\x00b"),
        plain.replace(b"HTTP/1.1", b"HTTP/1.0"),
        plain.replace(b"/v1/rope", b"/v1/rope?x=1"),
        plain.replace(b"\r\n", b"\n"),
        b"POST /v1/alibi HTTP/1.1\r\ncontent-length: 0\r\naccept: " + ACCEPT + b"\r\n\r\n",
        *(v2(m, rows) for m in range(4) for rows in ([0, 7], [511, 600], [-1, 3])),  # hot_targets V2_ROUTES
        v2(0, [1, 2], b"content-encoding: gzip\r\n"),
        v2(1, [1, 2, 3]),
        v2(0, [1, 2]) + v2(2, [5, 4]),
        # hot_targets V2J routes: rope (SPECS 0, 1), sinusoidal (2, 3), alibi (4 .. 9), t5-buckets (10)
        *(v2_json(m, rows) for m in range(4) for rows in ([0, 7], [511, 600], [3, -1], [1, 2, 3], [1e0, 2])),
        *(
            v2_json(m, q, k)
            for m in range(4, 11)
            for q, k in (
                ([0], [1, 2, 3]),
                ([600], [0, 511, 2**31 - 1]),
                ([1], [2, 3]),
                ([70000], [69999, 70001, 3]),
            )
        ),
        v2_json(0, [1, 2], head=b"content-encoding: gzip\r\n"),
        v2_json(0, [5, 6]) + v2_json(10, [2], [3, 4, 5]),
        v2_json(9, [2**31 - 1], [0, 1, 2]),
        v2_json(4, [5], [-1, 0, 1]),  # a float16 cell that overflows; -1
        v2_json(0, [1, 2]).replace(b'"data":[1,2]', b'"data" : [ 1 ,2 ]'),
        v2_json(0, [[1, 2]]),
        v2_json(0, [1, 2]).replace(b'"data":[1,2]', b'"data":[1,2],"data":[3,4]'),
        *(
            v2_block(m, q, k)
            for m in range(5)
            for q, k in (([7], [0, 1, 2, 3]), ([600], [0, 511, 512, 9]), ([3], [-1, 0, 1, 2]), ([1], [1, 2]))
        ),
    ]
    return out


def answer() -> list[bytes]:
    return [b for _, b in bodies()] + [
        b'{"head_dim":64,"positions":[1,-0]}',
        b'{"head_dim":64,"positions":[01]}',
        b'{"num_heads":12,"query":[1],"key":{"start":0,"stop":2147483648}}',
    ]


def fill() -> list[bytes]:
    out = []
    for t in range(4):
        for isz, fmt in ((4, "<i"), (8, "<q")):
            for positions in ([0], [7, 1, 511], [511, 512], [-1], list(range(70))):
                out.append(
                    bytes([t | (0x80 if isz == 8 else 0)]) + b"".join(struct.pack(fmt, p) for p in positions)
                )
    for t in range(2):  # per-axis templates (0x20): [3, n] positions, axis after axis
        for positions in ([0, 1, 2], [7, 1, 511, 512, 3, 2], [1, 2], [-1, 0, 0], [5, 6, 2**31 - 1]):
            out.append(bytes([0x20 | 0x80 | t]) + b"".join(struct.pack("<q", p) for p in positions))
    for t in range(5):  # block templates (0x30): query and key of int32 or int64, in either order
        for b1, first, second in (
            (0x80, [7], [0, 1, 2, 3, 4, 5, 6, 7]),
            (0x43, [500, 510, 600, 5], [0, 511, 512]),
            (0x01, [3, 1], [-1]),
            (0xC0, [2**31 - 1], [0, 2**31 - 1]),
        ):
            out.append(
                bytes([0x30 | t | (0x80 if t % 2 else 0), b1])
                + struct.pack("<%d%s" % (len(first), "q" if t % 2 else "i"), *first)
                + struct.pack("<%d%s" % (len(second), "q" if b1 & 0x80 else "i"), *second)
            )
    # 4096 rope rows of 2 x 256 bytes, masked into the table: a copy past 1 MiB, without the GIL
    out.append(bytes([0x40]) + b"".join(struct.pack("<i", p * 7) for p in range(4096)))
    return out


def select() -> list[bytes]:
    texts = [
        b"[0]",
        b"[ 3 ,\t1,\n2\r]",
        b"[2147483647, 0]",
        b'{"start": 4, "stop": 9, "step": 2}',
        b'{"stop":3,"start":0}',
        b'{"start":0,"stop":2,"step":null}',
        b'{"start":2147483646,"stop":2147483648}',
        b"[01]",
        b"[1,-0]",
        b"[2147483648]",
        b'{"start":1,"start":0,"stop":3}',
        b"[1e0]",
        b"[]",
        b"{}",
    ]
    return [bytes([flags]) + t for t in texts for flags in (2, 7)]


def h2_client() -> list[bytes]:
    """What a client sends after the preface (python-hyper's h2 writes the frames), byte 0 the
    chunk size: unary calls, a message over the limit, streams, resets, PING, SETTINGS, window
    updates, answers no window lets out (deadlines), trailers, GOAWAY, long headers (CONTINUATION),
    a header list past the harness's bound, a connection gone with bodies unfinished, and a frame
    on a server's stream id."""
    import h2.config
    import h2.connection
    import h2.settings

    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    head = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":authority", b"x"),
        (b"content-type", b"application/grpc"),
    ]

    def conn():
        c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        c.initiate_connection()
        return c

    def call(c, path, data=b"", end=True, extra=()):
        sid = c.get_next_available_stream_id()
        c.send_headers(sid, [*head[:2], (b":path", path), *head[2:], *extra], end_stream=not data and end)
        if data:
            c.send_data(sid, data, end_stream=end)
        return sid

    msg = b"\0\0\0\0\x0b" + b"hello world"
    out = []

    def seed(k, c):
        out.append(bytes([k]) + c.data_to_send()[len(preface) :])

    for k in range(4):
        c = conn()
        call(c, b"/inference.GRPCInferenceService/ModelInfer", msg)
        seed(k, c)
    c = conn()
    call(c, b"/u", b"\0\0\0\0\xc8" + b"x" * 200)  # over the harness's limit of 100
    seed(2, c)
    c = conn()
    sid = call(c, b"/inference.GRPCInferenceService/ModelStreamInfer", msg, end=False)
    c.send_data(sid, msg + msg[:3])
    c.send_data(sid, msg[3:], end_stream=True)
    seed(1, c)
    c = conn()
    sid = call(c, b"/s", msg, end=False)
    c.reset_stream(sid, 8)
    call(c, b"/u", msg)
    seed(3, c)
    c = conn()
    c.ping(b"12345678")
    c.update_settings(
        {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 100, h2.settings.SettingCodes.MAX_FRAME_SIZE: 16384}
    )
    c.increment_flow_control_window(1 << 20)
    call(c, b"/u", msg)
    seed(0, c)
    c = conn()
    for i in range(6):
        call(c, b"/u" if i % 2 else b"/s", msg, end=i % 3 != 0)
    seed(2, c)
    c = conn()  # no window: every answer waits unsent, and those past their deadline are ended (expire)
    c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    for _ in range(6):
        call(c, b"/u", msg)
    seed(0, c)
    c = conn()
    sid = call(c, b"/u", msg, end=False)
    c.send_headers(sid, [(b"x-trailer", b"1")], end_stream=True)
    seed(1, c)
    c = conn()
    call(c, b"/u")
    c.close_connection()
    seed(0, c)
    c = conn()
    call(c, b"/u", msg, extra=[(b"x-long", b"v" * 40000)])
    seed(3, c)
    c = conn()  # byte 0's bit 4: the harness's small header list bound, crossed (a refusal)
    call(c, b"/u", msg, extra=[(f"x-m{i}".encode(), b"v" * 40) for i in range(8)])
    call(c, b"/s", msg, end=False, extra=[(b"x-m", b"v" * 400)])
    seed(4 | 1, c)
    c = conn()  # bit 8: the connection gone midway, unfinished bodies past the kept bound on it
    for _ in range(4):
        call(c, b"/u", b"\0\0\0\0\x50" + b"x" * 70, end=False)
    call(c, b"/s", msg, end=False)
    seed(8 | 2, c)
    c = conn()  # a header list of references to one dynamic-table entry, across CONTINUATION frames
    call(c, b"/u", msg, extra=[(b"x-b", b"b" * 200)] * 120)
    seed(4 | 3, c)
    c = conn()
    call(c, b"/u", msg)
    bad = bytearray(c.data_to_send()[len(preface) :])
    out.append(
        bytes([0]) + bytes(bad) + b"\0\0\x05\x00\x01\0\0\0\x02" + msg[:5]
    )  # DATA on stream 2: a server's id
    return out


def grpc() -> list[bytes]:
    """Serialized ModelInferRequests (one or two raw inputs, a field after them, none, a truncated
    one), each as a plain, framed, compressed-flag, stream and row-template call (byte 0)."""
    from posenc.service.v2.proto import grpc_service_pb2 as pb

    def request(raws: list, **fields) -> bytes:
        r = pb.ModelInferRequest(model_name="rope", id=fields.pop("id", ""), **fields)
        r.parameters["spec"].string_param = '{"head_dim": 64}'
        r.inputs.add(name="positions", datatype="INT64", shape=[1])
        r.raw_input_contents.extend(raws)
        return r.SerializeToString()

    one = request([(5).to_bytes(8, "little")])
    msgs = [
        one,
        request([b"".join(i.to_bytes(4, "little") for i in range(16))]),
        request([(1).to_bytes(8, "little"), (2).to_bytes(8, "little") * 3], id="r"),
        request([b"", b"\x01" * 200]),
        request([b"x"] * 3),
        request([]),
        one + b"\x1a\x01x",
        one[:-1],
        one[:-1] + b"\x80",
        b"\xba\x00\x01x",  # the raw input's tag written in two bytes
    ]
    return [bytes([flags]) + m for m in msgs for flags in (0x00, 0x01, 0x05, 0x02, 0x08, 0x1B)]


TARGETS = {"lane": lane, "answer": answer, "fill": fill, "select": select, "h2": h2_client, "grpc": grpc}


def main() -> None:
    root = pathlib.Path(__file__).parent / "corpus"
    for name, seeds in TARGETS.items():
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        for old in d.iterdir():
            if not old.name.startswith("regression-"):  # found crashes stay
                old.unlink()
        for seed in seeds():
            (d / hashlib.sha1(seed).hexdigest()).write_bytes(seed)


if __name__ == "__main__":
    main()
