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
:mod:`twopc.recovery`, the fault points and crashable servers in :mod:`twopc.faultinject`; each loads on first use
(``twopc.sinks.PostgresSink`` works after ``import twopc``). What a sink author or those packages need beyond this
(the finer exceptions, handle codecs, options, the target ledger and its lease, ...) is in :mod:`twopc.spi`; nothing
outside the protocol core imports its private modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
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
    from ._participant import Participant
    from ._sink import CommitOutcome, CommitShape, TwoPhaseCommitSink
    from ._xid import Xid
    from .ledger._ledger import CommitLedger
    from .operations._metrics_export import register_metrics, serve_metrics
    from .operations._recovery import RecoveryCoordinator
    from .operations._status import SinkStatus, UnsettledTransaction, sink_status
    from .sinks import register_all, write_jdbc
    from .spark._composite_source import composite
    from .spark._register import foreach_batch_writer, register
    from .spark._spark import TwoPhaseCommitDataSource, data_source_for
    from .spark._spark_fs import check_checkpoint_location

__all__ = ["CommitCoordinator", "CommitLedger", "CommitOutcome", "CommitShape", "ConfigurationError", "FencedError",
           "LedgerError", "MissingExtraError", "Participant", "RecoveryCoordinator", "SinkError", "SinkStatus",
           "TransactionContext", "TransactionHandle", "TransactionLostError", "TwoPCError", "TwoPhaseCommitDataSource",
           "TwoPhaseCommitSink", "UnsettledTransaction", "Xid", "check_checkpoint_location", "composite",
           "data_source_for", "foreach_batch_writer", "register", "register_all", "register_metrics", "serve_metrics",
           "sink_status", "write_jdbc"]

__version__ = "0.2.0"

#: Every name loads on first use: a Spark Python worker imports this package before anything of
#: twopc's, and loads only the modules of what it runs (``import twopc`` alone loads none of them).
#: twopc's packages above the protocol core (``sinks``, ``recovery``) and ``faultinject`` load on
#: first use too, and the core never imports them; ``register_metrics`` and ``serve_metrics`` need
#: the Prometheus client, no part of a write.
__getattr__, __dir__ = _lazy_exports(__name__, {
    **dict.fromkeys(("ConfigurationError", "FencedError", "LedgerError", "MissingExtraError", "SinkError",
                     "TransactionLostError", "TwoPCError"), "._errors"),
    **dict.fromkeys(("register_metrics", "serve_metrics"), ".operations._metrics_export"),
    **dict.fromkeys(("foreach_batch_writer", "register"), ".spark._register"),
    **dict.fromkeys(("CommitOutcome", "CommitShape", "TwoPhaseCommitSink"), "._sink"),
    **dict.fromkeys(("TwoPhaseCommitDataSource", "data_source_for"), ".spark._spark"),
    **dict.fromkeys(("SinkStatus", "UnsettledTransaction", "sink_status"), ".operations._status"),
    **dict.fromkeys(("register_all", "write_jdbc"), ".sinks"),
    **{package: f".{package}:" for package in ("faultinject", "recovery", "sinks")},
    "CommitCoordinator": "._coordinator", "CommitLedger": ".ledger._ledger", "Participant": "._participant",
    "RecoveryCoordinator": ".operations._recovery", "TransactionContext": "._context",
    "TransactionHandle": "._handle", "Xid": "._xid", "check_checkpoint_location": ".spark._spark_fs",
    "composite": ".spark._composite_source",
})
