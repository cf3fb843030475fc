"""What a sink that keeps its ledger in its own server needs (the built-in SQL sinks): the
target ledger and its lease, the sink ids of writes without a checkpoint, and the driver agent
that holds a driver's leases.

- The target ledger: :class:`TargetLedger`, :class:`Lease`, :class:`TargetRecord`,
  :func:`open_target_ledger`, :func:`target_ledger_of`, :func:`resolve_abandoned` (settle the
  writes whose writer died), :func:`check_target`, and :func:`hold_for_prepare` (a sink that
  prepares outside the runtime holds its sink id's lease).
- Sink ids: :func:`default_sink_id`, :func:`ephemeral_sink_id`, :func:`ephemeral_started`,
  :func:`ephemeral_writer_dead`, :data:`EPHEMERAL_PREFIX`, :func:`checkpoint_label`.
- The driver process and its agent: :class:`DriverIdentity`, :func:`driver_identity`,
  :func:`start_ticks`, :class:`DriverAgent`, :func:`ask_agent`, :func:`private_dir`.
"""

from .._agent_client import DriverAgent, ask_agent
from .._driver_identity import DriverIdentity, driver_identity
from .._driver_identity import _start_ticks as start_ticks
from .._ephemeral import ephemeral_writer_dead
from .._host_dirs import private_dir
from .._ledger_records import TargetRecord
from .._runtime_options import default_sink_id, ephemeral_sink_id, ephemeral_started
from .._sink_id_claim import checkpoint_label, hold_for_prepare
from .._target import EPHEMERAL_PREFIX, open_target_ledger, resolve_abandoned
from .._target_check import check_target
from .._target_protocol import Lease, TargetLedger, target_ledger_of

__all__ = [
    "EPHEMERAL_PREFIX",
    "DriverAgent",
    "DriverIdentity",
    "Lease",
    "TargetLedger",
    "TargetRecord",
    "ask_agent",
    "check_target",
    "checkpoint_label",
    "default_sink_id",
    "driver_identity",
    "ephemeral_sink_id",
    "ephemeral_started",
    "ephemeral_writer_dead",
    "hold_for_prepare",
    "open_target_ledger",
    "private_dir",
    "resolve_abandoned",
    "start_ticks",
    "target_ledger_of",
]
