"""The gRPC floor: the cheapest grpcio asyncio server, answering ``ModelInfer`` with the bytes
posenc answered a request with (and ``ModelStreamInfer`` with them once per message), so that a
client's figures on it are everything that is not posenc: the client, the loopback and grpcio's
own per-call cost in Python. posenc's gRPC server minus this floor is what posenc costs.

    python -m posenc.loadtest.floors.grpc_server --port 9001 --response response.bin

It parses nothing (requests and responses pass as bytes), like loadtest/floors/asgi_app.py for HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

import grpc

from posenc.service.v2.grpc_server import SERVICE, STREAM_RESPONSE, varint


def handler(response: bytes) -> grpc.GenericRpcHandler:
    streamed = STREAM_RESPONSE + varint(len(response)) + response

    async def infer(request: bytes, context) -> bytes:
        return response

    async def stream(requests, context):
        async for _ in requests:
            yield streamed

    same = {"request_deserializer": None, "response_serializer": None}
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "ModelInfer": grpc.unary_unary_rpc_method_handler(infer, **same),
            "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(stream, **same),
        },
    )


async def serve(port: int, response: bytes) -> None:
    server = grpc.aio.server(
        options=[("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", 64 << 20)]
    )
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
    args = p.parse_args(argv)
    with open(args.response, "rb") as f:
        response = f.read()
    asyncio.run(serve(args.port, response))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
