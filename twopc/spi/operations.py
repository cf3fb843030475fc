"""What the operator's commands (``twopc status``, ``recover``, ``verify``, ``metrics``) use.

- The ledger's records and a recovery: :class:`BatchState`, :class:`Decision`,
  :class:`RecoveryPlan`, :class:`RecoveryReport`; :func:`open_store` (a checkpoint's storage).
- Output: :func:`configure_cli_logging`, :func:`log_event`, :class:`MetricsCollector` (the
  Prometheus collector, imported on first use), :data:`LOOPBACK`; :func:`recover_command`, the
  ``twopc recover`` a message suggests, spelled to run as pasted.
- :func:`load_object` (``package.module:name``: a sink class named by a checkpoint).
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from .._advice import recover_command
    from .._logs import configure_cli_logging, log_event
    from .._objpath import load_object
    from ..ledger._ledger_records import BatchState, Decision
    from ..ledger._stores import open_store
    from ..operations._metrics_export import MetricsCollector
    from ..operations._metrics_server import LOOPBACK
    from ..operations._recovery import RecoveryPlan, RecoveryReport

__all__ = ["LOOPBACK", "BatchState", "Decision", "MetricsCollector", "RecoveryPlan", "RecoveryReport",
           "configure_cli_logging", "load_object", "log_event", "open_store", "recover_command"]

#: Every name loads on first use (see :mod:`twopc._lazy`); :class:`MetricsCollector` needs the
#: Prometheus client, no part of a write, whose every Spark Python worker may import this module.
__getattr__, __dir__ = _lazy_exports(__name__, {
    **dict.fromkeys(("BatchState", "Decision"), "..ledger._ledger_records"),
    **dict.fromkeys(("configure_cli_logging", "log_event"), ".._logs"),
    **dict.fromkeys(("RecoveryPlan", "RecoveryReport"), "..operations._recovery"),
    "LOOPBACK": "..operations._metrics_server", "MetricsCollector": "..operations._metrics_export",
    "load_object": ".._objpath", "open_store": "..ledger._stores", "recover_command": ".._advice",
})
