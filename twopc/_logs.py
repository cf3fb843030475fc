"""twopc's log records: one per protocol event on a ``twopc.*`` logger, its message readable alone,
``record.twopc_event`` its name and ``record.twopc`` its ids, counts and durations (never a credential).
:func:`configure_worker_logging` gives Spark's Python workers a stderr handler, set by ``TWOPC_LOG_LEVEL`` (``INFO``,
``DEBUG``, ``WARNING``, ``OFF``) and ``TWOPC_LOG_FORMAT`` (``text`` or ``json``)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import sys
from typing import Any

__all__ = ["ENV_LOG_FORMAT", "ENV_LOG_LEVEL", "JsonFormatter", "configure_cli_logging", "configure_worker_logging",
           "log_event"]

ENV_LOG_LEVEL = "TWOPC_LOG_LEVEL"
ENV_LOG_FORMAT = "TWOPC_LOG_FORMAT"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_HANDLER_NAME = "twopc-stderr"
_CLI_HANDLER_NAME = "twopc-cli-stderr"


def log_event(logger: logging.Logger, level: int, event: str, msg: str, *args: object, **fields: Any) -> None:
    """Log *event*: *msg* % *args*, with *fields* as ``record.twopc``."""
    if logger.isEnabledFor(level):
        logger.log(level, msg, *args, extra={"twopc_event": event, "twopc": fields}, stacklevel=2)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (UTC ISO 8601), ``level``, ``logger``, ``message``,
    ``event`` and the twopc fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage(),
        }
        if event := getattr(record, "twopc_event", None):
            out["event"] = event
        fields = getattr(record, "twopc", None)
        if isinstance(fields, dict):
            out.update({k: v for k, v in fields.items() if k not in out})
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, sort_keys=False)


def _formatter() -> logging.Formatter:
    json_lines = os.environ.get(ENV_LOG_FORMAT, "text").strip().lower() == "json"
    return JsonFormatter() if json_lines else logging.Formatter(TEXT_FORMAT)


def _level() -> int | None:
    name = os.environ.get(ENV_LOG_LEVEL, "INFO").strip().upper() or "INFO"
    if name == "OFF":
        return None
    level = logging.getLevelName(name)
    return level if isinstance(level, int) else logging.INFO


def configure_worker_logging() -> None:
    """In a Spark Python worker: the ``twopc`` logger to stderr. Idempotent; an application's own
    handlers (on ``twopc`` or the root) are kept."""
    twopc = logging.getLogger("twopc")
    if twopc.handlers or logging.getLogger().handlers:  # ours (added before) or the application's
        return
    level = _level()
    handler: logging.Handler = logging.StreamHandler(sys.stderr) if level is not None else logging.NullHandler()
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(_formatter())
    twopc.addHandler(handler)
    twopc.setLevel(level if level is not None else logging.CRITICAL + 1)
    twopc.propagate = False


class _CurrentStderr(logging.StreamHandler[Any]):
    """Writes to ``sys.stderr`` as it is at each record, never to one since replaced and closed."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> Any:
        return sys.stderr


def configure_cli_logging() -> None:
    """For ``twopc status`` / ``recover``: every logger to the current stderr (``TWOPC_LOG_FORMAT=json`` for JSON).
    Idempotent; the root logger's other handlers are kept (``main`` may run inside an application)."""
    root = logging.getLogger()
    handler = next((h for h in root.handlers if h.get_name() == _CLI_HANDLER_NAME), None)
    if handler is None:
        handler = _CurrentStderr()
        handler.set_name(_CLI_HANDLER_NAME)
        root.addHandler(handler)
    handler.setFormatter(_formatter())
    level = _level() or logging.WARNING
    handler.setLevel(level)
    root.setLevel(min(root.level or logging.WARNING, level))
