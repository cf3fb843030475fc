"""Spark integration: Python data sources that drive any :class:`TwoPhaseCommitSink`.

How Spark calls them (PySpark 4.1+), and where the protocol runs:

- Plan time, on the driver, once per micro-batch (or per batch write), before any task:
  ``DataSource(options)`` then ``streamWriter()`` / ``writer()``. twopc validates the
  options and the target here, binds the sink id, and runs recovery (finish decided
  batches, roll back orphans), so that no task meets a stale prepared transaction; where
  the write keeps its decisions is chosen then too (:mod:`twopc._plans`).
- Tasks, on executors: ``write(iterator of pyarrow.RecordBatch)`` opens one transaction
  per task attempt, loads the batches, prepares, and returns the handle. The batch id
  comes from the ``streaming.sql.batchId`` local property Spark sets on every task.
- Commit, on the driver, in a separate Python process that receives an *unpickled* copy
  of the data source: ``commit(messages, batchId)`` / ``abort(...)`` run the
  :class:`CommitCoordinator`. The copy knows it is not the plan-time instance, so it
  does not run recovery (which would roll back the batch being committed).

A retried task attempt that meets its predecessor's prepared transaction: the dead
attempt's transaction still holds its row locks, and the driver cannot roll it back while
the batch runs, because with speculation that attempt might still be the one Spark
chooses (rolling back a transaction the driver may commit is data loss). The retry rolls
back what an attempt of its partition that provably died before reporting left prepared
(its ``running/`` record is there, its process gone: :meth:`AbortFence.roll_back_dead_attempts`).
Otherwise sinks bound the wait (the PostgreSQL sink's ``lockTimeout``): the retry fails
with a clear error, the write fails, and the restart's plan-time recovery rolls the
orphan back before any task runs. Writes that touch no common key (plain appends) never
wait.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from twopc import faultinject

from ._checkpoint import session_root_at_start, with_checkpoint
from ._commit_message import TwoPCCommitMessage
from ._context import TransactionContext
from ._coordinator import BatchResult, CommitCoordinator
from ._driver_identity import driver_identity
from ._errors import BatchAbortedError, LedgerError, ProtocolError
from ._fence import AbortFence
from ._handle import TransactionHandle, dumps_handle, ensure_registered, loads_handle
from ._ledger import CommitLedger, ledger_store
from ._logs import configure_worker_logging
from ._objpath import class_path
from ._observe import observe_commit, observe_failure, read_headroom
from ._runtime_options import RuntimeOptions, option, sink_options
from ._session_options import with_session_defaults
from ._sink import AnySink, WriteSetup, capability, purge_markers_best_effort
from ._sink_id_claim import runtime_task
from ._stores import Records
from ._target import ALL_BATCHES, open_target_ledger, settle_own
from ._target_protocol import Lease, TargetLedger, target_ledger_of

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "TwoPhaseCommitDataSource",
    "data_source_for",
]

log = logging.getLogger("twopc.spark")

BATCH_ID_PROPERTY = "streaming.sql.batchId"

W = TypeVar("W", bound="_WriterCore")


class _WriterCore:
    """What the batch and the streaming writer are: the protocol's task side (:meth:`write`)
    and driver side (:meth:`commit`, :meth:`abort`), pickled to the executors and to the
    streaming commit process as the writer itself."""

    version: int | None = None
    """The batch write's ``txnVersion``, the id of its one batch (None: a streaming write, whose
    tasks take the micro-batch id from Spark's task property and whose commits are given it)."""

    abort_baseline: frozenset[str] | None = None
    """Every abort record of the ledger when the write was planned (None: unknown, a task then
    takes its batch's records when it begins): see :mod:`twopc._fence`, window 2."""

    committed_through: int | None = None
    """The newest batch the ledger held as committed when the write was planned (after the
    plan's recovery finished any decided one): a task of a batch at or below it is a replay
    of a committed batch and writes nothing, so a replay never meets the rows it committed
    (a table with a unique key would refuse them)."""

    def __init__(self, sink: AnySink, sink_id: str, runtime: RuntimeOptions, *, skip: bool,
                 format_name: str = "", epoch: int | None = None, lease: Lease | None = None,
                 abort_baseline: frozenset[str] | None = None, committed_through: int | None = None,
                 version: int | None = None) -> None:
        self.sink = sink
        self.sink_id = sink_id
        self.runtime = runtime
        self.skip = skip
        self.format_name = format_name
        self.epoch = epoch
        self.lease = lease
        self.abort_baseline = abort_baseline
        self.committed_through = committed_through
        self.version = version
        self._register_handle_kind()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._register_handle_kind()

    def _register_handle_kind(self) -> None:
        """Register the sink's handle kind in this process (planning, task or commit
        worker): a handle class defined in ``__main__`` or a notebook comes by value, and
        cloudpickle does not run the hook that registers it."""
        ensure_registered(getattr(type(self.sink), "__handle_type__", TransactionHandle))

    # -- executor side ------------------------------------------------------------
    def write(self, iterator: Iterator[pa.RecordBatch]) -> TwoPCCommitMessage:
        """One task attempt: its batch is :attr:`version`, else the micro-batch Spark runs."""
        configure_worker_logging()
        tc = TaskContext.get()
        if tc is None:
            raise ProtocolError("twopc writers must run inside a Spark task")
        partition, attempt = tc.partitionId(), tc.taskAttemptId()
        if self.skip:
            return TwoPCCommitMessage(None, 0, partition, attempt, epoch=self.epoch)
        batch_id = self.version
        if batch_id is None:
            prop = tc.getLocalProperty(BATCH_ID_PROPERTY)
            if prop is None:
                raise ProtocolError(f"Spark did not set the {BATCH_ID_PROPERTY} task property")
            batch_id = int(prop)
        return self.write_partition(iterator, batch_id, partition, attempt, tc.attemptNumber())

    def write_partition(self, batches: Iterator[pa.RecordBatch], batch_id: int, partition: int, attempt: int,
                        attempt_number: int = 0) -> TwoPCCommitMessage:
        """One task attempt's write once its identity is known (what :meth:`write`
        does after reading Spark's ``TaskContext``): begin, invoke, prepare, with the
        executor's fault points. ``twopc.testing``'s micro-batch job calls it directly."""
        if self.committed_through is not None and batch_id <= self.committed_through:
            # Spark replays a batch whose commit its own log lacks; twopc committed it (the plan says so)
            log.info("twopc: sink %s batch %s was committed before this replay (partition %s writes nothing)",
                     self.sink_id, batch_id, partition)
            return TwoPCCommitMessage(None, 0, partition, attempt, epoch=self.epoch)
        with runtime_task():  # the driver holds the sink id's claim
            return self._write_attempt(batches, TransactionContext(self.sink_id, batch_id, partition, attempt,
                                                                   attempt_number))

    def _write_attempt(self, batches: Iterator[pa.RecordBatch], ctx: TransactionContext) -> TwoPCCommitMessage:
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
                # a record left behind would make a retry of this partition take this reported transaction for a
                # dead attempt's and roll it back: this attempt does not report it
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
        """The store of this write's ledger (in the checkpoint, or in the target), for the
        task's fence; opened without creating anything."""
        if self.runtime.in_target:
            return self._target().store(self.sink_id)
        return ledger_store(self.runtime.checkpoint_location)

    # -- driver side --------------------------------------------------------------
    def _target(self) -> TargetLedger:
        target = target_ledger_of(self.sink)
        if target is None:
            raise ProtocolError(f"{self.sink.describe()} kept this write's ledger in the target, and now has none")
        return target

    def coordinator(self, messages: Sequence[WriterCommitMessage | None] = ()) -> CommitCoordinator:
        """The coordinator of this write's commit or abort, under the owner epoch the write was
        planned under: the writer's own (a batch write's writer is the plan's), else the one
        its tasks carry (a streaming query's committing process builds its writer anew), else,
        for a micro-batch no task reported, the driver's if it still owns the ledger.

        Raises:
            FencedError: another actor owns the ledger now (nothing is touched).
        """
        epoch = self.epoch
        if epoch is None:
            epoch = next((m.epoch for m in messages if isinstance(m, TwoPCCommitMessage) and m.epoch is not None),
                         None)
        if self.runtime.in_target:
            ledger = open_target_ledger(self._target(), self.sink_id, lease=self.lease, epoch=epoch)
        else:
            ledger = CommitLedger(self.runtime.checkpoint_location, epoch=epoch)
        if epoch is None and self.runtime.txn_version is None:  # a micro-batch that no task reported
            ledger.act_for(driver_identity())
        return CommitCoordinator(self.sink, ledger, self.sink_id, keep_last=self.runtime.keep_last,
                                 retry=self.runtime.retry, format_name=self.format_name,
                                 claimed=True)  # the target and the sink id were checked at plan time

    def commit(self, messages: Sequence[WriterCommitMessage | None],
               batchId: int | None = None) -> None:  # noqa: N803 - Spark's parameter name
        """Decide and commit the batch (*batchId*: the micro-batch; a batch write's is :attr:`version`)."""
        configure_worker_logging()
        batch_id = self._batch(batchId)
        if self.skip:
            log.debug("twopc: sink %s txnVersion %s was already committed: wrote nothing", self.sink_id, batch_id)
            self._settle()
            return
        self._finish("commit", messages, batch_id)

    def abort(self, messages: Sequence[WriterCommitMessage | None],
              batchId: int | None = None) -> None:  # noqa: N803 - Spark's parameter name
        """Roll the failed write back (*batchId* as in :meth:`commit`). Never raises: Spark
        replaces the error that made it abort with a generic "Writing job failed" when
        ``abort`` raises, so what cannot be cleaned up now is left for the next start (or
        ``twopc recover``) with a warning."""
        configure_worker_logging()
        batch_id = self._batch(batchId)
        if self.skip:
            self._settle()
            return
        try:
            self._finish("abort", messages, batch_id)
        except Exception:
            log.warning("twopc: sink %s could not clean up after the failed write of batch %s; the next start "
                        "of the query (or twopc recover) will", self.sink_id, batch_id, exc_info=True)

    def _batch(self, given: int | None) -> int:
        batch_id = self.version if given is None else given
        if batch_id is None:
            raise ProtocolError("a streaming write's commit or abort needs the micro-batch id")
        return batch_id

    def _finish(self, stage: str, messages: Sequence[WriterCommitMessage | None], batch_id: int) -> BatchResult:
        coordinator = self.coordinator(messages)
        room = None
        committed = False
        try:
            handles = _handles(messages)
            if stage == "commit":
                result = coordinator.commit_batch(batch_id, handles)
                committed = True
                room = None if self.runtime.ephemeral else read_headroom(self.sink, self.sink_id)
            else:
                result = coordinator.abort_batch(batch_id, handles)
        except BaseException:
            if not self.runtime.ephemeral:
                observe_failure(coordinator.ledger, self.sink_id, self.format_name, stage, coordinator.metrics.lost,
                                retried=coordinator.metrics.retried)
            raise
        finally:
            self._settle()
            self._forget_ephemeral(committed=committed)
            self.sink.close()
        if not self.runtime.ephemeral:
            observe_commit(coordinator.ledger, self.sink_id, self.format_name, result,
                           [m for m in messages if isinstance(m, TwoPCCommitMessage)],
                           retried=coordinator.metrics.retried, headroom=room)
        return result

    def _settle(self) -> None:
        """A write whose ledger is in the target: forget its records when nothing of it is
        left; release the batch write's lease (never raises)."""
        if self.runtime.in_target:
            settle_own(self.sink, self._target(), self.sink_id, self.lease)
        elif self.lease is not None and (target := target_ledger_of(self.sink)) is not None:
            target.release(self.lease)

    def _forget_ephemeral(self, *, committed: bool) -> None:
        """Delete the temporary ledger of a write without checkpointLocation: its sink
        commits a batch in one local transaction, so nothing in it is needed afterwards;
        once the batch *committed*, neither is its marker in the target (the write's sink
        id is never used again; best effort: see :func:`~twopc._sink.purge_markers_best_effort`)."""
        if self.runtime.ephemeral and not self.runtime.in_target:
            if committed:
                purge_markers_best_effort(self.sink, self.sink_id, ALL_BATCHES)
            shutil.rmtree(self.runtime.checkpoint_location, ignore_errors=True)


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


def _quietly(fn: Callable[[Any], Any], arg: Any) -> None:
    try:
        fn(arg)
    except Exception:  # logged, not raised: the original error is what matters
        log.exception("twopc: cleanup after a failed write also failed; recovery will finish it")


class TwoPhaseCommitStreamWriter(_WriterCore, DataSourceStreamArrowWriter):
    """Streaming writer: one transaction per task attempt, one decision per micro-batch."""


class TwoPhaseCommitBatchWriter(_WriterCore, DataSourceArrowWriter):
    """Batch writer: all-or-nothing across tasks; ``txnVersion`` makes reruns write nothing."""


class TwoPhaseCommitDataSource(DataSource):
    """A Spark data source (write side) around a :class:`TwoPhaseCommitSink` class.

    Subclass it, set :attr:`sink_class` and :attr:`format_name`, and register it with
    :func:`register`; or let :func:`data_source_for` do both.
    """

    sink_class: ClassVar[type[AnySink]]
    format_name: ClassVar[str] = ""
    #: The session's ``spark.sql.streaming.checkpointLocation`` when :func:`register` ran
    #: (see :mod:`twopc._checkpoint`): a named streaming query without a
    #: ``checkpointLocation`` option keeps its ledger in ``<this>/<queryName>``, as Spark does,
    #: unless its start noted the session's folder then in :attr:`start_notes`.
    session_checkpoint_root: ClassVar[str | None] = None
    #: The session's defaults of the options the sink names in ``__session_options__``, read by
    #: :func:`register` from ``spark.twopc.<option>`` (see :mod:`twopc._session_options`).
    session_defaults: ClassVar[Mapping[str, str]] = {}
    #: The folder where the session's query listener notes, at each start of a query, the
    #: session's default checkpoint folder (None: no listener, e.g. Spark Connect).
    start_notes: ClassVar[str | None] = None

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._plan_time = True

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_plan_time"] = False  # copies Spark ships are never the plan-time instance
        return state

    @classmethod
    def name(cls) -> str:
        return cls.format_name or cls.sink_class.__name__.lower()

    @classmethod
    def session_option_names(cls) -> tuple[str, ...]:
        """The writer options that take a session default (``spark.twopc.<option>``): the
        sink class's :attr:`~TwoPhaseCommitSink.__session_options__`. A data source that imports
        its sink class only when a write needs it says them without importing it."""
        return tuple(cls.sink_class.__session_options__)

    def session_root(self) -> str | None:
        """The session's default checkpoint folder as this query's start found it
        (:func:`~twopc._checkpoint.session_root_at_start`)."""
        return session_root_at_start(self.start_notes, option(self.options, "queryName"),
                                     self.session_checkpoint_root)

    def build_sink(self, options: Mapping[str, str]) -> AnySink:
        """The sink of one write, from its writer *options* less the runtime's
        (:func:`~twopc._runtime_options.sink_options`). Default:
        ``sink_class.from_options(those options)``.

        Raises:
            ConfigurationError: the options are wrong.
        """
        return self.sink_class.from_options(sink_options(options))

    def _session_options(self, options: dict[str, str]) -> dict[str, str]:
        """*options* with the session's defaults, the sink's ``__session_options__`` pinned to
        what the write's checkpoint recorded (:func:`~twopc._session_options.with_session_defaults`)."""
        names = self.sink_class.__session_options__
        if not names:
            return options
        location = option(options, "checkpointLocation")
        record = CommitLedger(location, read_only=True).target_record() if location else None
        return with_session_defaults(options, self.session_defaults, names, record.options if record else None,
                                     location)

    def writer(self, schema: StructType, overwrite: bool) -> TwoPhaseCommitBatchWriter:
        return self._writer(TwoPhaseCommitBatchWriter, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> TwoPhaseCommitStreamWriter:  # noqa: N802 - Spark's method name
        return self._writer(TwoPhaseCommitStreamWriter, schema, overwrite)

    def _writer(self, kind: type[W], schema: StructType, overwrite: bool) -> W:
        streaming = issubclass(kind, DataSourceStreamArrowWriter)
        options = with_checkpoint(self.options, streaming=streaming,
                                  session_root=self.session_root() if streaming else None)
        options = self._session_options(options)
        sink = self.build_sink(options)
        arrow_schema = to_arrow_schema(schema, timezone="UTC")
        checkpointed = bool(option(options, "checkpointLocation"))
        from ._plans import Write, plan_write, start_agent_early  # here: a task never loads the plans

        if self._plan_time and not checkpointed and not streaming:
            start_agent_early(sink, options, overwrite=overwrite)
        capability(sink, WriteSetup).configure_write(arrow_schema, overwrite=overwrite, streaming=streaming,
                                                     checkpointed=checkpointed)
        configure_worker_logging()
        plan = plan_write(Write(sink, options, self.options, arrow_schema, streaming, self._plan_time, self.name(),
                                class_path(self.sink_class)))
        return kind(sink, plan.sink_id, plan.runtime, skip=plan.skip, format_name=self.name(), epoch=plan.epoch,
                    lease=plan.lease, abort_baseline=plan.abort_baseline, committed_through=plan.committed_through,
                    version=None if streaming else plan.runtime.txn_version)


def data_source_for(sink_class: type[AnySink], name: str) -> type[TwoPhaseCommitDataSource]:
    """Return a data source class for *sink_class*, usable as ``format(name)``."""
    return type(
        f"{sink_class.__name__}DataSource",
        (TwoPhaseCommitDataSource,),
        {"sink_class": sink_class, "format_name": name, "__module__": sink_class.__module__},
    )
