"""twopc's service provider interface: what sink authors and twopc's own packages import.

A pipeline needs only :mod:`twopc`'s public names. A sink (the built-in ones in ``twopc.sinks``, or
your own) and the operator's package (``twopc.recovery``) need more of the protocol's parts; they import
them from here, never from a private ``twopc._*`` module (``make lint`` enforces it), so that
twopc's modules can move without breaking them. The names, by job:

- The finer exceptions a sink raises: :class:`MissingOptionError`, :class:`SchemaMismatchError`,
  :class:`TargetConfigurationError`, :class:`ConcurrentWriterError`,
  :class:`TargetMismatchError` (under ``ConfigurationError``); :class:`HandleError`,
  :class:`UnknownHandleKindError`, :class:`HandleVersionError`; :class:`SinkUnavailableError`,
  :class:`CommitPendingError` (under ``SinkError``); :class:`SourceError`,
  :class:`BatchAbortedError`, :class:`ProtocolError`; and :func:`redact`, which takes
  credentials out of a URL before it reaches a message.
- Handles and ids: :func:`encode_handle`, :func:`decode_handle`, :func:`dumps_handle`,
  :func:`loads_handle`, :func:`registered_handle_kinds`; :data:`MAX_XID_BYTES`,
  :func:`validate_sink_id`.
- What a sink reports to ``twopc status``: :class:`PreparedDetail`, :class:`Headroom`.
- Options: :class:`RuntimeOptions`, :func:`option`, :data:`RUNTIME_OPTION_NAMES`,
  :data:`RUNTIME_KEYS` (the options twopc reads itself and passes by every sink), and the sink
  ids: :func:`default_sink_id`, :func:`ephemeral_sink_id`, :func:`ephemeral_started`,
  :func:`ephemeral_writer_dead`, :data:`EPHEMERAL_PREFIX`, :func:`participant_sink_id`.
- The target ledger (a sink's record of its checkpoint in the target) and its lease:
  :class:`TargetLedger`, :class:`Lease`, :func:`resolve_abandoned`, :func:`target_ledger_of`,
  :func:`open_target_ledger`, :class:`TargetRecord`, :func:`check_target`, :func:`hold_for_prepare`
  (a sink that prepares outside the runtime holds its sink id's lease); the checkpoint's
  owner: :class:`OwnerRecord`, :func:`checkpoint_label`; the driver process:
  :class:`DriverIdentity`, :func:`driver_identity`, :func:`start_ticks`; the driver agent that
  holds a driver's leases: :class:`DriverAgent`, :func:`ask_agent`.
- The protocol's parts beyond the public ones: :class:`BatchState`, :class:`Decision`,
  :class:`BatchResult`, :class:`CommitMetrics`, :class:`CommitRetry`, :class:`RecoveryPlan`,
  :class:`RecoveryReport`; the composite sink: :class:`CompositeSink`, :class:`CompositeHandle`,
  :class:`CompositeDataSourceBase`; the Spark writers: :class:`TwoPhaseCommitBatchWriter`,
  :class:`TwoPhaseCommitStreamWriter`, :class:`TwoPCCommitMessage`.
- Shared plumbing: :func:`require` (import a backend's driver, or name the extra to install),
  :func:`load_object` (``package.module:name``), :func:`make_folder`, :func:`private_dir`,
  :func:`open_store` (a checkpoint's storage), :func:`configure_cli_logging`,
  :func:`log_event`, :class:`MetricsCollector`, :data:`LOOPBACK`; :func:`recover_command`, the
  ``twopc recover`` a message suggests, spelled to run as pasted.
"""

import importlib as _importlib
from typing import TYPE_CHECKING

from ._advice import recover_command
from ._agent_client import DriverAgent, ask_agent
from ._commit_message import TwoPCCommitMessage
from ._composite import CompositeHandle, CompositeSink, participant_sink_id
from ._composite_source import CompositeDataSourceBase
from ._coordinator import BatchResult, CommitMetrics
from ._driver_identity import DriverIdentity, driver_identity
from ._driver_identity import _start_ticks as start_ticks
from ._ephemeral import ephemeral_writer_dead
from ._errors import (
    BatchAbortedError,
    CommitPendingError,
    ConcurrentWriterError,
    HandleError,
    HandleVersionError,
    MissingOptionError,
    ProtocolError,
    SchemaMismatchError,
    SinkUnavailableError,
    SourceError,
    TargetConfigurationError,
    TargetMismatchError,
    UnknownHandleKindError,
    redact,
)
from ._extras import require
from ._folders import make_folder
from ._handle import decode_handle, dumps_handle, encode_handle, loads_handle, registered_handle_kinds
from ._host_dirs import private_dir
from ._inspect import Headroom, PreparedDetail
from ._ledger import BatchState, Decision
from ._logs import configure_cli_logging, log_event
from ._metrics_server import LOOPBACK
from ._objpath import load_object
from ._recovery import RecoveryPlan, RecoveryReport
from ._retry import CommitRetry
from ._runtime_options import (
    RUNTIME_KEYS,
    RUNTIME_OPTION_NAMES,
    RuntimeOptions,
    default_sink_id,
    ephemeral_sink_id,
    ephemeral_started,
    option,
)
from ._sink_id_claim import checkpoint_label, hold_for_prepare
from ._sink_id_record import OwnerRecord
from ._spark import TwoPhaseCommitBatchWriter, TwoPhaseCommitStreamWriter
from ._stores import open_store
from ._target import EPHEMERAL_PREFIX, open_target_ledger, resolve_abandoned
from ._target_check import check_target
from ._target_protocol import Lease, TargetLedger, target_ledger_of
from ._target_record import TargetRecord
from ._xid import MAX_XID_BYTES, validate_sink_id

if TYPE_CHECKING:
    from ._metrics_export import MetricsCollector

__all__ = [
    "EPHEMERAL_PREFIX",
    "LOOPBACK",
    "MAX_XID_BYTES",
    "RUNTIME_KEYS",
    "RUNTIME_OPTION_NAMES",
    "BatchAbortedError",
    "BatchResult",
    "BatchState",
    "CommitMetrics",
    "CommitPendingError",
    "CommitRetry",
    "CompositeDataSourceBase",
    "CompositeHandle",
    "CompositeSink",
    "ConcurrentWriterError",
    "Decision",
    "DriverAgent",
    "DriverIdentity",
    "HandleError",
    "HandleVersionError",
    "Headroom",
    "Lease",
    "MetricsCollector",
    "MissingOptionError",
    "OwnerRecord",
    "PreparedDetail",
    "ProtocolError",
    "RecoveryPlan",
    "RecoveryReport",
    "RuntimeOptions",
    "SchemaMismatchError",
    "SinkUnavailableError",
    "SourceError",
    "TargetConfigurationError",
    "TargetLedger",
    "TargetMismatchError",
    "TargetRecord",
    "TwoPCCommitMessage",
    "TwoPhaseCommitBatchWriter",
    "TwoPhaseCommitStreamWriter",
    "UnknownHandleKindError",
    "ask_agent",
    "check_target",
    "checkpoint_label",
    "configure_cli_logging",
    "decode_handle",
    "default_sink_id",
    "driver_identity",
    "dumps_handle",
    "encode_handle",
    "ephemeral_sink_id",
    "ephemeral_started",
    "ephemeral_writer_dead",
    "hold_for_prepare",
    "load_object",
    "loads_handle",
    "log_event",
    "make_folder",
    "open_store",
    "open_target_ledger",
    "option",
    "participant_sink_id",
    "private_dir",
    "recover_command",
    "redact",
    "registered_handle_kinds",
    "require",
    "resolve_abandoned",
    "start_ticks",
    "target_ledger_of",
    "validate_sink_id",
]


#: names served by :mod:`twopc._metrics_export`, imported on first use: the Prometheus client
#: it needs is no part of a write, whose every Spark Python worker imports this package
_LAZY = ("MetricsCollector",)


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module("._metrics_export", __package__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
