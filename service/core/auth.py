"""Who may call: the bearer token on /v1 and /v2, and CORS.

The token (``auth_token``, ``--auth-token`` or ``POSENC_AUTH_TOKEN``): every request whose path is
under /v1 or /v2 must carry ``Authorization: Bearer <token>``. /healthz, /readyz and /metrics stay
open (probes and scrapers carry no token), and so do /docs and /openapi.json (they describe the
API; they answer nothing). The comparison is constant-time: ``hmac.compare_digest`` of SHA-256
digests, so neither the token's bytes nor its length shows in the timing. A refusal is 401 with
``WWW-Authenticate: Bearer`` and a JSON ``detail`` (service/core/errors.py ``Unauthorized``).

Every way in asks the one ``Gate``:
- the raw-ASGI front (service/front/front.py) before its C shortcut and before the full path; the
  FastAPI routes sit behind the front, so /v1/tables and any /v2 route are covered by its path
  rule;
- the hot lane below ASGI (service/protocol/lane.py) admits only requests the gate allows; the others go on
  through ASGI, where the front refuses them;
- a front of its own (e.g. gRPC) calls ``Gate.check`` with its ``authorization`` value.
Without a token there is no gate (``None``), and the hot paths pay one attribute check.

CORS (``cors_origins``): Starlette's CORSMiddleware around the whole app, raw front and FastAPI
alike, outside the gate: a browser's preflight carries no token and must be answered, and a 401
must carry the CORS headers for the page to read it. The middleware touches every response (it
adds ``Vary: Origin`` even to a request without ``Origin``), so with CORS on the hot lane below
ASGI is off (the app factory registers no front for it) and every answer passes through the
middleware, the raw front's C shortcut included: the same headers whichever path answers.
"""

from __future__ import annotations

import hashlib
import hmac

from posenc.service.core.errors import Unauthorized, error_response
from posenc.service.core.settings import Settings

GUARDED = ("/v1", "/v2")
_MISSING = error_response(Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'"))[1]
_INVALID = error_response(Unauthorized("invalid bearer token"))[1]
_CHALLENGE = {_MISSING: b'Bearer realm="posenc"', _INVALID: b'Bearer realm="posenc", error="invalid_token"'}


def guarded(path: str) -> bool:
    """Whether a path needs the token (when one is set): /v1, /v2 and everything under them."""
    for p in GUARDED:
        if path.startswith(p) and (len(path) == len(p) or path[len(p)] == "/"):
            return True
    return False


class Gate:
    """The bearer-token check of one process (``gate_for``)."""

    def __init__(self, token: str):
        self._digest = hashlib.sha256(token.encode("ascii")).digest()

    def check(self, authorization: bytes | None) -> bool:
        """Whether an ``Authorization`` value (None: absent) carries the token."""
        if authorization is None:
            return False
        scheme, _, credentials = authorization.strip().partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(
            hashlib.sha256(credentials.strip()).digest(), self._digest
        )

    def allows(self, headers) -> bool:
        """Whether ASGI headers (lower-case byte names) carry the token."""
        return self.check(authorization(headers))

    async def refuse(self, headers, send) -> None:
        """Send the 401 for these request headers (missing or invalid token)."""
        body = _MISSING if authorization(headers) is None else _INVALID
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", b"%d" % len(body)),
                    (b"www-authenticate", _CHALLENGE[body]),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def authorization(headers) -> bytes | None:
    for name, value in headers:
        if name == b"authorization":
            return value
    return None


def gate_for(settings: Settings) -> Gate | None:
    return Gate(settings.auth_token) if settings.auth_token else None


def with_cors(app, settings: Settings):
    """``app`` behind CORSMiddleware when origins are configured, else ``app`` itself."""
    origins = settings.cors_origin_list
    if not origins:
        return app
    from starlette.middleware.cors import CORSMiddleware

    return CORSMiddleware(
        app,
        allow_origins=origins,
        allow_methods=["GET", "POST"],
        allow_headers=["authorization", "content-type", "accept"],
        expose_headers=["x-posenc-worker"],
        max_age=600,
    )
