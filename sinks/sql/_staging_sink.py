"""Portable ``staging`` commit mode: exactly-once writes to any SQLAlchemy database with transactions. Each task attempt
commits its rows, tagged with its transaction id, into a staging table: its *prepare*. The driver's commit runs ONE
local transaction that checks the batch marker (a replay answers ``ALREADY_COMMITTED``), checks every chosen attempt's
staged row count (a vanished attempt makes it raise, nothing written), runs the write's DDL, moves the rows and inserts
the batch marker. Staged rows of attempts not chosen are deleted by :meth:`StagingSink.abort`; those of dead writes
without a checkpoint by a later write (``stagingRetention``), which is always safe: a commit missing rows writes
nothing."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, Self

from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from twopc import CommitShape, ConfigurationError, TransactionContext, TwoPhaseCommitSink
from twopc.spi import BatchCommit, Inspectable, MarkerPurge, NamedTarget, ProtocolError, WriteSetup

from .._handles import StagingHandle
from ._sql_target import SqlNamedTarget
from ._staging_committer import StagingCommitter
from ._staging_tables import BATCH_TABLE, TXN_COLUMN, StagingTables
from .options import JDBC_FORMAT, JdbcOptions, safe_url

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["StagingHandle", "StagingSink"]

log = logging.getLogger("twopc.sinks.staging")

@dataclass(eq=False)
class _StageTxn:
    context: TransactionContext
    txn_id: str
    conn: Connection | None
    rows: int = 0
    prepared: bool = False
    copy: Any = None  # PostgreSQL: the CopyStream into the staging table
    plans: dict[pa.Schema, Any] = field(default_factory=dict)


class StagingSink(StagingCommitter, TwoPhaseCommitSink[dict[str, Any], _StageTxn, StagingHandle], WriteSetup,
                  BatchCommit, Inspectable, MarkerPurge, SqlNamedTarget):
    """Exactly-once writes through a staging table and one local commit transaction (the driver's
    side is :class:`~twopc.sinks.sql._staging_committer.StagingCommitter`).

    Args:
        url: a JDBC URL or a SQLAlchemy URL with credentials (``postgresql+psycopg://``,
            ``mysql+pymysql://``, ``sqlite:///file.db``, ...).
        table: ``[schema.]table`` in the database's syntax (quote special names).
        mode: Spark's save mode: ``append``, ``overwrite``, ``errorifexists``, ``ignore``.
        batch_table: the table of committed batch markers.
        **options: ``twopc-jdbc``'s options as keywords (:mod:`twopc.sinks.sql.options._jdbc_options`),
            e.g. ``staging_table``, ``staging_retention``, ``upsert_keys``, ``user``, ``password``.

    Raises:
        ConfigurationError: an argument is invalid.
    """

    __handle_type__ = StagingHandle
    reopen_options = NamedTarget.reopen_options  # no format builds it from options: it records none

    def __init__(self, url: Any, table: str, *, mode: str = "append", batch_table: str = "twopc_batches",
                 **options: Any) -> None:
        super().__init__(JdbcOptions.from_kwargs(url, table, format_name=JDBC_FORMAT, dialect=None, **options),
                         mode=mode, batch_table=batch_table)

    @classmethod
    def from_jdbc_options(cls, options: JdbcOptions, *, mode: str) -> Self:
        """The staging sink of a ``twopc-jdbc`` write in save mode *mode*."""
        sink = cls.__new__(cls)
        StagingTables.__init__(sink, options, mode=mode, batch_table=BATCH_TABLE)
        return sink

    def describe(self) -> str:
        return (f"{self.dialect_name} {safe_url(self.options.url)} table {self.table.display()} "
                f"(staging via {self.stage.display()})")

    def commit_shape(self, handles: Sequence[StagingHandle] = ()) -> CommitShape:
        """Always one local transaction: the move of the batch's rows with its marker."""
        return CommitShape.LOCAL_TRANSACTION

    def commit_may_be_refused(self) -> str:
        """Always a reason: the target's constraints see the rows only after the decision."""
        return (f"the staging mode checks {self.table.display()}'s constraints (keys, NOT NULL, checks, "
                f"foreign keys, triggers) only when the driver moves the staged rows into it, after the batch "
                f"is decided")

    def commit_mode(self) -> str:
        """Staging: each task stages its rows; the driver moves a batch in one local transaction."""
        return (f"staging mode: tasks stage rows in {self.stage.display()}, the driver moves each batch into "
                f"{self.table.display()} in one local transaction with its batch marker (save mode {self.mode})")

    def configure_write(self, schema: pa.Schema, *, overwrite: bool, streaming: bool, checkpointed: bool) -> None:
        """Remember the schema; Spark's overwrite flag turns ``append`` into ``overwrite``
        (``outputMode("complete")``: each micro-batch's commit replaces the rows). Raises
        ``ConfigurationError``: overwrite together with ``saveMode`` errorifexists/ignore."""
        if overwrite:
            if self.mode in ("errorifexists", "ignore"):
                raise ConfigurationError(f"saveMode {self.mode} contradicts Spark's overwrite mode: drop one of them")
            self.mode = "overwrite"
        self.schema = schema
        self.streaming = streaming

    def begin_transaction(self, context: TransactionContext) -> _StageTxn:
        """Open a local transaction for this attempt's staged rows (``SinkUnavailableError``: no connection)."""
        txn_id = context.xid().text
        conn = self.connect()
        txn = _StageTxn(context, txn_id, conn)
        try:
            self.begin(conn)
            if self.dialect.staging_copy is not None:
                txn.copy = self.dialect.staging_copy(conn, self.stage, txn_id)  # the dialect's bulk loader
        except SQLAlchemyError as exc:
            self._close(txn)
            raise self.error(exc, "begin a staging transaction") from None
        return txn

    def invoke(self, txn: _StageTxn, value: dict[str, Any]) -> None:
        """Stage one row (dict of column -> value)."""
        import pyarrow as pa  # here, as in the other methods that stage rows: a commit never loads pyarrow
        self.invoke_batch(txn, pa.RecordBatch.from_pylist([value]))

    def invoke_batch(self, txn: _StageTxn, batch: pa.RecordBatch) -> None:
        """Stage an Arrow batch: the dialect's bulk loader (PostgreSQL COPY), else multi-row ``INSERT``. Raises
        ``ConfigurationError``: a string holds a NUL byte; ``SinkError``: the database rejected the rows (the attempt is
        rolled back)."""
        if txn.conn is None or txn.prepared:
            raise ProtocolError(f"staging transaction {txn.txn_id} is not open")
        if batch.num_rows == 0:
            return
        try:
            if txn.copy is not None:
                plan = txn.plans.get(batch.schema)
                if plan is None:
                    plan = txn.plans[batch.schema] = txn.copy.plan_for(batch.schema, self.options.copy_format)
                txn.copy.write_batch(batch, plan)
            else:
                self._insert_batch(txn, batch)
            txn.rows += batch.num_rows
        except Exception as exc:  # noqa: BLE001 - rolled back, then re-raised (a database error as a SinkError)
            self._stage_failed(txn, exc)

    def _stage_failed(self, txn: _StageTxn, exc: Exception) -> NoReturn:
        """Roll back and raise: a database error as a credential-free :class:`SinkError`, else as it is."""
        self.rollback(txn)
        if isinstance(exc, SQLAlchemyError) or (txn.copy is not None and isinstance(exc, self.dialect.driver_error)):
            raise self.error(exc, f"stage rows for {self.table.display()}") from None
        raise exc

    def _insert_batch(self, txn: _StageTxn, batch: pa.RecordBatch) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        from ._json_values import is_nested, json_texts
        assert txn.conn is not None
        names = batch.schema.names
        columns = []
        dialect_values = self.dialect.staging_values
        for name, arr, f in zip(names, batch.columns, batch.schema, strict=True):
            if dialect_values is not None:  # the prepared sink's values, checked by its rules
                columns.append(dialect_values(arr, name, self.table.display()))
                continue
            if is_nested(f.type):
                arr = json_texts(arr)  # fits only JSON columns (or SQLite's untyped ones)
            elif (pa.types.is_string(f.type) or pa.types.is_large_string(f.type)) and pc.any(
                    pc.match_substring(arr, "\x00")).as_py():
                raise ConfigurationError(
                    f"column {name!r}: a value contains a NUL byte (\\x00), which the database cannot store "
                    f"in text; remove it before writing. Nothing was written")
            values = arr.to_pylist()
            if pa.types.is_timestamp(f.type) and f.type.tz is not None:
                values = [v.astimezone(dt.UTC).replace(tzinfo=None) if v is not None else None for v in values]
            columns.append(values)
        cols = ", ".join(self.q(n) for n in [TXN_COLUMN, *names])
        mark = "%s" if txn.conn.dialect.paramstyle in ("format", "pyformat") else "?"  # the driver's own
        marks = ", ".join([mark] * (len(names) + 1))
        stmt = f"INSERT INTO {self.stage.quoted(txn.conn.dialect)} ({cols}) VALUES ({marks})"
        rows = list(zip([txn.txn_id] * batch.num_rows, *columns, strict=True))
        size = self.options.batch_size
        for i in range(0, len(rows), size):
            txn.conn.exec_driver_sql(stmt, rows[i:i + size])

    def pre_commit(self, txn: _StageTxn) -> StagingHandle:
        """Commit the staged rows locally (durable, invisible in the target); on failure nothing is staged."""
        if txn.conn is None or txn.prepared:
            raise ProtocolError(f"staging transaction {txn.txn_id} is not open")
        try:
            if txn.copy is not None:
                txn.copy.end()
            txn.conn.commit()
        except Exception as exc:  # noqa: BLE001 - rolled back, then re-raised (a database error as a SinkError)
            self._stage_failed(txn, exc)
        txn.prepared = True
        self._close(txn)
        ctx = txn.context
        return StagingHandle(txn.txn_id, ctx.sink_id, ctx.batch_id, ctx.partition_id, ctx.attempt_id,
                             table=self.table.display(), stage_table=self.stage.display(), rows=txn.rows,
                             write=self.commit_write())

    def rollback(self, txn: _StageTxn) -> None:
        """Discard an attempt's unstaged rows. Idempotent; never raises."""
        if txn.prepared or txn.conn is None:
            return
        if txn.copy is not None:
            txn.copy.cancel()
        try:
            txn.conn.rollback()
        except Exception:
            log.debug("twopc staging: rollback of %s failed", txn.txn_id, exc_info=True)
            with contextlib.suppress(Exception):  # the connection is being discarded anyway
                txn.conn.invalidate()
        self._close(txn)

    @staticmethod
    def _close(txn: _StageTxn) -> None:
        conn, txn.conn = txn.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # releasing must not mask the error being handled
                conn.close()
