"""The executor side of a prepared-transaction SQL sink: one transaction per task attempt, and
every failure leaves nothing behind (a driver error rolls back and becomes a credential-free
:class:`~twopc.SinkError`; a broken connection is discarded, so the server rolls back)."""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, NoReturn, TypeVar

from twopc import ConfigurationError, SinkError, TransactionContext
from twopc.spi import ProtocolError
from twopc.spi.lease import hold_for_prepare

from .._handles import PreparedSqlHandle
from ._prepared_committer import MARKER_COLUMNS
from ._sql_dialect import SqlDialect, SqlTxn
from ._sql_target import SqlTarget, give_back
from ._target_ledger import SqlTargetLedger

if TYPE_CHECKING:
    import pyarrow as pa

    from ._column_match import TableColumn

__all__ = ["PreparedWriter"]

log = logging.getLogger("twopc.sinks.sql")

C = TypeVar("C", bound="TableColumn")
H = TypeVar("H", bound=PreparedSqlHandle)


class PreparedWriter(Generic[C, H]):
    """Begin, load, prepare or roll back one task attempt's transaction (the executor side of
    :class:`~twopc.sinks.sql._prepared_sink.PreparedSqlSink`, which sets the attributes below);
    also the :class:`~twopc.sinks.sql._sql_dialect.TxnControl` the dialect's ``prepare`` gets."""

    target: SqlTarget  #: the database, its connections and error mapping
    dialect: SqlDialect[C]  #: the database's SQL
    __handle_type__: ClassVar[type[Any]]  #: the handle class :meth:`pre_commit` makes
    _open: weakref.WeakSet[SqlTxn[C]]  #: the transactions begun and not yet prepared or rolled back (never pickled)

    def make_gid(self, context: TransactionContext) -> str:
        """A new transaction id for *context*, within the database's limit. Raises ``ConfigurationError``: the sink
        id is invalid or too long for the database's ids."""
        return context.xid().fitting(self.target.database.max_id_bytes, self.target.database.name)

    def begin_transaction(self, context: TransactionContext) -> SqlTxn[C]:
        """Check out a connection, start the write transaction with the session settings and read the table's columns.
        Raises ``SinkUnavailableError``: no connection; ``SchemaMismatchError``: the table no longer exists;
        ``ConfigurationError``: the sink id cannot make a transaction id here; ``SinkError``: the server refused a
        statement (e.g. the session init statement)."""
        gid = self.make_gid(context)
        hold_for_prepare(SqlTargetLedger(self.target), context.sink_id)  # the core API: see hold_for_prepare
        txn: SqlTxn[C] = SqlTxn(context, gid, self.target.checkout())
        self._open.add(txn)
        try:
            self.dialect.begin(txn)
        except self.target.database.driver_error as exc:
            self.fail(txn, exc, "begin a transaction")
        except BaseException:
            self.release(txn, broken=txn.state != "none")
            raise
        log.debug("twopc: began %s", gid)
        return txn

    def usable(self, txn: SqlTxn[C]) -> Any:
        """The DB-API connection of an open, unprepared transaction. Raises ``ProtocolError``: it is prepared already;
        ``SinkError``: it was rolled back."""
        if txn.prepared:
            raise ProtocolError(f"transaction {txn.gid} is already prepared")
        if txn.failed is not None or txn.conn is None:
            raise SinkError(f"transaction {txn.gid} was already rolled back: {txn.failed or 'closed'}")
        return txn.conn.driver_connection

    def invoke(self, txn: SqlTxn[C], value: dict[str, Any]) -> None:
        """Buffer one row (a dict of column -> value), sent ``batch_size`` at a time. Raises ``SchemaMismatchError``: a
        key is not a column of the table; ``ConfigurationError``: a value cannot be stored (e.g. a NUL byte in text);
        ``SinkError``: the server rejected the rows (the transaction is rolled back)."""
        self.usable(txn)
        if not isinstance(value, Mapping):
            raise ConfigurationError(f"{type(self).__name__}.invoke takes a dict of column -> value, "
                                     f"got {type(value).__name__}")
        txn.pending.append(dict(value))
        if len(txn.pending) >= self.target.options.batch_size:
            self._flush_rows(txn)

    def _flush_rows(self, txn: SqlTxn[C]) -> None:
        self.usable(txn)
        pending, txn.pending = txn.pending, []
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for row in pending:
            groups.setdefault(tuple(row), []).append(row)
        with self.rolling_back(txn, f"write rows to {self.target.table_label}"):
            for keys, rows in groups.items():
                if not keys:
                    raise ConfigurationError(f"{type(self).__name__}.invoke got an empty row (no columns)")
                cols = self.target.match(list(keys), None, txn.columns, check_types=False, check_required=False)
                self.dialect.load_rows(txn, cols, keys, rows)
                txn.rows += len(rows)

    def invoke_batch(self, txn: SqlTxn[C], batch: pa.RecordBatch) -> None:
        """Load an Arrow batch, without Python objects per row where the dialect can. Raises ``SchemaMismatchError``: a
        batch column is not in the table or has an incompatible type; ``ConfigurationError``: a value cannot be stored
        (NUL bytes, NaN on MySQL...); ``SinkError``: the server rejected the data (a streaming dialect may report it at
        a later call or at :meth:`pre_commit`). Each error rolls the transaction back."""
        self.usable(txn)
        if batch.num_rows == 0:
            return
        if txn.pending:
            self._flush_rows(txn)
        with self.rolling_back(txn, f"write rows to {self.target.table_label}"):
            plan = txn.plans.get(batch.schema)
            if plan is None:
                cols = self.target.match(batch.schema.names, [f.type for f in batch.schema], txn.columns,
                                         check_types=True, check_required=False)
                if not cols:
                    raise ConfigurationError(f"{type(self).__name__}.invoke_batch got a batch without columns")
                plan = txn.plans[batch.schema] = self.dialect.plan(batch.schema, cols)
            self.dialect.load_batch(txn, batch, plan)
            txn.rows += batch.num_rows

    def pre_commit(self, txn: SqlTxn[C]) -> H:
        """Finish loading, write the marker row, prepare, check the database prepared it, and release the connection.
        Raises ``SinkError``: the server rejected the rows, the marker or the prepare; nothing is left prepared;
        ``SinkUnavailableError``: the connection broke (an orphan prepare is rolled back here when possible, else by the
        next sweep or recovery)."""
        self.usable(txn)
        if txn.pending:
            self._flush_rows(txn)
        with self.rolling_back(txn, f"write rows to {self.target.table_label}"):
            self.dialect.end_load(txn)
        self.dialect.prepare(txn, self)
        log.debug("twopc: prepared %s (%s rows)", txn.gid, txn.rows)
        c = txn.context
        return self.__handle_type__(txn.gid, c.sink_id, c.batch_id, c.partition_id, c.attempt_id,
                                table=self.target.table_label, rows=txn.rows)

    def rollback(self, txn: SqlTxn[C]) -> None:
        """Roll back an open, unprepared transaction. Idempotent; never raises."""
        if txn.prepared or txn.conn is None:
            return
        broken = self.dialect.rollback(txn)
        txn.failed = txn.failed or "rolled back"
        self.release(txn, broken=broken)

    def close(self) -> None:
        """Roll back this writer's open (never prepared) transactions."""
        for txn in list(self._open):
            self.rollback(txn)

    def marker_row(self, txn: SqlTxn[C]) -> tuple[str, tuple[Any, ...]]:
        """The marker row's ``INSERT`` for *txn* and its parameters."""
        t = self.target
        cols = ", ".join(t.quote(c) for c in MARKER_COLUMNS)
        c = txn.context
        return (f"INSERT INTO {t.qualified(t.marker)} ({cols}) VALUES (%s, %s, %s, %s, %s)",
                (txn.gid, c.sink_id, c.batch_id, c.partition_id, txn.rows))

    def release(self, txn: SqlTxn[C], *, broken: bool) -> None:
        """Give the connection back, or discard it when *broken* or its loader was still open."""
        if txn.loader is not None and txn.loader.drop():
            broken = True
        conn, txn.conn = txn.conn, None
        self._open.discard(txn)
        give_back(conn, broken=broken)

    @contextlib.contextmanager
    def rolling_back(self, txn: SqlTxn[C], action: str) -> Iterator[None]:
        """Roll *txn* back when the block fails: :meth:`fail` for a driver error, else :meth:`abandon`."""
        try:
            yield
        except self.target.database.driver_error as exc:
            self.fail(txn, exc, action)
        except BaseException as exc:
            self.abandon(txn, exc)
            raise

    def abandon(self, txn: SqlTxn[C], exc: BaseException) -> None:
        """Roll back after a non-driver error (our own check, an interrupt)."""
        txn.failed = f"{type(exc).__name__}: {exc}"[:200]
        self.rollback(txn)

    def fail(self, txn: SqlTxn[C], exc: BaseException, action: str) -> NoReturn:
        """Roll the transaction back and raise a credential-free :class:`SinkError`."""
        broken = self.target.database.is_connection_error(exc)
        txn.failed = f"{self.target.database.error_code(exc) or 'connection'} during {action}"
        if broken:
            self.release(txn, broken=True)
        else:
            self.rollback(txn)
        raise self.target.map_error(exc, action) from None
