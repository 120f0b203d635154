"""Structured logging: one JSON object per line, or readable text with key=value fields.

Call sites add fields with `extra={"fields": {...}}`. Nothing here reads configuration files;
callers must not pass secrets (tokens, kubeconfig contents) as fields.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    return dict(fields) if isinstance(fields, dict) else {}


#: The last second formatted, and its text (one tuple: threads read and replace it whole).
_second: tuple[int, str] = (-1, "")


def _timestamp(record: logging.LogRecord) -> str:
    global _second  # noqa: PLW0603  (a cache of the one formatting that changes once a second)
    whole = int(record.created)
    cached = _second
    if cached[0] != whole:
        cached = _second = (whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)))
    return f"{cached[1]}.{int(record.msecs):03d}Z"


#: One encoder for every line (`json.dumps` with `default` builds a new one per call).
_encode = json.JSONEncoder(default=str).encode


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in _fields(record).items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["error_trace"] = self.formatException(record.exc_info)
        return _encode(entry)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in _fields(record).items())
        line = f"{_timestamp(record)} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if fields:
            line += " " + fields
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(log_format: str, *, level: int = logging.INFO, stream: TextIO | None = None) -> None:
    """Send all logs to `stream` (stderr) in `log_format` ("json" or "text")."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # What no formatter here prints is not gathered for every record: the caller's file and line, the
    # thread and process names (the "Optimization" table of Python's logging HOWTO).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    # Python warnings (from libraries) become log entries in the chosen format, not raw stderr lines.
    logging.captureWarnings(True)
