"""What the Spark runtime tells operators at plan time: start-up lines, the target's room for prepared transactions
(read again after each commit for the metrics), the metrics server. Metrics are best effort; a guard that refuses
raises :class:`~twopc.spi.TargetConfigurationError`."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from .._errors import ConfigurationError, SinkError, TargetConfigurationError
from .._inspect import Headroom
from .._logs import log_event
from .._runtime_options import option
from .._sink import AnySink, Inspectable, WriteSetup, capability
from ..ledger._ledger import CommitLedger

__all__ = ["at_plan_time", "check_headroom", "read_headroom"]

log = logging.getLogger("twopc.spark")

_ANNOUNCED: set[tuple[str, str]] = set()
#: spark.task.maxFailures: retried attempts whose prepared transactions a batch may hold
DEFAULT_TASK_MAX_FAILURES = 4


def at_plan_time(sink: AnySink, sink_id: str, ledger: CommitLedger, options: Mapping[str, str]) -> None:
    """After plan-time recovery: log the commit mode once per process, check the target's
    prepared-transaction room, start the metrics server when ``metricsPort`` is set.
    Raises TargetConfigurationError: the target has no room for the query's prepared transactions.
    Raises ConfigurationError: ``metricsPort`` is invalid or taken by another program."""
    key = (sink_id, capability(sink, WriteSetup).commit_mode())
    if key not in _ANNOUNCED:  # streaming plans every micro-batch: once per process is enough
        _ANNOUNCED.add(key)
        log_event(log, logging.INFO, "commit_mode", "twopc: sink %s commits through %s",
                  sink_id, key[1], sink_id=sink_id, commit_mode=key[1])
        check_headroom(sink, sink_id, options)
    # serving metrics (the metricsPort option) starts at a plan: the worker that commits records them only
    from ..operations._metrics_server import ensure_server, metrics_port
    served = metrics_port(options)
    if served is not None and ensure_server(served[0], ledger.checkpoint_location, host=served[1]):
        log_event(log, logging.INFO, "metrics_server", "twopc: serving metrics on %s:%s/metrics",
                  served[1], served[0], port=served[0])


def check_headroom(sink: AnySink, sink_id: str, options: Mapping[str, str]) -> None:
    """Refuse to start when the target's prepared-transaction limit (``max_prepared_transactions``) is
    below one batch's need: one per partition plus retries (``spark.task.maxFailures``, default 4;
    ``maxConcurrentTransactions`` overrides). Warn when other users leave less than that.
    Raises TargetConfigurationError: the limit is too low (the message says the fix)."""
    try:
        room = capability(sink, Inspectable).headroom(sink_id)
    except SinkError as exc:
        log.debug("twopc: could not read %s's headroom: %s", sink.describe(), exc)
        return
    if room is None or room.limit is None:
        return
    wanted_text = option(options, "maxConcurrentTransactions")
    if wanted_text is not None and not wanted_text.strip().isdigit():
        raise ConfigurationError(f"maxConcurrentTransactions must be a whole number, got {wanted_text!r}")
    wanted = int(wanted_text) if wanted_text else 1 + DEFAULT_TASK_MAX_FAILURES
    if room.limit < wanted:
        raise TargetConfigurationError(
            f"{sink.describe()}: {room.what} is {room.limit}, below the {wanted} prepared transactions a batch "
            f"of this query may hold at once (one per partition writing plus retried attempts): raise "
            f"{room.what} to at least the number of partitions plus spark.task.maxFailures (and restart "
            f"the server), or use commitMode=staging; set option maxConcurrentTransactions to your "
            f"partition count plus retries to tell twopc the real figure")
    if room.limit - room.in_use < wanted:
        log_event(log, logging.WARNING, "headroom_low",
                  "twopc: %s holds %s of %s allowed %s: fewer than %s left for this query; stale prepared "
                  "transactions of other users may be holding them (`twopc status <checkpointLocation>` lists ours)",
                  sink.describe(), room.in_use, room.limit, room.what, wanted, in_use=room.in_use,
                  limit=room.limit)


def read_headroom(sink: AnySink, sink_id: str) -> Headroom | None:
    """The target's room for the metrics after a commit, or None (never raises)."""
    try:
        return capability(sink, Inspectable).headroom(sink_id)
    except Exception as exc:  # noqa: BLE001 - metrics never fail (or mask the error of) a commit
        log.debug("twopc: could not read %s's headroom: %s", sink.describe(), exc)
        return None
