"""What a sink that keeps its ledger in its own server needs (the built-in SQL sinks): the target ledger and its
lease, the sink ids of writes without a checkpoint, and the driver agent that holds a driver's leases.

- The target ledger: :class:`TargetLedger`, :class:`Lease`, :class:`TargetRecord`, :func:`open_target_ledger`,
  :func:`target_ledger_of`, :func:`resolve_abandoned` (settle the writes whose writer died), :func:`check_target`,
  and :func:`hold_for_prepare` (a sink that prepares outside the runtime holds its sink id's lease).
- Sink ids: :func:`default_sink_id`, :func:`ephemeral_sink_id`, :func:`ephemeral_started`,
  :func:`ephemeral_writer_dead`, :data:`EPHEMERAL_PREFIX`, :func:`checkpoint_label`.
- The driver process and its agent: :class:`DriverIdentity`, :func:`driver_identity`,
  :func:`start_ticks`, :class:`DriverAgent`, :func:`ask_agent`, :func:`private_dir`.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from .._driver_identity import DriverIdentity, driver_identity
    from .._driver_identity import _start_ticks as start_ticks
    from .._host_dirs import private_dir
    from .._runtime_options import EPHEMERAL_PREFIX, default_sink_id, ephemeral_sink_id, ephemeral_started
    from .._sink_id_claim import check_target, checkpoint_label, hold_for_prepare
    from .._target import open_target_ledger
    from ..ledger._agent_client import DriverAgent, ask_agent
    from ..ledger._ephemeral import ephemeral_writer_dead
    from ..ledger._ledger_records import TargetRecord
    from ..ledger._target_protocol import Lease, TargetLedger, target_ledger_of
    from ..operations._abandoned import resolve_abandoned
__all__ = ["EPHEMERAL_PREFIX", "DriverAgent", "DriverIdentity", "Lease", "TargetLedger", "TargetRecord", "ask_agent",
           "check_target", "checkpoint_label", "default_sink_id", "driver_identity", "ephemeral_sink_id",
           "ephemeral_started", "ephemeral_writer_dead", "hold_for_prepare", "open_target_ledger", "private_dir",
           "resolve_abandoned", "start_ticks", "target_ledger_of"]

#: Every name loads on first use (see :mod:`twopc._lazy`): a worker reads the few its sink uses.
__getattr__, __dir__ = _lazy_exports(__name__, {
    **dict.fromkeys(("DriverAgent", "ask_agent"), "..ledger._agent_client"),
    **dict.fromkeys(("DriverIdentity", "driver_identity"), ".._driver_identity"),
    **dict.fromkeys(("EPHEMERAL_PREFIX", "default_sink_id", "ephemeral_sink_id", "ephemeral_started"),
                    ".._runtime_options"),
    **dict.fromkeys(("check_target", "checkpoint_label", "hold_for_prepare"), ".._sink_id_claim"),
    "open_target_ledger": ".._target",
    "resolve_abandoned": "..operations._abandoned",
    **dict.fromkeys(("Lease", "TargetLedger", "target_ledger_of"), "..ledger._target_protocol"),
    "TargetRecord": "..ledger._ledger_records", "ephemeral_writer_dead": "..ledger._ephemeral",
    "private_dir": ".._host_dirs", "start_ticks": ".._driver_identity:_start_ticks",
})
