"""What posenc is measured against, each answering with the bytes posenc answered: the cheapest
ASGI app under uvicorn (asgi_app.py), an asyncio protocol with httptools and no uvicorn
(http_protocol.py), and the cheapest grpcio server (grpc_server.py)."""
