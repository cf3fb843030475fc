"""twopc: exactly-once side effects from Spark through two-phase-commit sinks.

Public API:

- :class:`TwoPhaseCommitSink`, :class:`TransactionHandle`, :class:`TransactionContext`,
  :class:`CommitOutcome`, :class:`CommitShape`: the contract a sink implements.
- :class:`CommitLedger`, :class:`CommitCoordinator`, :class:`RecoveryCoordinator`: the
  protocol's durable state, the driver's decision, and recovery after a crash.
- :class:`TwoPhaseCommitDataSource`, :func:`data_source_for`, :func:`register`,
  :func:`foreach_batch_writer`, :func:`check_checkpoint_location`: the Spark integration.
- :class:`CompositeSink`, :class:`Participant`, :class:`CompositeHandle`, :func:`composite`:
  one batch written to several targets under one decision.
- :func:`sink_status` (what ``twopc status`` shows), :func:`register_metrics` and
  :func:`serve_metrics` (Prometheus): the operator's side.
- :class:`Xid`: the transaction id every sink gives its prepared transactions.
- The exception tree rooted at :class:`TwoPCError` (:class:`MissingExtraError`: a backend's
  driver is not installed; the message names the pip extra).
"""

from ._commit_message import TwoPCCommitMessage
from ._composite import CompositeHandle, CompositeSink, Participant, participant_sink_id
from ._composite_source import CompositeDataSourceBase, composite
from ._context import TransactionContext
from ._coordinator import BatchResult, CommitCoordinator, CommitMetrics
from ._ephemeral import ephemeral_writer_dead
from ._errors import (
    BatchAbortedError,
    CommitPendingError,
    ConcurrentWriterError,
    ConfigurationError,
    FencedError,
    HandleError,
    HandleVersionError,
    LedgerError,
    MissingExtraError,
    MissingOptionError,
    ProtocolError,
    SchemaMismatchError,
    SinkError,
    SinkUnavailableError,
    SourceError,
    TargetConfigurationError,
    TargetMismatchError,
    TransactionLostError,
    TwoPCError,
    UnknownHandleKindError,
    redact,
)
from ._faults import POINTS as FAULT_POINTS
from ._handle import (
    TransactionHandle,
    decode_handle,
    dumps_handle,
    encode_handle,
    loads_handle,
    registered_handle_kinds,
)
from ._inspect import Headroom, PreparedDetail
from ._ledger import BatchState, CommitLedger, Decision
from ._metrics import register_metrics, serve_metrics
from ._recovery import RecoveryCoordinator, RecoveryPlan, RecoveryReport
from ._register import foreach_batch_writer, register
from ._retry import CommitRetry
from ._runtime_options import RuntimeOptions, default_sink_id, ephemeral_sink_id, ephemeral_started, option
from ._sink import CommitOutcome, CommitShape, TwoPhaseCommitSink
from ._sink_id_claim import checkpoint_label
from ._sink_id_record import OwnerRecord
from ._spark import (
    TwoPhaseCommitBatchWriter,
    TwoPhaseCommitDataSource,
    TwoPhaseCommitStreamWriter,
    data_source_for,
)
from ._spark_fs import check_checkpoint_location
from ._status import SinkStatus, UnsettledTransaction, sink_status
from ._target import resolve_abandoned
from ._target_protocol import Lease, TargetLedger
from ._xid import MAX_XID_BYTES, Xid, validate_sink_id

__all__ = [
    "FAULT_POINTS",
    "MAX_XID_BYTES",
    "BatchAbortedError",
    "BatchResult",
    "BatchState",
    "CommitCoordinator",
    "CommitLedger",
    "CommitMetrics",
    "CommitOutcome",
    "CommitPendingError",
    "CommitRetry",
    "CommitShape",
    "CompositeDataSourceBase",
    "CompositeHandle",
    "CompositeSink",
    "ConcurrentWriterError",
    "ConfigurationError",
    "Decision",
    "FencedError",
    "HandleError",
    "HandleVersionError",
    "Headroom",
    "Lease",
    "LedgerError",
    "MissingExtraError",
    "MissingOptionError",
    "OwnerRecord",
    "Participant",
    "PreparedDetail",
    "ProtocolError",
    "RecoveryCoordinator",
    "RecoveryPlan",
    "RecoveryReport",
    "RuntimeOptions",
    "SchemaMismatchError",
    "SinkError",
    "SinkStatus",
    "SinkUnavailableError",
    "SourceError",
    "TargetConfigurationError",
    "TargetLedger",
    "TargetMismatchError",
    "TransactionContext",
    "TransactionHandle",
    "TransactionLostError",
    "TwoPCCommitMessage",
    "TwoPCError",
    "TwoPhaseCommitBatchWriter",
    "TwoPhaseCommitDataSource",
    "TwoPhaseCommitSink",
    "TwoPhaseCommitStreamWriter",
    "UnknownHandleKindError",
    "UnsettledTransaction",
    "Xid",
    "check_checkpoint_location",
    "checkpoint_label",
    "composite",
    "data_source_for",
    "decode_handle",
    "default_sink_id",
    "dumps_handle",
    "encode_handle",
    "ephemeral_sink_id",
    "ephemeral_started",
    "ephemeral_writer_dead",
    "foreach_batch_writer",
    "loads_handle",
    "option",
    "participant_sink_id",
    "redact",
    "register",
    "register_metrics",
    "registered_handle_kinds",
    "resolve_abandoned",
    "serve_metrics",
    "sink_status",
    "validate_sink_id",
]

__version__ = "0.1.0"
