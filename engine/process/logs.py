"""Log lines of every posenc process, in the ``log_format`` setting.

- ``text`` (the default): ``posenc engine[PID]: message`` from the engine, uvicorn's
  own lines from ``posenc serve`` and its workers (``LEVEL:     message``; posenc's loggers as
  ``LEVEL:     posenc.x: message``).
- ``json``: one JSON object a line, from every logger (posenc's and uvicorn's): ``ts`` (UTC,
  ISO 8601), ``level``, ``logger``, ``pid``, ``msg``, ``exc`` (a traceback, when there is one),
  and for uvicorn's access log ``client``, ``method``, ``path``, ``http_version``, ``status``.

The engine calls ``configure`` itself; ``posenc serve`` gives uvicorn ``uvicorn_config``, which
its workers apply when they start.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
import time

ENGINE_TEXT = "posenc engine[%(process)d]: %(message)s"
_ACCESS_FIELDS = ("client", "method", "path", "http_version", "status")


class Throttled:
    """A line repeated for as long as a condition lasts (a full shm_dir: every change, every
    tick) logged at most once per ``interval_s``: the first at once, then one per interval that
    says how many were suppressed since the last one. ``now``: time.monotonic (tests pass their
    own clock)."""

    def __init__(self, emit, interval_s: float = 60.0, now=time.monotonic):
        self.emit, self.interval_s, self.now = emit, interval_s, now
        self.next_at: float | None = None
        self.suppressed = 0

    def __call__(self, msg: str) -> None:
        t = self.now()
        if self.next_at is not None and t < self.next_at:
            self.suppressed += 1
            return
        if self.suppressed:
            msg += f" ({self.suppressed} more like it suppressed in the last {self.interval_s:g} s)"
        self.emit(msg)
        self.next_at, self.suppressed = t + self.interval_s, 0


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "msg": record.getMessage(),
        }
        # uvicorn's access record: '%s - "%s %s HTTP/%s" %d' % (client, method, path, version, status)
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            out.update(zip(_ACCESS_FIELDS, record.args))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure(
    log_format: str, name: str = "posenc", text: str = ENGINE_TEXT, level: int = logging.INFO
) -> None:
    """Logger ``name`` of a process that uvicorn does not configure (the engine) to stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(text))
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False


def uvicorn_config(log_format: str, level: str) -> dict:
    """``logging.config.dictConfig`` for uvicorn.run: its loggers plus posenc's, at ``level``;
    errors on stderr, the access log on stdout (as uvicorn's default)."""
    if log_format == "json":
        formatters = {
            "default": {"()": f"{__name__}.JsonFormatter"},
            "access": {"()": f"{__name__}.JsonFormatter"},
        }
    else:  # uvicorn's own (uvicorn.config.LOGGING_CONFIG), and posenc's loggers named
        formatters = {
            "default": {"()": "uvicorn.logging.DefaultFormatter", "fmt": "%(levelprefix)s %(message)s"},
            "access": {
                "()": "uvicorn.logging.AccessFormatter",
                "fmt": '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s',
            },
            "posenc": {
                "()": "uvicorn.logging.DefaultFormatter",
                "fmt": "%(levelprefix)s %(name)s: %(message)s",
            },
        }
    posenc_handler = "posenc" if "posenc" in formatters else "default"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": formatters,
        "handlers": {
            "default": {
                "formatter": "default",
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
            },
            "access": {"formatter": "access", "class": "logging.StreamHandler", "stream": "ext://sys.stdout"},
            "posenc": {
                "formatter": posenc_handler,
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
            },
        },
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
            "posenc": {"handlers": ["posenc"], "level": level.upper(), "propagate": False},
        },
    }
