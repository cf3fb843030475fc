"""twopc: exactly-once side effects from Spark through two-phase-commit sinks.

Public API, what a pipeline calls:

- :func:`register`, :func:`foreach_batch_writer`, :func:`data_source_for`,
  :class:`TwoPhaseCommitDataSource`, :func:`check_checkpoint_location`: the Spark integration.
- :func:`composite`, :class:`Participant`: one batch written to several targets under one decision.
- :class:`TwoPhaseCommitSink`, :class:`TransactionHandle`, :class:`TransactionContext`,
  :class:`CommitOutcome`, :class:`CommitShape`, :class:`Xid`: the contract a sink implements, and the transaction id
  every sink gives its prepared transactions.
- :class:`CommitLedger`, :class:`CommitCoordinator`, :class:`RecoveryCoordinator`: the
  protocol's durable state, the driver's decision, and recovery after a crash.
- :func:`sink_status`, :class:`SinkStatus`, :class:`UnsettledTransaction` (what ``twopc status``
  shows), :func:`register_metrics` and :func:`serve_metrics` (Prometheus): the operator's side.
- :func:`register_all` (every built-in format: ``twopc-jdbc``, ``twopc-postgres``, ``twopc-redis``,
  ``twopc-redis-stream``, ``twopc-file``, ``twopc-composite``) and :func:`write_jdbc` (Spark's
  ``df.write.jdbc`` with the drop-in's guarantee): the formats, from :mod:`twopc.sinks`.
- The exception tree rooted at :class:`TwoPCError`, with the bases a caller catches:
  :class:`ConfigurationError` (:class:`MissingExtraError`: a backend's driver is not installed;
  the message names the pip extra), :class:`LedgerError` (:class:`FencedError`: a newer driver
  owns the checkpoint), :class:`SinkError`, and :class:`TransactionLostError`.

The formats' classes are in :mod:`twopc.sinks`, the operator's side (``twopc status|recover``) in
:mod:`twopc.recovery`, the fault points and crashable servers in :mod:`twopc.faultinject`; each
loads on first use (``twopc.sinks.PostgresSink`` works after ``import twopc``). What a sink author
or those packages need beyond this (the finer exceptions, handle codecs, options, the target
ledger and its lease, ...) is in :mod:`twopc.spi`; nothing outside the protocol core imports its
private modules.
"""

from __future__ import annotations

import importlib as _importlib
from typing import TYPE_CHECKING
from typing import Any as _Any

from ._composite_source import composite
from ._context import TransactionContext
from ._coordinator import CommitCoordinator
from ._errors import (
    ConfigurationError,
    FencedError,
    LedgerError,
    MissingExtraError,
    SinkError,
    TransactionLostError,
    TwoPCError,
)
from ._handle import TransactionHandle
from ._ledger import CommitLedger
from ._participant import Participant
from ._recovery import RecoveryCoordinator
from ._register import foreach_batch_writer, register
from ._sink import CommitOutcome, CommitShape, TwoPhaseCommitSink
from ._spark import TwoPhaseCommitDataSource, data_source_for
from ._spark_fs import check_checkpoint_location
from ._status import SinkStatus, UnsettledTransaction, sink_status
from ._xid import Xid

__all__ = [
    "CommitCoordinator",
    "CommitLedger",
    "CommitOutcome",
    "CommitShape",
    "ConfigurationError",
    "FencedError",
    "LedgerError",
    "MissingExtraError",
    "Participant",
    "RecoveryCoordinator",
    "SinkError",
    "SinkStatus",
    "TransactionContext",
    "TransactionHandle",
    "TransactionLostError",
    "TwoPCError",
    "TwoPhaseCommitDataSource",
    "TwoPhaseCommitSink",
    "UnsettledTransaction",
    "Xid",
    "check_checkpoint_location",
    "composite",
    "data_source_for",
    "foreach_batch_writer",
    "register",
    "register_all",
    "register_metrics",
    "serve_metrics",
    "sink_status",
    "write_jdbc",
]

if TYPE_CHECKING:
    from ._metrics_export import register_metrics, serve_metrics
    from .sinks import register_all, write_jdbc

__version__ = "0.2.0"

#: twopc's packages above the protocol core, loaded on first use: ``import twopc`` alone does
#: not import the formats (nor their drivers), and the core never imports them.
_PACKAGES = ("sinks", "recovery", "faultinject")
_FROM_SINKS = ("register_all", "write_jdbc")
#: served by :mod:`twopc._metrics_export`, imported on first use: the Prometheus client it needs
#: is no part of a write, whose every Spark Python worker imports this package
_FROM_METRICS = ("register_metrics", "serve_metrics")


def __getattr__(name: str) -> _Any:
    if name in _FROM_SINKS:
        value = getattr(_importlib.import_module(".sinks", __name__), name)
    elif name in _FROM_METRICS:
        value = getattr(_importlib.import_module("._metrics_export", __name__), name)
    elif name in _PACKAGES:
        value = _importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'twopc' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FROM_SINKS) | set(_FROM_METRICS) | set(_PACKAGES))
