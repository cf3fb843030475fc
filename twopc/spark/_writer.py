"""The Spark writers of a planned write (what every Python worker of the write unpickles): a task's
write through the abort fence, and the commit or abort (:mod:`twopc.spark._write_commit`, loaded
only in the committing worker). The plan is :mod:`twopc.spark._plans`'s."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from twopc import faultinject

from .._context import TransactionContext
from .._errors import BatchAbortedError, LedgerError, ProtocolError
from .._handle import TransactionHandle, dumps_handle, ensure_registered, loads_handle
from .._logs import configure_worker_logging
from .._runtime_options import RuntimeOptions
from .._sink import AnySink
from .._sink_id_claim import runtime_task
from .._worker_heap import note_worker_use
from ..ledger._ledger_records import ledger_store
from ..ledger._target_protocol import Lease, TargetLedger, target_ledger_of
from ._commit_message import TwoPCCommitMessage

if TYPE_CHECKING:
    import pyarrow as pa

    from .._fence import AbortFence
    from ..ledger._stores import Records

__all__ = ["BATCH_ID_PROPERTY", "TwoPhaseCommitBatchWriter", "TwoPhaseCommitStreamWriter", "WriterCore"]

log = logging.getLogger("twopc.spark")

BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass(eq=False, repr=False)
class WriterCore:
    """The protocol's task side (:meth:`write`) and driver side (:meth:`commit`, :meth:`abort`),
    pickled to the executors and the streaming commit process."""

    sink: AnySink
    sink_id: str
    runtime: RuntimeOptions
    _: KW_ONLY
    skip: bool
    format_name: str = ""
    epoch: int | None = None
    lease: Lease | None = None
    #: every abort record when the write was planned (twopc._fence, window 2; None: unknown)
    abort_baseline: frozenset[str] | None = None
    #: the newest committed batch at planning: a task of a batch at or below it is a replay that
    #: writes nothing (a table with a unique key would refuse the rows it committed)
    committed_through: int | None = None
    #: a batch write's txnVersion, its one batch's id (None: streaming, from Spark's task property)
    version: int | None = None

    def __post_init__(self) -> None:
        self._register_handle_kind()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._register_handle_kind()

    def _register_handle_kind(self) -> None:
        """Register the sink's handle kind here (cloudpickle skips the hook for ``__main__`` classes)."""
        ensure_registered(getattr(type(self.sink), "__handle_type__", TransactionHandle))

    # -- executor side ------------------------------------------------------------
    def write(self, iterator: Iterator[pa.RecordBatch]) -> TwoPCCommitMessage:
        """One task attempt: its batch is :attr:`version`, else the micro-batch Spark runs."""
        configure_worker_logging()
        note_worker_use()
        if (tc := TaskContext.get()) is None:
            raise ProtocolError("twopc writers must run inside a Spark task")
        partition, attempt = tc.partitionId(), tc.taskAttemptId()
        if self.skip:
            return TwoPCCommitMessage(None, 0, partition, attempt, epoch=self.epoch)
        batch_id = self.version
        if batch_id is None:
            if (prop := tc.getLocalProperty(BATCH_ID_PROPERTY)) is None:
                raise ProtocolError(f"Spark did not set the {BATCH_ID_PROPERTY} task property")
            batch_id = int(prop)
        return self.write_partition(iterator, batch_id, partition, attempt, tc.attemptNumber())

    def write_partition(self, batches: Iterator[pa.RecordBatch], batch_id: int, partition: int, attempt: int,
                        attempt_number: int = 0) -> TwoPCCommitMessage:
        """One task attempt once its identity is known: begin, invoke, prepare, with the executor's fault
        points (``twopc.testing``'s micro-batch job calls it directly)."""
        if self.committed_through is not None and batch_id <= self.committed_through:
            # Spark replays a batch whose commit its own log lacks; twopc committed it (the plan says so)
            log.info("twopc: sink %s batch %s was committed before this replay (partition %s writes nothing)",
                     self.sink_id, batch_id, partition)
            return TwoPCCommitMessage(None, 0, partition, attempt, epoch=self.epoch)
        with runtime_task():  # the driver holds the sink id's claim
            return self._write_attempt(batches, TransactionContext(self.sink_id, batch_id, partition, attempt,
                                                                   attempt_number))

    def _write_attempt(self, batches: Iterator[pa.RecordBatch], ctx: TransactionContext) -> TwoPCCommitMessage:
        from .._fence import AbortFence  # the task's: the worker that commits never writes through a fence
        batch_id, partition, attempt = ctx.batch_id, ctx.partition_id, ctx.attempt_id
        fence = AbortFence.begin(self._ledger_store, self.runtime.checkpoint_location, batch_id,
                                 ephemeral=self.runtime.ephemeral, baseline=self.abort_baseline,
                                 partition=partition, attempt=attempt, shared=self.runtime.in_target)
        try:
            if fence.began_aborted:  # the late-start window: see twopc._fence
                raise BatchAbortedError(
                    f"batch {batch_id} of sink {self.sink_id!r} was aborted by the driver before this task "
                    f"(partition {partition}, attempt {attempt}) began (the job failed or the query stopped as "
                    f"Spark started it): it wrote nothing")
            if ctx.attempt_number > 0:
                fence.roll_back_dead_attempts(self.sink, self.sink_id, partition)
            message = self._write_fenced(fence, ctx, batches)
        except BaseException:
            fence.end()  # rolled back: see twopc._fence
            self.sink.close()
            raise
        try:
            if not fence.end() and message.handle is not None:
                # a retry would take this transaction for a dead attempt's and roll it back: do not report it
                _quietly(self.sink.abort, loads_handle(message.handle))
                raise LedgerError(f"batch {batch_id} of sink {self.sink_id!r}: this task (partition {partition}, "
                                  f"attempt {attempt}) could not remove its running record from the ledger, so it "
                                  f"rolled its transaction back; Spark retries the task")
            return message
        finally:
            self.sink.close()

    def _write_fenced(self, fence: AbortFence, ctx: TransactionContext,
                      batches: Iterator[pa.RecordBatch]) -> TwoPCCommitMessage:
        batch_id, partition, attempt = ctx.batch_id, ctx.partition_id, ctx.attempt_id
        txn = self.sink.begin_transaction(ctx)
        rows = 0
        try:
            for rb in batches:
                if rb.num_rows == 0:
                    continue
                self.sink.invoke_batch(txn, rb)
                if rows == 0:
                    faultinject.fault_point("during_invoke", batch_id=batch_id, partition=partition)
                rows += rb.num_rows
            faultinject.fault_point("before_pre_commit", batch_id=batch_id, partition=partition)
            if rows == 0:
                self.sink.rollback(txn)
                return TwoPCCommitMessage(None, 0, partition, attempt, epoch=self.epoch)
            handle = self.sink.pre_commit(txn)
        except BaseException:
            _quietly(self.sink.rollback, txn)
            raise
        try:
            faultinject.fault_point("after_pre_commit", batch_id=batch_id, partition=partition)
            if fence.aborted():  # the zombie-prepare window: see twopc._fence
                self.sink.abort(handle)
                raise BatchAbortedError(
                    f"batch {batch_id} of sink {self.sink_id!r} was aborted by the driver while this task "
                    f"(partition {partition}, attempt {attempt}) was still running (another task of the job "
                    f"failed first, or the query was stopped): this task rolled back its prepared transaction "
                    f"{handle.txn_id}, so the aborted batch leaves nothing. The job's own error, if any, is the "
                    f"one to fix")
        except BaseException:
            _quietly(self.sink.abort, handle)
            raise
        return TwoPCCommitMessage(dumps_handle(handle), rows, partition, attempt, time.time(), self.epoch)

    def _ledger_store(self) -> Records:
        """The write's ledger store for the task's fence, opened without creating anything."""
        if self.runtime.in_target:
            return self.target().store(self.sink_id)
        return ledger_store(self.runtime.checkpoint_location)

    # -- driver side: the worker that commits -------------------------------------------
    def target(self) -> TargetLedger:
        """The ledger this write keeps in its target."""
        if (target := target_ledger_of(self.sink)) is None:
            raise ProtocolError(f"{self.sink.describe()} kept this write's ledger in the target, and now has none")
        return target

    def commit(self, messages: Sequence[WriterCommitMessage | None],
               batchId: int | None = None) -> None:  # noqa: N803 - Spark's parameter name
        """Decide and commit the batch (*batchId*: the micro-batch; a batch write's is :attr:`version`)."""
        # only the committing worker loads the coordinator
        from ._write_commit import finish, settle
        configure_worker_logging()
        note_worker_use()
        batch_id = self._batch(batchId)
        if self.skip:
            log.debug("twopc: sink %s txnVersion %s was already committed: wrote nothing", self.sink_id, batch_id)
            settle(self)
            return
        finish(self, "commit", messages, batch_id)

    def abort(self, messages: Sequence[WriterCommitMessage | None],
              batchId: int | None = None) -> None:  # noqa: N803 - Spark's parameter name
        """Roll the failed write back. Never raises (Spark would replace the error that made it abort with
        "Writing job failed"): what is left goes to the next start with a warning."""
        from ._write_commit import finish, settle  # as in commit
        configure_worker_logging()
        note_worker_use()
        batch_id = self._batch(batchId)
        if self.skip:
            settle(self)
            return
        try:
            finish(self, "abort", messages, batch_id)
        except Exception:
            log.warning("twopc: sink %s could not clean up after the failed write of batch %s; the next start "
                        "of the query (or twopc recover) will", self.sink_id, batch_id, exc_info=True)

    def _batch(self, given: int | None) -> int:
        batch_id = self.version if given is None else given
        if batch_id is None:
            raise ProtocolError("a streaming write's commit or abort needs the micro-batch id")
        return batch_id


def _quietly(fn: Callable[[Any], Any], arg: Any) -> None:
    try:
        fn(arg)
    except Exception:  # logged, not raised: the original error is what matters
        log.exception("twopc: cleanup after a failed write also failed; recovery will finish it")


class TwoPhaseCommitStreamWriter(WriterCore, DataSourceStreamArrowWriter):
    """Streaming writer: one transaction per task attempt, one decision per micro-batch."""


class TwoPhaseCommitBatchWriter(WriterCore, DataSourceArrowWriter):
    """Batch writer: all-or-nothing across tasks; ``txnVersion`` makes reruns write nothing."""
