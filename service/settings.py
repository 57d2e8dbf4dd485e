"""Service settings: one frozen object, read from ``POSENC_*`` environment variables and
overridden by ``posenc serve`` flags. An unknown or malformed value is an error at start-up,
never a guess."""

from __future__ import annotations

import dataclasses
import os

# Paths and port the container image, the manifests and the tests agree on.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
METRICS_PATH = "/metrics"
ENV_PREFIX = "POSENC_"


def _default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


@dataclasses.dataclass(frozen=True)
class Settings:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    workers: int = dataclasses.field(default_factory=_default_workers)
    # Table config (JSON file); None means the embedded default set.
    tables: str | None = None
    # Directory holding the shared-memory segments and the manifest.
    shm_dir: str = "/dev/shm"
    # Name prefix of this engine's segments (several engines may share one shm_dir).
    namespace: str = "posenc"
    # Largest response, all arrays together (API.md: 64 MiB by default) -> 413 above it.
    max_response_bytes: int = 64 * 2**20
    # Most positions in one selection (query, key or positions) -> 413 above it.
    max_positions: int = 1 << 20
    # Largest request body accepted -> 413 above it.
    max_body_bytes: int = 4 * 2**20
    # Seconds a request may wait for an on-demand build before 503.
    build_timeout_s: float = 60.0
    # Seconds uvicorn keeps idle keep-alive connections; graceful shutdown budget.
    keepalive_s: int = 5
    shutdown_timeout_s: int = 10
    # Shared-memory budget for on-demand tables (bytes); pinned default tables do not count.
    memory_budget_bytes: int = 2 * 2**30
    # Unix group that may read the segments (None: owner only, mode 0600).
    shm_group: str | None = None
    log_level: str = "info"

    @classmethod
    def from_env(cls, environ=None, **overrides) -> "Settings":
        environ = os.environ if environ is None else environ
        kwargs = {}
        for f in dataclasses.fields(cls):
            raw = environ.get(ENV_PREFIX + f.name.upper())
            if raw is None or raw == "":
                continue
            kwargs[f.name] = _parse(f, raw)
        kwargs.update({k: v for k, v in overrides.items() if v is not None})
        s = cls(**kwargs)
        s.validate()
        return s

    def validate(self) -> None:
        if not (0 < self.port < 65536):
            raise ValueError(f"{ENV_PREFIX}PORT: must be in 1..65535, got {self.port}")
        for name in ("workers", "max_response_bytes", "max_positions", "max_body_bytes",
                     "memory_budget_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{ENV_PREFIX}{name.upper()}: must be >= 1, got {getattr(self, name)}")
        if self.build_timeout_s <= 0:
            raise ValueError(f"{ENV_PREFIX}BUILD_TIMEOUT_S: must be > 0")
        if self.log_level not in ("critical", "error", "warning", "info", "debug", "trace"):
            raise ValueError(f"{ENV_PREFIX}LOG_LEVEL: unknown level {self.log_level!r}")


def _parse(field: dataclasses.Field, raw: str):
    name = ENV_PREFIX + field.name.upper()
    typ = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    try:
        if typ.startswith("int"):
            return int(raw)
        if typ.startswith("float"):
            return float(raw)
    except ValueError:
        raise ValueError(f"{name}: expected a number, got {raw!r}") from None
    return raw
