"""The gRPC floors: the cheapest grpcio servers, answering ``ModelInfer`` with the bytes posenc
answered a request with (and ``ModelStreamInfer`` with them once per message), so that a client's
figures on them are everything that is not posenc: the client, the loopback and grpcio's own
per-call cost in Python. posenc's gRPC server minus a floor is what posenc costs.

    python -m posenc.loadtest.floors.grpc_server --port 9001 --response response.bin          # asyncio
    python -m posenc.loadtest.floors.grpc_server --port 9002 --response response.bin --sync   # threads

grpcio has two servers, and neither is the faster at every load: ``grpc.aio`` (one event loop, the
one posenc's gRPC server runs on) and the synchronous ``grpc.server`` (a pool of ``--threads``
threads). Both parse nothing (requests and responses pass as bytes), like
loadtest/floors/asgi_app.py for HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import threading
from concurrent import futures

import grpc

from posenc.service.v2.grpc_server import SERVICE, STREAM_RESPONSE, varint


def _methods(infer, stream) -> grpc.GenericRpcHandler:
    """The service's two methods on bytes in, bytes out (nothing parsed)."""
    same = {"request_deserializer": None, "response_serializer": None}
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "ModelInfer": grpc.unary_unary_rpc_method_handler(infer, **same),
            "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(stream, **same),
        },
    )


def handler(response: bytes) -> grpc.GenericRpcHandler:
    """For grpc.aio: coroutines."""
    streamed = STREAM_RESPONSE + varint(len(response)) + response

    async def infer(request: bytes, context) -> bytes:
        return response

    async def stream(requests, context):
        async for _ in requests:
            yield streamed

    return _methods(infer, stream)


def sync_handler(response: bytes) -> grpc.GenericRpcHandler:
    """handler()'s methods for the synchronous server (called in its threads)."""
    streamed = STREAM_RESPONSE + varint(len(response)) + response

    def infer(request: bytes, context) -> bytes:
        return response

    def stream(requests, context):
        for _ in requests:
            yield streamed

    return _methods(infer, stream)


OPTIONS = [("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", 64 << 20)]


def serve_sync(port: int, response: bytes, threads: int) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=threads), options=OPTIONS)
    server.add_generic_rpc_handlers((sync_handler(response),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(1).wait()


async def serve(port: int, response: bytes) -> None:
    server = grpc.aio.server(options=OPTIONS)
    server.add_generic_rpc_handlers((handler(response),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m posenc.loadtest.floors.grpc_server", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--port", type=int, default=9001)
    p.add_argument("--response", required=True, help="file holding a serialized ModelInferResponse")
    p.add_argument(
        "--sync", action="store_true", help="grpcio's synchronous server (a thread pool), not grpc.aio"
    )
    p.add_argument("--threads", type=int, default=16, help="with --sync: the pool's threads")
    args = p.parse_args(argv)
    with open(args.response, "rb") as f:
        response = f.read()
    if args.sync:
        serve_sync(args.port, response, args.threads)
    else:
        asyncio.run(serve(args.port, response))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
