"""Settings of the engine: one frozen object, read from ``POSENC_*`` environment variables (here
and in its service subclass only) and overridden by command-line flags. A malformed value is an
error at start-up naming the variable, never a guess.

``current()`` is this process's settings, read once; the kernel backend is chosen from it at
import (engine/kernels) and the engine process starts from it. The service's settings
(service/core/settings.py) are a subclass with the HTTP and gRPC fields: ``posenc serve`` installs
its flag-overridden ones with ``use()``, which also exports them for its child processes, and the
engine code in the same process reads its fields from that same object.
"""

from __future__ import annotations

import dataclasses
import os

from .errors import ConfigError

ENV_PREFIX = "POSENC_"

# The accepted values of the fields that are choices (the names exist only here).
CHOICES = {
    # engine/kernels: auto = the C SIMD extension if it imports, else numpy (the reference path)
    "backend": ("auto", "numpy", "simd"),
    "log_level": ("critical", "error", "warning", "info", "debug", "trace"),
    # engine/process/logs.py: text (uvicorn's lines) or json (one JSON object a line, every logger)
    "log_format": ("text", "json"),
}


@dataclasses.dataclass(frozen=True)
class Settings:
    # the accepted values of this class's choice fields (a subclass adds its own)
    choices = CHOICES

    # Table config (JSON file); None means the embedded default set.
    tables: str | None = None
    # Directory holding the shared-memory segments and the manifest.
    shm_dir: str = "/dev/shm"
    # Name prefix of this engine's segments (several engines may share one shm_dir).
    namespace: str = "posenc"
    # Shared-memory budget for on-demand tables (bytes); pinned default tables do not count.
    memory_budget_bytes: int = 2 * 2**30
    # Unix group that may read the segments (None: owner only; segments 0400, else 0440).
    shm_group: str | None = None
    # Seconds between two checksum sweeps of every segment by the engine (0: never); a missing or
    # replaced segment is noticed within a second whatever this is (engine/process/upkeep.py).
    verify_interval_s: float = 60.0
    log_level: str = "info"
    # The kernel backend: see CHOICES.
    backend: str = "auto"
    log_format: str = "text"

    @classmethod
    def from_env(cls, environ=None, **overrides) -> Settings:
        """From ``environ`` (default: the process environment), then the non-None overrides."""
        environ = os.environ if environ is None else environ
        kwargs = {}
        for f in dataclasses.fields(cls):
            raw = environ.get(ENV_PREFIX + f.name.upper())
            if raw is None or raw == "":
                continue
            kwargs[f.name] = _parse(f, raw)
        return cls(**kwargs).override(**overrides)

    def override(self, **overrides) -> Settings:
        """A copy with the non-None ``overrides`` (command-line flags) applied, validated."""
        s = dataclasses.replace(self, **{k: v for k, v in overrides.items() if v is not None})
        s.validate()
        return s

    def validate(self) -> None:
        if self.memory_budget_bytes < 1:
            raise ConfigError(
                f"{ENV_PREFIX}MEMORY_BUDGET_BYTES: must be >= 1, got {self.memory_budget_bytes}"
            )
        ns = (
            self.namespace
        )  # the rule of engine/store/segments.py check_namespace: segment names are built from it
        if not ns or len(ns) > 64 or not all(c.isalnum() or c in "_-" for c in ns):
            raise ConfigError(
                f"{ENV_PREFIX}NAMESPACE (--namespace): must be 1-64 letters, digits, '_' or '-', got {ns!r}"
            )
        if self.verify_interval_s < 0:
            raise ConfigError(f"{ENV_PREFIX}VERIFY_INTERVAL_S: must be >= 0 (0: never)")
        for name, allowed in self.choices.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(
                    f"{ENV_PREFIX}{name.upper()}={getattr(self, name)!r} is not one of {', '.join(allowed)}"
                )

    def export(self, environ=None) -> None:
        """Write these settings as ``POSENC_*`` variables into ``environ`` (default: the process
        environment, which child processes inherit); a None field removes its variable."""
        environ = os.environ if environ is None else environ
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            key = ENV_PREFIX + f.name.upper()
            if v is None:
                environ.pop(key, None)
            else:
                environ[key] = str(v)


_current: Settings | None = None


def current() -> Settings:
    """This process's settings: ``POSENC_*`` read at the first call, or what ``use`` installed."""
    global _current
    if _current is None:
        _current = Settings.from_env()
    return _current


def use(settings: Settings, export: bool = True) -> Settings:
    """Install ``settings`` (these or the service's subclass) as this process's and, unless
    ``export`` is false, export them for the processes it starts (posenc serve, after its flags).
    The kernel backend was chosen at import and does not change."""
    global _current
    if export:
        settings.export()
    _current = settings
    return settings


_BOOLS = {
    "1": True,
    "true": True,
    "on": True,
    "yes": True,
    "0": False,
    "false": False,
    "off": False,
    "no": False,
}


def _parse(field: dataclasses.Field, raw: str):
    name = ENV_PREFIX + field.name.upper()
    typ = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    if typ.startswith("bool"):
        if raw.lower() in _BOOLS:
            return _BOOLS[raw.lower()]
        raise ConfigError(f"{name}: expected one of {', '.join(_BOOLS)}, got {raw!r}")
    try:
        if typ.startswith("int"):
            return int(raw)
        if typ.startswith("float"):
            return float(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected a number, got {raw!r}") from None
    return raw
