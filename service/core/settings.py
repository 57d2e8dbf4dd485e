"""Settings of the service: the engine's (engine/core/settings.py) and the HTTP and gRPC fields,
one frozen object read from ``POSENC_*`` environment variables and overridden by ``posenc serve``'s
flags. A malformed value is an error at start-up naming the variable, never a guess.

``current()`` is this process's settings, read once; the HTTP workers and the gRPC processes start
from it. ``posenc serve`` installs its flag-overridden settings with ``use()``, which also exports
them for its child processes (the engine reads its own fields of the same variables).
"""

from __future__ import annotations

import dataclasses
import os
import re

from posenc.engine.core import settings as engine_settings
from posenc.engine.core.errors import ConfigError
from posenc.engine.core.settings import ENV_PREFIX

__all__ = ["CHOICES", "ENV_PREFIX", "Settings", "current", "use"]

# Paths and port the container image, the manifests and the tests agree on.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_GRPC_PORT = 8001  # KServe v2 over gRPC (docs/kserve.md); 0 turns it off
HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
METRICS_PATH = "/metrics"

# Request headers that keep a request off the hot lane (service/protocol/lane.py, and the C
# lane in service/shortcut, which is handed this tuple): each changes how the request is read or
# answered (a 100-continue, a chunked body, a protocol switch, a proxy's hop-by-hop instruction),
# which httptools and ASGI handle. Lower-case names.
LANE_OFF_HEADERS = ("expect", "proxy-connection", "transfer-encoding", "upgrade")

# Answers built on the event loop up to these sizes, larger ones in a thread (a hop costs ~50 us):
# a binary body is a copy of rows (1 MiB: ~0.1 ms); JSON text costs ~20-200 ns a cell (64 KiB of
# text: < 1 ms). /v1 (service/front/service.py) and KServe v2 (service/v2/infer.py) alike.
INLINE_BYTES = 1 << 20
INLINE_JSON_BYTES = 64 << 10

# The accepted values of the fields that are choices: the engine's, and these (the names exist
# only in the two modules).
CHOICES = {
    **engine_settings.CHOICES,
    # service/shortcut/templates.py: the hot path's template shortcut. auto = C when service._hot is built
    # and the kernel backend is simd, else off; c = C or refuse to start; off = the full path only
    "shortcut": ("auto", "c", "off"),
    # service/protocol/lane.py: the hot lane below ASGI, which answers the shortcut's requests straight
    # from uvicorn's HTTP protocol (on only where the shortcut is in use)
    "lane": ("on", "off"),
    # service/grpclane: the gRPC lane (HTTP/2 on libnghttp2) owning the gRPC port, grpcio behind it;
    # auto = on where service/grpclane/_h2 is built and no TLS is configured, else grpcio alone
    "grpc_lane": ("auto", "off"),
}

# RFC 6750's b64token: what an ``Authorization: Bearer`` header can carry.
_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


def _default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


@dataclasses.dataclass(frozen=True)
class Settings(engine_settings.Settings):
    choices = CHOICES

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    workers: int = dataclasses.field(default_factory=_default_workers)
    # gRPC (service/v2): its port on the same host (0: no gRPC server) and its processes, which
    # share the port (SO_REUSEPORT): one that dies loses only its calls in flight
    grpc_port: int = DEFAULT_GRPC_PORT
    grpc_workers: int = 2
    grpc_lane: str = "auto"  # CHOICES
    # Per gRPC process (service/v2/admit.py): inference calls answered at once, and bytes of the
    # answers they will send (planned before they are built); RESOURCE_EXHAUSTED beyond either.
    grpc_max_concurrent: int = 64
    grpc_max_inflight_bytes: int = 256 * 2**20
    # Largest response, all arrays together (docs/reference.md: 64 MiB by default) -> 413 above it.
    max_response_bytes: int = 64 * 2**20
    # Most positions in one selection (query, key or positions) -> 413 above it.
    max_positions: int = 1 << 20
    # Largest request body accepted -> 413 above it.
    max_body_bytes: int = 4 * 2**20
    # Seconds a request may wait for an on-demand build before 503.
    build_timeout_s: float = 60.0
    # Seconds uvicorn keeps idle keep-alive connections: longer than common clients keep an idle
    # pooled connection before reusing it (httpx 5 s, aiohttp 15 s, load balancers' 60 s) so
    # that the client, not the server, closes it; a server closing it as a pooled client reuses it
    # fails that request (docs/deploy.md). Graceful shutdown budget (SIGTERM: stop accepting,
    # finish the requests in flight for up to this long, then exit).
    keepalive_s: int = 75
    shutdown_timeout_s: int = 10
    # Per worker (service/protocol/limits.py): seconds to receive a request's head (408 after), then its
    # body (closed after); open connections (503 and closed beyond; also kept under
    # RLIMIT_NOFILE); bytes of a request head (431 beyond).
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 1024
    max_header_bytes: int = 64 * 2**10
    # KServe v2 system shared memory (service/v2/shm.py): regions registered per server, all
    # processes together (a registration past it: 400 / RESOURCE_EXHAUSTED); region descriptors
    # each server process keeps open (least recently used closed first).
    max_shm_regions: int = 1024
    open_shm_regions: int = 64
    # The hot path's shortcut and the hot lane: see CHOICES.
    shortcut: str = "auto"
    lane: str = "on"
    # TLS for the HTTP port (and any other listener that serves requests): PEM files, both or neither.
    tls_cert: str | None = None
    tls_key: str | None = None
    # Bearer token required on /v1 and /v2 (service/core/auth.py); None: open. Never shown in a repr.
    auth_token: str | None = dataclasses.field(default=None, repr=False)
    # Origins allowed by CORS, comma-separated ("*": any); None: no CORS headers.
    cors_origins: str | None = None
    # uvicorn's access log: one line per request, hot ones included.
    access_log: bool = False

    def validate(self) -> None:
        if not (0 < self.port < 65536):
            raise ConfigError(f"{ENV_PREFIX}PORT: must be in 1..65535, got {self.port}")
        if not (0 <= self.grpc_port < 65536) or self.grpc_port == self.port:
            raise ConfigError(
                f"{ENV_PREFIX}GRPC_PORT: must be 0 (off) or in 1..65535 and not the HTTP port "
                f"{self.port}, got {self.grpc_port}"
            )
        for name in (
            "workers",
            "grpc_workers",
            "grpc_max_concurrent",
            "grpc_max_inflight_bytes",
            "max_response_bytes",
            "max_positions",
            "max_body_bytes",
            "max_connections",
            "max_header_bytes",
            "max_shm_regions",
            "open_shm_regions",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{ENV_PREFIX}{name.upper()}: must be >= 1, got {getattr(self, name)}")
        for name in ("build_timeout_s", "header_timeout_s", "body_timeout_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{ENV_PREFIX}{name.upper()}: must be > 0, got {getattr(self, name)}")
        super().validate()
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError(f"{ENV_PREFIX}TLS_CERT and {ENV_PREFIX}TLS_KEY: give both or neither")
        if self.auth_token is not None and not _TOKEN.fullmatch(self.auth_token):
            raise ConfigError(
                f"{ENV_PREFIX}AUTH_TOKEN: not a bearer token (RFC 6750: letters, digits and "
                "-._~+/ then optional '=' padding)"
            )
        if self.cors_origins is not None and not self.cors_origin_list:
            raise ConfigError(f"{ENV_PREFIX}CORS_ORIGINS: no origin given")

    @property
    def cors_origin_list(self) -> list[str]:
        return [o.strip() for o in (self.cors_origins or "").split(",") if o.strip()]


def current() -> Settings:
    """This process's settings: ``POSENC_*`` read at the first call, or what ``use`` installed;
    the engine's code in this process reads the same object (engine/core/settings.py)."""
    s = engine_settings.current()
    if not isinstance(s, Settings):  # the engine's read first (the kernels, at import): same variables
        s = engine_settings.use(Settings.from_env(), export=False)
    return s


def use(settings: Settings) -> Settings:
    """Install ``settings`` as this process's (posenc serve, after its flags) and export them for
    the processes it starts. The kernel backend was chosen at import and does not change."""
    return engine_settings.use(settings)
