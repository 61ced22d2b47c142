"""Logging with correlation ids (delivery, event, task, run) carried in context variables."""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

_CORRELATION: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "carry_correlation", default=None
)


def correlation() -> dict[str, str]:
    return dict(_CORRELATION.get() or {})


@contextlib.contextmanager
def correlated(**ids: str | None) -> Iterator[None]:
    """Adds ids (delivery_id, event_key, task_id, run_id, ...) to every log line inside the block."""
    merged = {**(_CORRELATION.get() or {}), **{k: str(v) for k, v in ids.items() if v is not None}}
    token = _CORRELATION.set(merged)
    try:
        yield
    finally:
        _CORRELATION.reset(token)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **correlation(),
        }
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            line.update(extra)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def setup(level: str = "INFO", json_lines: bool = True) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if json_lines:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
