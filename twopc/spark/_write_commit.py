"""The commit or abort of a planned write in Spark's committing worker: the coordinator under the plan's owner epoch,
what the operator sees, and the lease and temporary ledger let go. A task's worker never loads it."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from typing import Protocol

from pyspark.sql.datasource import WriterCommitMessage

from .._coordinator import BatchResult, CommitCoordinator
from .._driver_identity import driver_identity
from .._errors import ProtocolError
from .._handle import TransactionHandle, loads_handle
from .._runtime_options import RuntimeOptions
from .._sink import AnySink, purge_markers_best_effort
from .._target import ALL_BATCHES, open_target_ledger, settle_own
from ..ledger._ledger import CommitLedger
from ..ledger._target_protocol import Lease, TargetLedger, target_ledger_of
from ._commit_message import TwoPCCommitMessage

__all__ = ["PlannedWrite", "coordinator_of", "finish", "settle"]


class PlannedWrite(Protocol):
    """A planned write as its writer carries it to the committing worker."""

    sink: AnySink
    sink_id: str
    runtime: RuntimeOptions
    format_name: str
    epoch: int | None
    lease: Lease | None

    def target(self) -> TargetLedger: ...


def coordinator_of(core: PlannedWrite, messages: Sequence[WriterCommitMessage | None] = ()) -> CommitCoordinator:
    """The coordinator of this commit or abort under the plan's owner epoch: the writer's, else the
    one its tasks carry (a streaming commit builds its writer anew), else, when no task reported,
    the driver's if it still owns the ledger.
    Raises FencedError: another actor owns the ledger now (nothing is touched)."""
    epoch = core.epoch
    if epoch is None:
        epoch = next((m.epoch for m in messages if isinstance(m, TwoPCCommitMessage) and m.epoch is not None),
                     None)
    if core.runtime.in_target:
        ledger = open_target_ledger(core.target(), core.sink_id, lease=core.lease, epoch=epoch)
    else:
        ledger = CommitLedger(core.runtime.checkpoint_location, epoch=epoch)
    if epoch is None and core.runtime.txn_version is None:  # a micro-batch that no task reported
        ledger.act_for(driver_identity())
    return CommitCoordinator(core.sink, ledger, core.sink_id, keep_last=core.runtime.keep_last,
                             retry=core.runtime.retry, format_name=core.format_name,
                             claimed=True)  # the target and the sink id were checked at plan time


def finish(core: PlannedWrite, stage: str, messages: Sequence[WriterCommitMessage | None],
           batch_id: int) -> BatchResult:
    """Commit (*stage* ``"commit"``) or abort *batch_id* from its tasks' *messages*; then let the lease
    and temporary ledger go and tell the operator (a temporary-ledger write shows nothing)."""
    coord = coordinator_of(core, messages)
    shown = not core.runtime.ephemeral
    if shown:
        from ..operations import _metrics
        from . import _observe as observe
    room = None
    committed = False
    try:
        handles = [_handle(m) for m in messages]
        if stage == "commit":
            result = coord.commit_batch(batch_id, handles)
            committed = True
            room = observe.read_headroom(core.sink, core.sink_id) if shown else None
        else:
            result = coord.abort_batch(batch_id, handles)
    except BaseException:
        if shown:  # best effort, as every metric
            _metrics.record_failure(coord.ledger, sink_id=core.sink_id, format_name=core.format_name, stage=stage,
                                    lost=coord.metrics.lost, retried=coord.metrics.retried)
        raise
    finally:
        settle(core)
        _forget_ephemeral(core, committed=committed)
        core.sink.close()
    if shown:  # the batch's figures and the target's room after the commit
        sent = [m for m in messages if isinstance(m, TwoPCCommitMessage)]
        _metrics.record_batch(coord.ledger, sink_id=core.sink_id, format_name=core.format_name, action=result.action,
                              committed=result.committed, already_committed=result.already_committed,
                              aborted=result.aborted, swept=len(result.swept), seconds=result.seconds,
                              rows=sum(m.rows for m in sent), retried=coord.metrics.retried, headroom=room,
                              first_prepared_at=min((m.prepared_at for m in sent if m.prepared_at), default=None),
                              batch_id=result.batch_id)
    return result


def settle(core: PlannedWrite) -> None:
    """Forget a target-ledger write's records when nothing is left; release a batch write's lease (never raises)."""
    if core.runtime.in_target:
        settle_own(core.sink, core.target(), core.sink_id, core.lease)
    elif core.lease is not None and (target := target_ledger_of(core.sink)) is not None:
        target.release(core.lease)


def _forget_ephemeral(core: PlannedWrite, *, committed: bool) -> None:
    """Delete a checkpoint-less write's temporary ledger (one local transaction per batch: nothing in
    it is needed), and once *committed* its marker too (its sink id is never reused)."""
    if core.runtime.ephemeral and not core.runtime.in_target:
        if committed:
            purge_markers_best_effort(core.sink, core.sink_id, ALL_BATCHES)
        shutil.rmtree(core.runtime.checkpoint_location, ignore_errors=True)


def _handle(m: WriterCommitMessage | None) -> TransactionHandle | None:
    if m is None or isinstance(m, TwoPCCommitMessage):
        return None if m is None or m.handle is None else loads_handle(m.handle)
    raise ProtocolError(f"unexpected commit message {type(m).__name__}")
