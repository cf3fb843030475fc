"""What the operator's commands (``twopc status``, ``recover``, ``verify``, ``metrics``) use.

- The ledger's records and a recovery: :class:`BatchState`, :class:`Decision`,
  :class:`RecoveryPlan`, :class:`RecoveryReport`; :func:`open_store` (a checkpoint's storage).
- Output: :func:`configure_cli_logging`, :func:`log_event`, :class:`MetricsCollector` (the
  Prometheus collector, imported on first use), :data:`LOOPBACK`; :func:`recover_command`, the
  ``twopc recover`` a message suggests, spelled to run as pasted.
- :func:`load_object` (``package.module:name``: a sink class named by a checkpoint).
"""

import importlib as _importlib
from typing import TYPE_CHECKING

from .._advice import recover_command
from .._ledger_records import BatchState, Decision
from .._logs import configure_cli_logging, log_event
from .._metrics_server import LOOPBACK
from .._objpath import load_object
from .._recovery import RecoveryPlan, RecoveryReport
from .._stores import open_store

if TYPE_CHECKING:
    from .._metrics_export import MetricsCollector

__all__ = [
    "LOOPBACK",
    "BatchState",
    "Decision",
    "MetricsCollector",
    "RecoveryPlan",
    "RecoveryReport",
    "configure_cli_logging",
    "load_object",
    "log_event",
    "open_store",
    "recover_command",
]

#: names served by :mod:`twopc._metrics_export`, imported on first use: the Prometheus client
#: it needs is no part of a write, whose every Spark Python worker imports this package
_LAZY = ("MetricsCollector",)


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(".._metrics_export", __package__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
