"""The two commit modes of one ``twopc-jdbc`` write side by side (:class:`TwoModeSink`, the base of
:class:`~twopc.sinks.JdbcSink`). One write's transactions and handles are not all of the mode settled at plan time: a
PostgreSQL task without a free prepared-transaction slot stages; a streaming query's micro-batches may settle different
modes; recovery reads handles of earlier writes. So each call that takes a transaction or handle goes to the sink of its
kind: a :class:`~twopc.sinks.sql._sql_dialect.SqlTxn` or a :class:`~twopc.sinks._handles.PreparedSqlHandle` to the
prepared sink, the rest to the :class:`~twopc.sinks.StagingSink`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from twopc import (
    CommitOutcome,
    ConfigurationError,
    SinkError,
    TransactionContext,
    TransactionHandle,
    TwoPhaseCommitSink,
)
from twopc.spi import BatchCommit, DecisionHook, Inspectable, MarkerPurge, ProtocolError, capability

from .._handles import PreparedSqlHandle, StagingHandle
from ._prepared_sink import PreparedSqlSink
from ._registry import dialect_for
from ._sql_dialect import SqlTxn
from .options import JdbcOptions

if TYPE_CHECKING:
    import pyarrow as pa

    from twopc.spi import PreparedDetail

    from ._staging_sink import StagingSink
    from ._staging_tables import StagingTables

__all__ = ["PREPARED", "STAGING", "SlotClaimingSink", "TwoModeSink"]

log = logging.getLogger("twopc.sinks.jdbc")

PREPARED = "prepared"
STAGING = "staging"


@runtime_checkable
class SlotClaimingSink(Protocol):
    """A prepared sink whose tasks claim a prepared-transaction slot before they begin (PostgreSQL)."""

    def begin_with_slot(self, context: TransactionContext, *, keep_driver_slot: bool) -> tuple[Any, Any]: ...
    def begin_move(self, context: TransactionContext) -> Any: ...
    def load_staged(self, txn: Any, stage: Any, names: Sequence[str], txn_ids: Sequence[str], rows: int) -> None: ...
    def pre_commit(self, txn: Any) -> TransactionHandle: ...
    def rollback(self, txn: Any) -> None: ...


class TwoModeSink(TwoPhaseCommitSink[dict[str, Any], Any, TransactionHandle], BatchCommit, DecisionHook, Inspectable,
                  MarkerPurge):
    """Both concrete sinks of one ``twopc-jdbc`` write, built lazily; the subclass settles
    :attr:`mode` and :attr:`may_stage` and opens transactions."""

    __handle_type__ = TransactionHandle

    def __init__(self, options: JdbcOptions) -> None:
        self.options = options
        self.write_mode = options.save_mode or "append"
        #: the settled commit mode, ``None`` while open (and in processes that never settle it)
        self.mode: str | None = STAGING if options.commit_mode == STAGING else None
        #: prepared mode: tasks that find no prepared-transaction slot stage (settled by validate)
        self.may_stage = False
        self._schema: pa.Schema | None = None
        self._schema_ipc: bytes | None = None  # the schema as pickled (see __getstate__)
        self._overwrite = False
        self._streaming = False
        self._prepared: PreparedSqlSink[Any, Any] | None = None
        self._staging: StagingSink | None = None
        self._tables: StagingTables | None = None
        #: driver: the staged attempts each moving transaction took over, and those deleted since
        self._moves: dict[str, tuple[StagingHandle, ...]] = {}
        self._cleared: set[str] = set()

    @property
    def schema(self) -> pa.Schema | None:
        """The written DataFrame's Arrow schema, once given."""
        if self._schema is None and self._schema_ipc is not None:
            import pyarrow as pa
            self._schema = pa.ipc.read_schema(pa.py_buffer(self._schema_ipc))
        return self._schema

    @schema.setter
    def schema(self, value: pa.Schema | None) -> None:
        self._schema, self._schema_ipc = value, None

    def _prepared_sink(self) -> PreparedSqlSink[Any, Any]:
        if self._prepared is None:
            o = self.options
            if (sink := dialect_for(o.dialect).prepared_sink(o)) is None:
                raise ConfigurationError(
                    f"{o.dialect} has no prepared-transaction mode in twopc: use commitMode=staging")
            self._prepared = sink
        return self._prepared

    def _has_prepared_mode(self) -> bool:
        return dialect_for(self.options.dialect).prepares

    def _staging_sink(self) -> StagingSink:
        if self._staging is None:
            from ._staging_sink import StagingSink
            self._staging = StagingSink.from_jdbc_options(self.options, mode=self.write_mode)
        if self._staging.schema is None and self.schema is not None:
            self._staging.configure_write(self.schema, overwrite=self._overwrite, streaming=self._streaming,
                                          checkpointed=True)
        return self._staging

    def _stage_tables(self) -> StagingTables:
        """The staging mode's bookkeeping: the staging sink when made, else the tables alone
        (a prepared write's commit then loads neither the staging mode nor pyarrow)."""
        if self._staging is not None:
            return self._staging
        if self._tables is None:
            from ._staging_tables import BATCH_TABLE, StagingTables
            self._tables = StagingTables(self.options, mode=self.write_mode, batch_table=BATCH_TABLE)
        return self._tables

    def _for(self, handle: TransactionHandle) -> TwoPhaseCommitSink[Any, Any, Any]:
        if isinstance(handle, StagingHandle):
            return self._staging_sink()
        if isinstance(handle, PreparedSqlHandle) and self._has_prepared_mode():
            prepared = self._prepared_sink()
            if isinstance(handle, prepared.__handle_type__):
                return prepared
        raise ProtocolError(
            f"handle {type(handle).__name__} {handle.txn_id!r:.80} does not belong to {self.describe()}")

    def _txn_backend(self, txn: Any) -> TwoPhaseCommitSink[Any, Any, Any]:
        return self._prepared_sink() if isinstance(txn, SqlTxn) else self._staging_sink()

    def _may_have_staged(self) -> bool:
        return self.mode != PREPARED or self.may_stage

    def invoke(self, txn: Any, value: dict[str, Any]) -> None:
        self._txn_backend(txn).invoke(txn, value)

    def invoke_batch(self, txn: Any, batch: pa.RecordBatch) -> None:
        self._txn_backend(txn).invoke_batch(txn, batch)

    def pre_commit(self, txn: Any) -> TransactionHandle:
        return cast(TransactionHandle, self._txn_backend(txn).pre_commit(txn))

    def rollback(self, txn: Any) -> None:
        self._txn_backend(txn).rollback(txn)

    def commit(self, handle: TransactionHandle) -> CommitOutcome:
        """Commit through the mode that made *handle* (a foreign handle: ``ProtocolError``)."""
        return self._for(handle).commit(handle)

    def before_decision(self, batch_id: int, handles: Sequence[TransactionHandle]) -> Sequence[TransactionHandle]:
        """A batch mixing prepared and staged attempts: move the staged rows into one more prepared transaction named
        instead of them, so constraints are checked before the decision. Any other batch: as it is. Raises
        ``TransactionLostError``: staged rows are missing; nothing is decided; ``SinkError``: the server refused the
        rows or had no slot within ``lockTimeout``; the batch fails."""
        staged = [h for h in handles if isinstance(h, StagingHandle)]
        if not staged or len(staged) == len(handles):
            return handles
        prepared = self._prepared_sink()
        if not isinstance(prepared, SlotClaimingSink) or self.schema is None:
            raise ProtocolError(f"{self.describe()}: batch {batch_id} mixes staged and prepared attempts, which "
                                f"only a prepared-mode write to PostgreSQL that knows its schema makes")
        first = staged[0]
        txn = prepared.begin_move(TransactionContext(first.sink_id, batch_id, first.partition_id, first.attempt_id))
        try:
            prepared.load_staged(txn, self._staging_sink().stage, self.schema.names, [h.txn_id for h in staged],
                                 sum(h.rows for h in staged))
            moved = prepared.pre_commit(txn)
        finally:
            prepared.rollback(txn)  # nothing when prepared or already rolled back
        self._moves[moved.txn_id] = tuple(staged)
        log.info("twopc-jdbc: batch %s of %s: %s of %s partitions staged their rows (no free prepared-transaction "
                 "slot); moved them (%s rows) into the prepared transaction %s before the decision", batch_id,
                 self.options.table, len(staged), len(handles), moved.rows, moved.txn_id)
        return [*(h for h in handles if not isinstance(h, StagingHandle)), moved]

    def commit_all(self, handles: Sequence[TransactionHandle], *,
                   recovering: bool = False) -> list[CommitOutcome] | None:
        """Staging handles in one local transaction; prepared ones by :meth:`PreparedSqlSink.commit_all`,
        then the staged rows a moving transaction took over are deleted (a mix: ``ProtocolError``)."""
        if handles and all(isinstance(h, StagingHandle) for h in handles):
            return self._staging_sink().commit_all(handles, recovering=recovering)  # type: ignore[arg-type]  # all StagingHandle: checked above
        if any(isinstance(h, StagingHandle) for h in handles):
            raise ProtocolError(f"{self.describe()}: a decision names staged and prepared attempts together; their "
                                f"commits could not be one (a decision moves staged rows first: before_decision)")
        if handles and all(isinstance(h, PreparedSqlHandle) for h in handles):
            prepared = self._for(handles[0])
            if all(self._for(h) is prepared for h in handles):
                outcomes = capability(prepared, BatchCommit).commit_all(handles, recovering=recovering)
                self._clear_moved(handles)
                return outcomes
        return None

    def _clear_moved(self, handles: Sequence[TransactionHandle]) -> None:
        """Delete the staged rows committed moving transactions took over (best effort: the sweep follows)."""
        done = [s for h in handles for s in self._moves.pop(h.txn_id, ())]
        if not done:
            return
        try:
            self._staging_sink().delete_staged([s.txn_id for s in done])
        except SinkError as exc:
            log.info("twopc-jdbc: could not delete the moved staged rows now (%s): the batch's sweep deletes them", exc)
            return
        self._cleared.update(s.txn_id for s in done)

    def abort(self, handle: TransactionHandle) -> None:
        """Roll back through the mode that made *handle*. Idempotent; ``ProtocolError`` when it was
        committed or the handle is foreign."""
        if handle.txn_id in self._cleared:  # moved by a committed transaction, staged rows deleted since
            self._cleared.discard(handle.txn_id)
            return
        self._for(handle).abort(handle)

    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> list[TransactionHandle]:
        """Prepared transactions and staged attempts of *sink_id* (no staging read when none can stage)."""
        prepared = self._prepared_sink().list_prepared(sink_id, batch_id) if self._has_prepared_mode() else []
        staged = self._stage_tables().list_prepared(sink_id, batch_id) if self._may_have_staged() else []
        return [*prepared, *staged]

    def prepared_details(self, sink_id: str) -> list[PreparedDetail]:
        """:meth:`list_prepared` with what each mode's target tells about them."""
        prepared = self._prepared_sink().prepared_details(sink_id) if self._has_prepared_mode() else []
        return [*prepared, *self._stage_tables().prepared_details(sink_id)]

    def purge_markers(self, sink_id: str, below_batch: int) -> int:
        """The markers of both modes this write may have used; both are tried before an error is raised."""
        purges: list[Callable[[str, int], int]] = []
        if self._has_prepared_mode() and self.mode != STAGING:
            purges.append(capability(self._prepared_sink(), MarkerPurge).purge_markers)
        if self._may_have_staged():  # a batch whose every task staged has a staging marker
            purges.append(self._stage_tables().purge_markers)
        removed, errors = 0, []
        for purge in purges:
            try:
                removed += purge(sink_id, below_batch)
            except SinkError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
        return removed

    def close(self) -> None:
        for s in (self._prepared, self._staging):
            if s is not None:
                s.close()

    def __getstate__(self) -> dict[str, Any]:
        state = {**self.__dict__, "_prepared": None, "_staging": None, "_tables": None, "_moves": {}, "_cleared": set()}
        if self._schema is not None:
            # IPC bytes, read on first use: a worker that only commits never loads pyarrow (~0.15 s)
            state["_schema"], state["_schema_ipc"] = None, self._schema.serialize().to_pybytes()
        return state
