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
- :data:`FAULT_POINTS`: the protocol's fault points, for the conformance kit (:mod:`twopc.testing`).
- The exception tree rooted at :class:`TwoPCError`, with the bases a caller catches:
  :class:`ConfigurationError` (:class:`MissingExtraError`: a backend's driver is not installed;
  the message names the pip extra), :class:`LedgerError` (:class:`FencedError`: a newer driver
  owns the checkpoint), :class:`SinkError`, and :class:`TransactionLostError`.

What a sink author or twopc's own packages (``twopc.sinks``, ``twopc.recovery``) need beyond this (the
finer exceptions, handle codecs, options, the target ledger and its lease, ...) is in
:mod:`twopc.spi`; nothing outside ``twopc`` imports its private modules.
"""

from ._composite import Participant
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
from ._faults import POINTS as FAULT_POINTS
from ._handle import TransactionHandle
from ._ledger import CommitLedger
from ._metrics import register_metrics, serve_metrics
from ._recovery import RecoveryCoordinator
from ._register import foreach_batch_writer, register
from ._sink import CommitOutcome, CommitShape, TwoPhaseCommitSink
from ._spark import TwoPhaseCommitDataSource, data_source_for
from ._spark_fs import check_checkpoint_location
from ._status import SinkStatus, UnsettledTransaction, sink_status
from ._xid import Xid

__all__ = [
    "FAULT_POINTS",
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
    "register_metrics",
    "serve_metrics",
    "sink_status",
]

__version__ = "0.1.0"
