"""What the two sides of a prepared-transaction SQL sink share, and what a dialect supplies.

:class:`SqlDialect` holds the configuration, the display names, the connections (a
per-process pool, and a *control* connection for the driver's statements, retried once on
a new connection when it turns out dead: every control statement is idempotent), and the
hooks a dialect implements (methods that raise ``NotImplementedError`` here). The writer
(:mod:`twopc.sinks.sql.prepared._writer`, executor side) and the committer
(:mod:`twopc.sinks.sql.prepared._committer`, driver side) build on it, like Flink Sink V2's
``SinkWriter`` and ``Committer``; :class:`twopc.sinks.sql.PreparedSqlSink` joins them.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import pyarrow as pa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from twopc import SinkError, TransactionContext
from twopc.spi import SchemaMismatchError, SinkUnavailableError, redact

from .._names import TableName
from .._registry import DialectSpec
from ..options._jdbc_options import JdbcOptions
from ..options._jdbc_url import safe_url
from ..types._column_match import TableColumn, match_columns
from ._engines import engine_for
from ._server_instance import server_instance

if TYPE_CHECKING:
    from sqlalchemy.pool import PoolProxiedConnection

__all__ = ["DialectSpec", "SqlDialect", "SqlTxn", "give_back"]

log = logging.getLogger("twopc.sinks.sql")

C = TypeVar("C", bound=TableColumn)
R = TypeVar("R")


@dataclass(eq=False)
class SqlTxn(Generic[C]):
    """The open transaction of one task attempt (process-local, never pickled).

    Attributes:
        context: the attempt.
        gid: its transaction id (canonical :class:`twopc.Xid`).
        conn: the pooled connection it writes on, ``None`` once released.
        columns: the target's columns, read when the transaction began.
        rows: rows written so far.
        pending: dict rows buffered by :meth:`PreparedSqlSink.invoke`.
        failed: why it was rolled back, once it was.
        prepared: set when the database has prepared it.
        plans: per Arrow schema, what the dialect planned for loading it.
        state: the dialect's own progress marker (e.g. XA's ``active``/``idle``).
        session_id: the server's id of the write session, when the dialect needs it.
        loader: the dialect's loading state (PostgreSQL: its COPY stream).
    """

    context: TransactionContext
    gid: str
    conn: PoolProxiedConnection | None
    columns: list[C] = field(default_factory=list)
    rows: int = 0
    pending: list[dict[str, Any]] = field(default_factory=list)
    failed: str | None = None
    prepared: bool = False
    plans: dict[pa.Schema, Any] = field(default_factory=dict)
    state: str = "none"
    session_id: int = 0
    loader: Any = None


def give_back(conn: PoolProxiedConnection | None, *, broken: bool) -> None:
    """Return *conn* to the pool (whose reset rolls back an open, unprepared transaction; a
    prepared one no longer belongs to the session), or invalidate it when *broken*. Never
    raises."""
    if conn is None:
        return
    try:
        if broken:
            conn.invalidate()
        else:
            conn.close()
    except Exception:
        log.debug("twopc: releasing a connection failed", exc_info=True)


class SqlDialect(Generic[C]):
    """Configuration, connections and dialect hooks of a prepared-transaction SQL sink."""

    #: what the base needs to know about the database
    spec: ClassVar[DialectSpec]

    #: the handle class the sink makes (a :class:`~twopc.sinks.PreparedSqlHandle` kind)
    handle_type: ClassVar[type[Any]]
    options: JdbcOptions
    _target: TableName
    _marker: TableName
    _control: PoolProxiedConnection | None
    _open: weakref.WeakSet[SqlTxn[C]] | None

    @property
    def table(self) -> str:
        """The target table, as a display name (quoted where needed)."""
        return self._target.display()

    @property
    def marker_table(self) -> str:
        """The marker table, as a display name."""
        return self._marker.display()

    @property
    def batch_size(self) -> int:
        """Rows per multi-row ``INSERT`` (dialects that insert)."""
        return self.options.batch_size

    def commit_mode(self) -> str:
        """Prepared mode: one prepared transaction per task attempt, committed by the driver."""
        return (f"{self.spec.product} prepared transactions: one per task attempt, committed by the driver "
                f"after the ledger's decision")

    def target_identity(self) -> str:
        """``<dialect> <host>:<port>/<database> table <table>`` (:meth:`JdbcOptions.target_identity`)."""
        return self.options.target_identity()

    def target_instance(self) -> str | None:
        """The server's own identity and the table (:func:`~twopc.sinks.sql.connect._server_instance.server_instance`)."""
        return server_instance(self.options)

    def describe(self) -> str:
        """``<product> <url without password> table <table>``."""
        return f"{self.spec.product} {safe_url(self.options.url)} table {self.table}"

    def _where(self) -> str:
        """``host:port/database as user`` for messages (no password)."""
        u = self.options.url
        hosts = u.query.get("host")
        where = ",".join(hosts) if isinstance(hosts, tuple) else (hosts or u.host or "localhost")
        port = f":{u.port}" if u.port else ""
        return f"{where}{port}/{u.database or ''}" + (f" as {u.username}" if u.username else "")

    def _redact(self, text: str) -> str:
        return redact(text, self.options.secrets())

    # -- connections -------------------------------------------------------------------
    def _engine(self) -> Engine:
        return engine_for(self.options.url, self.options.net_timeouts(), autocommit=True)

    def _checkout(self) -> PoolProxiedConnection:
        """A pooled connection in autocommit mode.

        Raises:
            SinkUnavailableError: the server cannot be reached or refused the login; the
                message never contains the password and chains no driver exception.
        """
        err: SinkUnavailableError | None = None
        try:
            return self._engine().raw_connection()
        except (self.spec.driver_error, DBAPIError, OSError) as exc:
            err = self._unavailable(exc)
        raise err

    def _unavailable(self, exc: BaseException) -> SinkUnavailableError:
        orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
        reason, hint = self._connect_failure(orig)
        return SinkUnavailableError(f"cannot connect to {self.spec.product} at {self._where()}: "
                                    f"{self._redact(reason)}{hint}")

    def _control_conn(self) -> PoolProxiedConnection:
        if self._control is None:
            self._control = self._checkout()
        return self._control

    def _drop_control(self, *, broken: bool) -> None:
        conn, self._control = self._control, None
        give_back(conn, broken=broken)

    def _control_execute(self, query: Any, params: Sequence[Any] = (), *,
                         fetch: bool = False) -> tuple[int, list[tuple[Any, ...]]]:
        """Run one autocommit statement on the control connection; ``(rowcount, rows)``.

        Every statement sent here is idempotent (``COMMIT``/``ROLLBACK`` of a prepared id
        are disambiguated by the marker row, the rest are reads and a bounded ``DELETE``),
        so a connection that turns out to be dead is replaced and the statement sent once
        more (:meth:`_control_run`). A statement without *params* is sent as it is (no
        ``%%`` unescaping): quote identifiers into it only with parameters.
        """
        def run(dbapi: Any) -> tuple[int, list[tuple[Any, ...]]]:
            with dbapi.cursor() as cur:
                cur.execute(query, tuple(params) if params else None)
                return cur.rowcount, (list(cur.fetchall()) if fetch else [])

        return self._control_run(run)

    def _control_run(self, action: Callable[[Any], R]) -> R:
        """Call *action* with the control connection's DB-API connection (autocommit).

        *action* must be idempotent as a whole: a connection that turns out to be dead is
        replaced and *action* called once more. Connection-level failures become
        :class:`SinkUnavailableError`; other driver errors propagate as the driver's
        exceptions.
        """
        err: SinkUnavailableError | None = None
        for attempt in (1, 2):
            reused = self._control is not None
            conn = self._control_conn()
            try:
                return action(conn.driver_connection)
            except self.spec.driver_error as exc:
                if not self._is_connection_error(exc):
                    raise
                self._drop_control(broken=True)
                err = SinkUnavailableError(f"lost the connection to {self.spec.product} at {self._where()}: "
                                           f"{self._redact(self._error_text(exc))}")
            if not reused or attempt == 2:
                break
            log.info("twopc: the control connection to %s was dead; retrying on a new one", self.spec.product)
        assert err is not None
        raise err

    def _run_pooled(self, action: Callable[[Any], R]) -> R:
        """Call *action* with the DB-API connection of a pooled autocommit connection of its
        own (not the control connection: for work running beside it, on another thread).

        Raises:
            SinkUnavailableError: no connection, or it failed (it is discarded).
            Exception: other driver errors, as the driver's exceptions.
        """
        conn = self._checkout()
        try:
            result = action(conn.driver_connection)
        except self.spec.driver_error as exc:
            broken = self._is_connection_error(exc)
            give_back(conn, broken=broken)
            if broken:
                raise SinkUnavailableError(f"lost a connection to {self.spec.product} at {self._where()}: "
                                           f"{self._redact(self._error_text(exc))}") from None
            raise
        except BaseException:
            give_back(conn, broken=True)
            raise
        give_back(conn, broken=False)
        return result

    def _no_such_table(self, similar: Sequence[TableName], *, validating: bool, database: str | None,
                       case_hint: str, table_options: str = "") -> SchemaMismatchError:
        """The error for a target that does not exist: at validation, with the tables whose
        names differ only in case and the DDL to start from; while writing, short."""
        if not validating:
            return SchemaMismatchError(f"table {self.table} does not exist (any more): create it first")
        hint = f" Did you mean {', '.join(t.display() for t in similar)}? {case_hint}" if similar else ""
        return SchemaMismatchError(
            f"table {self.table} does not exist in database {database!r}: create it first (e.g. CREATE TABLE "
            f"{self.table} (...){table_options} with a column per DataFrame column).{hint}")

    def _match(self, names: Sequence[str], types: Sequence[pa.DataType] | None, columns: Sequence[C], *,
               check_types: bool, check_required: bool) -> list[C]:
        """:func:`twopc.sinks.sql.types._column_match.match_columns` with this dialect's type rules."""
        return match_columns(names, types, columns, self.table, compatible=self._compatible if check_types else None,
                             type_name=str, check_required=check_required)

    # -- dialect hooks -----------------------------------------------------------------------
    def _quote(self, name: str) -> str:
        """*name* quoted as an identifier, safe in a statement sent with ``%s`` parameters."""
        return self.spec.quote(name)

    def _qualified(self, table: TableName) -> str:
        return f"{self._quote(table.schema)}.{self._quote(table.name)}" if table.schema else self._quote(table.name)

    def _connect_failure(self, exc: BaseException) -> tuple[str, str]:
        """(reason, hint) of a failed connection attempt."""
        return self.spec.connect_failure(exc)

    def _is_connection_error(self, exc: BaseException) -> bool:
        return self.spec.is_connection_error(exc)

    def _is_missing_table(self, exc: BaseException) -> bool:
        return self.spec.is_missing_table(exc)

    def _error_code(self, exc: BaseException) -> str:
        return self.spec.error_code(exc)

    def _error_text(self, exc: BaseException) -> str:
        """The driver error as one line: its code and primary message."""
        return self.spec.error_text(exc)

    def _map_error(self, exc: BaseException, action: str) -> SinkError:
        """The credential-free :class:`SinkError` for a failed *action*."""
        return self.spec.map_error(exc, action, table=self.table, marker_table=self.marker_table,
                                   lock_timeout=self.spec.lock_timeout_text(self.options.lock_timeout),
                                   where=self._where(), redact=self._redact)

    def _compatible(self, arrow_type: pa.DataType, column: C) -> bool:
        return self.spec.compatible(arrow_type, column)

    def _check_server(self, dbapi: Any) -> None:
        """Raise :class:`TargetConfigurationError` unless the server can prepare."""
        raise NotImplementedError

    def _target_columns(self, dbapi: Any, *, validating: bool) -> list[C]:
        """The target's columns; raises :class:`SchemaMismatchError` when it is missing and
        (when *validating*) :class:`TargetConfigurationError` when it cannot be written."""
        raise NotImplementedError

    def _marker_columns(self, dbapi: Any) -> list[str] | None:
        """The marker table's column names, ``None`` when it does not exist."""
        raise NotImplementedError

    def _create_markers(self, dbapi: Any) -> None:
        raise NotImplementedError

    def _begin(self, txn: SqlTxn[C]) -> None:
        raise NotImplementedError

    def _load_rows(self, txn: SqlTxn[C], cols: list[C], keys: tuple[str, ...], rows: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    def _plan(self, schema: pa.Schema, cols: list[C]) -> Any:
        raise NotImplementedError

    def _load_batch(self, txn: SqlTxn[C], batch: pa.RecordBatch, plan: Any) -> None:
        raise NotImplementedError

    def _end_load(self, txn: SqlTxn[C]) -> None:
        """Finish loading before the marker (PostgreSQL ends its COPY here). Default: nothing."""

    def _prepare(self, txn: SqlTxn[C]) -> None:
        """Write the marker, prepare, verify, release; on failure leave nothing prepared."""
        raise NotImplementedError

    def _finish(self, verb: str, gid: str) -> bool:
        """``COMMIT``/``ROLLBACK`` prepared *gid*: ``True`` if done, ``False`` if the
        database does not know it."""
        raise NotImplementedError

    def _prepared_ids(self, prefix: str) -> list[str]:
        """Ids of prepared transactions (of this database, where the server can tell)
        starting with *prefix*."""
        raise NotImplementedError


    def rollback(self, txn: SqlTxn[C]) -> None:
        """Roll back an open, unprepared transaction. Idempotent; never raises."""
        raise NotImplementedError
