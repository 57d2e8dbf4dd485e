"""``posenc serve``'s operator options: TLS, the bearer token, CORS, the log format and the access
log. The flags are here, their values live in the one settings object (service/core/settings.py, each
also a ``POSENC_*`` variable), and ``uvicorn_options`` turns them into uvicorn.run's arguments.
"""

from __future__ import annotations

import argparse
import ssl

from posenc.engine.core.errors import ConfigError
from posenc.engine.process import logs
from posenc.service.core.settings import CHOICES, ENV_PREFIX, Settings


def add_arguments(p) -> None:
    p.add_argument(
        "--tls-cert",
        metavar="PEM",
        help="serve HTTPS with this certificate chain (with --tls-key; POSENC_TLS_CERT)",
    )
    p.add_argument("--tls-key", metavar="PEM", help="the certificate's private key (POSENC_TLS_KEY)")
    p.add_argument(
        "--auth-token",
        metavar="TOKEN",
        help="require 'Authorization: Bearer TOKEN' on /v1 and /v2; health, readiness, metrics and "
        "docs stay open (POSENC_AUTH_TOKEN, better: a flag shows in ps)",
    )
    p.add_argument(
        "--cors-origins",
        metavar="ORIGINS",
        help="comma-separated origins browsers may call from, or '*' (POSENC_CORS_ORIGINS; "
        "default: no CORS headers)",
    )
    p.add_argument(
        "--log-format",
        choices=CHOICES["log_format"],
        help="text (default) or json: one JSON object a line from every logger (POSENC_LOG_FORMAT)",
    )
    p.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="log every request, hot ones included (default off; POSENC_ACCESS_LOG)",
    )


def overrides(args) -> dict:
    """The settings these flags override (None: not given)."""
    return {
        "tls_cert": args.tls_cert,
        "tls_key": args.tls_key,
        "auth_token": args.auth_token,
        "cors_origins": args.cors_origins,
        "log_format": args.log_format,
        "access_log": args.access_log,
    }


def check_tls(s: Settings) -> None:
    """A certificate and key that do not load stop ``posenc serve`` here, naming them, before any
    worker starts (instead of each worker failing on its own)."""
    if s.tls_cert is None:
        return
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(s.tls_cert, s.tls_key)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(
            f"{ENV_PREFIX}TLS_CERT={s.tls_cert} / {ENV_PREFIX}TLS_KEY={s.tls_key} (--tls-cert / "
            f"--tls-key): cannot load them as a PEM certificate chain and its key: {e}"
        ) from None


def uvicorn_options(s: Settings) -> dict:
    """uvicorn.run's TLS and logging arguments for these settings (the TLS files checked)."""
    check_tls(s)
    return {
        "ssl_certfile": s.tls_cert,
        "ssl_keyfile": s.tls_key,
        "access_log": s.access_log,
        "log_config": logs.uvicorn_config(s.log_format, s.log_level),
    }
