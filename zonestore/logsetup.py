"""One log line format for every ZoneGate process (gateway master and workers, nodes).

Each line carries a UTC timestamp (milliseconds), the pid, the process's role (`gateway`, a
node id), the level, the logger, and the id of the request being served (`-` outside one):

    2026-12-01T21:40:02.123Z pid=4242 gateway WARNING zonegate.gateway rid=18C3F0A2B1D4E5F6: ...

or, with `--log-format json`, one JSON object per line with the same fields (`ts`, `pid`,
`role`, `level`, `logger`, `request_id`, `msg`, and `exc` for a traceback). The request id is a
context variable: the gateway sets it for each S3 request (the `x-amz-request-id` it returns),
so anything logged while serving that request names it.

`dict_config()` is what `configure()` applies; uvicorn takes the same dict as `log_config` and
applies it in every worker it spawns, which basicConfig in the parent would not reach.
"""

from __future__ import annotations

import json
import logging
import logging.config
import re
import time
from contextvars import ContextVar
from typing import Any

REQUEST_ID: ContextVar[str] = ContextVar("zonegate_request_id", default="-")
# The gateway sends the S3 request id it serves to the nodes, so their lines carry it too.
REQUEST_ID_HEADER = "X-ZG-Request-Id"
_RID = re.compile(r"[0-9A-Za-z._-]{1,64}")


def take_request_id(headers: Any) -> None:
    """Set REQUEST_ID from a request's X-ZG-Request-Id (a short token; anything else: "-")."""
    rid = headers.get(REQUEST_ID_HEADER)
    REQUEST_ID.set(rid if rid is not None and _RID.fullmatch(rid) else "-")
FORMATS = ("text", "json")
TEXT = ("%(asctime)s pid=%(process)d %(role)s %(levelname)s %(name)s rid=%(request_id)s: "
        "%(message)s")


class ContextFilter(logging.Filter):
    """Adds `role` and `request_id` to every record."""

    def __init__(self, role: str = "-") -> None:
        super().__init__()
        self.role = role

    def filter(self, record: logging.LogRecord) -> bool:
        record.role = self.role
        record.request_id = REQUEST_ID.get()
        return True


class TextFormatter(logging.Formatter):
    converter = time.gmtime

    def __init__(self) -> None:
        super().__init__(TEXT)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return time.strftime("%Y-%m-%dT%H:%M:%S", self.converter(record.created)) + \
            f".{int(record.msecs):03d}Z"


class JsonFormatter(TextFormatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {"ts": self.formatTime(record), "pid": record.process,
               "role": getattr(record, "role", "-"), "level": record.levelname,
               "logger": record.name, "request_id": getattr(record, "request_id", "-"),
               "msg": record.getMessage()}
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def dict_config(level: str = "INFO", fmt: str = "text", role: str = "-") -> dict[str, Any]:
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    formatter = JsonFormatter if fmt == "json" else TextFormatter
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"context": {"()": f"{__name__}.ContextFilter", "role": role}},
        "formatters": {"zonegate": {"()": f"{__name__}.{formatter.__name__}"}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr",
                                "formatter": "zonegate", "filters": ["context"]}},
        "root": {"level": level.upper(), "handlers": ["stderr"]},
        # uvicorn's own loggers come with handlers of their own format: route them to root.
        "loggers": {name: {"handlers": [], "propagate": True}
                    for name in ("uvicorn", "uvicorn.error", "uvicorn.access")},
    }


def configure(level: str = "INFO", fmt: str = "text", role: str = "-") -> None:
    logging.config.dictConfig(dict_config(level, fmt, role))
