"""The commit or abort of a planned write, in the worker that commits it (Spark's commit
process): the coordinator under the owner epoch the write was planned under, what the
operator sees of the batch, and the write's lease and temporary ledger let go. A task's worker
never loads this module (the writer imports it when it commits)."""

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
    """A planned write, as its writer carries it to the worker that commits
    (:class:`twopc.spark._writer.WriterCore`, which imports this module when it commits)."""

    @property
    def sink(self) -> AnySink: ...

    @property
    def sink_id(self) -> str: ...

    @property
    def runtime(self) -> RuntimeOptions: ...

    @property
    def format_name(self) -> str: ...

    @property
    def epoch(self) -> int | None: ...

    @property
    def lease(self) -> Lease | None: ...

    def target(self) -> TargetLedger: ...


def coordinator_of(core: PlannedWrite, messages: Sequence[WriterCommitMessage | None] = ()) -> CommitCoordinator:
    """The coordinator of this write's commit or abort, under the owner epoch the write was
    planned under: the writer's own (a batch write's writer is the plan's), else the one
    its tasks carry (a streaming query's committing process builds its writer anew), else,
    for a micro-batch no task reported, the driver's if it still owns the ledger.

    Raises:
        FencedError: another actor owns the ledger now (nothing is touched).
    """
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
    """Commit (*stage* ``"commit"``) or abort batch *batch_id* of the write *core*, from its
    tasks' *messages*; then let its lease and temporary ledger go, and tell the operator (a
    write with a checkpoint: a temporary one shows nothing, and loads nothing to show it)."""
    coord = coordinator_of(core, messages)
    shown = not core.runtime.ephemeral
    if shown:
        from . import _observe as observe
    room = None
    committed = False
    try:
        handles = _handles(messages)
        if stage == "commit":
            result = coord.commit_batch(batch_id, handles)
            committed = True
            room = observe.read_headroom(core.sink, core.sink_id) if shown else None
        else:
            result = coord.abort_batch(batch_id, handles)
    except BaseException:
        if shown:
            observe.observe_failure(coord.ledger, core.sink_id, core.format_name, stage, coord.metrics.lost,
                                    retried=coord.metrics.retried)
        raise
    finally:
        settle(core)
        _forget_ephemeral(core, committed=committed)
        core.sink.close()
    if shown:
        observe.observe_commit(coord.ledger, core.sink_id, core.format_name, result,
                               [m for m in messages if isinstance(m, TwoPCCommitMessage)],
                               retried=coord.metrics.retried, headroom=room)
    return result


def settle(core: PlannedWrite) -> None:
    """A write whose ledger is in the target: forget its records when nothing of it is
    left; release the batch write's lease (never raises)."""
    if core.runtime.in_target:
        settle_own(core.sink, core.target(), core.sink_id, core.lease)
    elif core.lease is not None and (target := target_ledger_of(core.sink)) is not None:
        target.release(core.lease)


def _forget_ephemeral(core: PlannedWrite, *, committed: bool) -> None:
    """Delete the temporary ledger of a write without checkpointLocation: its sink
    commits a batch in one local transaction, so nothing in it is needed afterwards;
    once the batch *committed*, neither is its marker in the target (the write's sink
    id is never used again; best effort: see :func:`~twopc._sink.purge_markers_best_effort`)."""
    if core.runtime.ephemeral and not core.runtime.in_target:
        if committed:
            purge_markers_best_effort(core.sink, core.sink_id, ALL_BATCHES)
        shutil.rmtree(core.runtime.checkpoint_location, ignore_errors=True)


def _handles(messages: Sequence[WriterCommitMessage | None]) -> list[TransactionHandle | None]:
    out: list[TransactionHandle | None] = []
    for m in messages:
        if m is None:
            out.append(None)
        elif isinstance(m, TwoPCCommitMessage):
            out.append(loads_handle(m.handle) if m.handle is not None else None)
        else:
            raise ProtocolError(f"unexpected commit message {type(m).__name__}")
    return out
