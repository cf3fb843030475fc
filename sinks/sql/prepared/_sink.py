"""The prepared-transaction SQL sink, assembled from its parts (PostgreSQL ``PREPARE
TRANSACTION``, MySQL/MariaDB XA): the protocol is written once here and in the parts, a
database supplies a dialect.

A :class:`PreparedSqlSink` holds, like Flink Sink V2's separate writer and committer:

- a :class:`~twopc.sinks.sql.connect._sql_target.SqlTarget`: configuration (one
  :class:`~twopc.sinks.sql.options._jdbc_options.JdbcOptions`, read by the same parser as
  ``twopc-jdbc``), display names without secrets, a per-process pool and a *control*
  connection for the driver's statements, and the mapping of driver errors;
- a dialect (:class:`~twopc.sinks.sql.connect._sql_dialect.SqlDialect`, made by the subclass's
  ``dialect_type`` from the target): the SQL that differs between databases (opening a
  write transaction, loading rows, preparing, ``COMMIT``/``ROLLBACK`` of a prepared id,
  listing prepared ids, the target's catalog, the marker table's DDL);
- a :class:`~twopc.sinks.sql.prepared._writer.PreparedWriter` (executor side): the open
  transaction's life (buffering dict rows, loading Arrow batches, marker + prepare,
  rollback) and how every failure leaves nothing behind;
- a :class:`~twopc.sinks.sql.prepared._committer.PreparedCommitter` (driver side): commit / abort /
  list_prepared / purge_markers, told apart from "lost" by the marker table
  (:mod:`twopc.sinks.sql.prepared._markers`).

This class wires them and delegates each method of the contract to one of them; it
validates the target itself (plan time).

Failure windows, in one place: a task that dies before ``PREPARE`` leaves an open
transaction the server rolls back with the session; one that dies after it leaves a
prepared transaction that recovery finds by :meth:`PreparedSqlSink.list_prepared` and rolls
back unless a decision names it; a commit that dies after ``COMMIT`` is answered
``ALREADY_COMMITTED`` by the marker on retry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Self, TypeVar

from twopc import CommitOutcome, ConfigurationError, SinkError, TransactionContext, TwoPhaseCommitSink
from twopc.spi import (
    BatchCommit,
    Headroom,
    Inspectable,
    LedgerHost,
    MarkerPurge,
    NamedTarget,
    PreparedDetail,
    SinkUnavailableError,
    WriteSetup,
)

from ..._handles import PreparedSqlHandle
from ..._secrets import credential_free
from .._errors import session_init_failed
from .._privileges import dbapi_runner, require_privileges
from .._registry import DialectSpec
from .._twopc_schema import ensure_schema
from ..connect._server_instance import server_instance
from ..connect._sql_dialect import SqlDialect, SqlTxn
from ..connect._sql_target import SqlTarget, give_back
from ..ledger._target_ledger import SqlTargetLedger
from ..options._jdbc_options import JDBC_FORMAT, JdbcOptions
from ..types._column_match import TableColumn
from ._committer import PreparedCommitter
from ._markers import MARKER_COLUMNS, MarkerTable
from ._writer import PreparedWriter

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["PreparedSqlSink"]

C = TypeVar("C", bound=TableColumn)
H = TypeVar("H", bound=PreparedSqlHandle)

#: the parts, rebuilt from the options when unpickled
_PARTS = ("target", "dialect", "writer", "committer")


class PreparedSqlSink(TwoPhaseCommitSink[dict[str, Any], SqlTxn[C], H], WriteSetup, BatchCommit, Inspectable,
                      MarkerPurge, NamedTarget, LedgerHost, Generic[C, H]):
    """Exactly-once appends to one SQL table through prepared transactions.

    Args:
        url: a JDBC URL (``jdbc:postgresql://``, ``jdbc:mysql://``...) or a SQLAlchemy URL
            (a string or :class:`sqlalchemy.engine.URL`) of the dialect's database.
        table: ``[schema.]table`` in the database's syntax (quote special names).
        **options: the format's options as keywords (see :mod:`twopc.sinks.sql.options._jdbc_options`):
            ``user``, ``password``, ``marker_table``, ``lock_timeout`` (a duration such as
            ``"30s"``, or seconds), ``connect_timeout``, ``isolation_level``,
            ``query_timeout``, ``session_init_statement``, ``batch_size``, ``copy_format``,
            ``driver``.

    Raises:
        ConfigurationError: an argument is invalid (nothing is contacted).

    A database's sink sets :attr:`spec`, :attr:`handle_type` and :attr:`dialect_type`. The
    instance holds only configuration and pickles to executors; connections come from a
    per-process pool, opened lazily and reused across tasks.
    """

    #: what the parts need to know about the database
    spec: ClassVar[DialectSpec]
    #: the handle class the sink makes (a :class:`~twopc.sinks.PreparedSqlHandle` kind)
    handle_type: ClassVar[type[Any]]
    #: the database's :class:`~twopc.sinks.sql.connect._sql_dialect.SqlDialect`, made from the target
    dialect_type: ClassVar[type[SqlDialect[Any]]]

    #: ``spark.twopc.twopcSchema`` sets ``twopcSchema`` for a whole session (see :func:`twopc.register`)
    session_options = ("twopcSchema",)

    options: JdbcOptions
    target: SqlTarget
    dialect: SqlDialect[C]
    writer: PreparedWriter[C, H]
    committer: PreparedCommitter[C, H]

    def __init__(self, url: Any, table: str, **options: Any) -> None:
        self._configure(JdbcOptions.from_kwargs(url, table, format_name=self.spec.format_name, dialect=self.spec.name,
                                                **options))

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> Self:
        """Build the sink from Spark writer options, read by the same parser as
        ``twopc-jdbc`` (:meth:`JdbcOptions.parse`).

        Raises:
            MissingOptionError: ``url`` or ``dbtable`` is missing.
            ConfigurationError: an option is invalid, unknown, or needs ``twopc-jdbc``.
        """
        spec = cls.spec
        return cls.from_jdbc_options(JdbcOptions.parse(options, format_name=spec.format_name, dialect=spec.name))

    @classmethod
    def reopen_options(cls, options: Mapping[str, str]) -> dict[str, str]:
        """*options* without a secret (:func:`twopc.sinks._secrets.credential_free`), recorded in the checkpoint."""
        return credential_free(options)

    @classmethod
    def from_jdbc_options(cls, options: JdbcOptions) -> Self:
        """Build the sink from parsed options (how ``twopc-jdbc`` makes its prepared mode).

        Raises:
            ConfigurationError: the options are for another database.
        """
        sink = cls.__new__(cls)
        sink._configure(options)
        return sink

    def _configure(self, options: JdbcOptions) -> None:
        """Make the parts from *options*: target, dialect, writer, committer."""
        if options.dialect != self.spec.name:
            raise ConfigurationError(f"{type(self).__name__} writes to {self.spec.product}, not {options.dialect}")
        self.options = options
        self.target = SqlTarget(options, self.spec)
        self.dialect = type(self).dialect_type(self.target)
        self.writer = PreparedWriter(self.target, self.dialect, self.handle_type, type(self).__name__)
        self.committer = PreparedCommitter(self.target, self.dialect, self.handle_type)

    # -- pickling / description ---------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in _PARTS}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._configure(self.options)

    @property
    def table(self) -> str:
        """The target table, as a display name (quoted where needed)."""
        return self.target.table

    @property
    def marker_table(self) -> str:
        """The marker table, as a display name."""
        return self.target.marker_table

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
        """The server's own identity and the table
        (:func:`~twopc.sinks.sql.connect._server_instance.server_instance`)."""
        return server_instance(self.options)

    def describe(self) -> str:
        """``<product> <url without password> table <table>``."""
        return self.target.describe()

    def close(self) -> None:
        """Roll back transactions of this object that are still open (never prepared
        ones) and return the connections to the process pool. The sink stays usable."""
        self.writer.close()
        self.target.drop_control(broken=False)

    def target_ledger(self) -> SqlTargetLedger:
        """The ledger table and writers' leases on this server (:mod:`twopc.sinks.sql.ledger._target_ledger`):
        batch writes without ``checkpointLocation`` keep their decisions there."""
        return SqlTargetLedger(self.target)

    def configure_write(self, schema: pa.Schema, *, overwrite: bool, streaming: bool,
                        checkpointed: bool) -> None:
        """Appends only. Spark's overwrite flag is refused, naming the format that serves it.

        Raises:
            ConfigurationError: ``outputMode("complete")`` or ``mode("overwrite")``.
        """
        if not overwrite:
            return
        if streaming:
            raise ConfigurationError(
                f"{self.spec.format_name} appends through prepared transactions and cannot serve "
                f'outputMode("complete"), which replaces the rows every micro-batch: use format {JDBC_FORMAT} '
                f"(same options), which replaces them in each micro-batch's commit transaction and keeps the "
                f"table (its keys, indexes, grants and comment)")
        raise ConfigurationError(
            f'{self.spec.format_name} appends through prepared transactions and cannot serve mode("overwrite"): use '
            f'format {JDBC_FORMAT} (same options) with .option("truncate", "true") to replace the rows and keep the '
            f"table (without it the table is dropped and re-created, as Spark's JDBC writer does)")

    # -- validation (driver, plan time) ----------------------------------------------------
    def validate(self, schema: pa.Schema) -> None:
        """Check the server and the table before any task writes; create the marker table.

        Raises:
            SinkUnavailableError: the server cannot be reached or refused the login.
            TargetConfigurationError: the server cannot prepare transactions, the target
                is not a table that can take part in them, privileges are missing (the user's
                SELECT, INSERT, DELETE on the marker table: the message has the GRANT), or the
                marker table cannot be created or is not a twopc marker table.
            SchemaMismatchError: the table does not exist, or a DataFrame column is missing
                from it or has an incompatible type, or a NOT NULL column without default
                is absent from the DataFrame (every problem is listed).
        """
        t = self.target
        conn = t.checkout()
        try:
            dbapi = conn.driver_connection
            self.dialect.check_server(dbapi)
            self._try_session_init(dbapi)
            columns = self.dialect.target_columns(dbapi, validating=True)
            t.match(schema.names, [f.type for f in schema], columns, check_types=True, check_required=True)
            if (own := self.options.twopc_schema) is not None:
                ensure_schema(dbapi_runner(dbapi), t.spec.name, own, self.options.url.database or "")
            MarkerTable(t).ensure(dbapi, self.dialect)
            # the tasks insert marker rows, recovery reads them, the commit of a later batch purges them
            require_privileges(dbapi_runner(dbapi), t.spec.name, table=t.qualified(t.marker),
                               display=t.marker_table, columns=[t.quote(c) for c in MARKER_COLUMNS],
                               privileges=("SELECT", "INSERT", "DELETE"), role="the marker table")
        except t.spec.driver_error as exc:
            broken = t.is_connection_error(exc)
            give_back(conn, broken=broken)
            raise (SinkUnavailableError if broken else SinkError)(
                f"validating {t.table} on {t.where()} failed: {t.redact(t.error_text(exc))}"
            ) from None
        except BaseException:
            give_back(conn, broken=False)
            raise
        give_back(conn, broken=False)

    def _try_session_init(self, dbapi: Any) -> None:
        """Run ``sessionInitStatement`` once in a transaction that is rolled back, so a
        bad one fails here, naming the option, rather than in every task.

        Raises:
            TargetConfigurationError: the statement failed.
        """
        t = self.target
        stmt = t.options.session_init_statement
        if not stmt:
            return
        cur = dbapi.cursor()
        try:
            # The connection is in autocommit mode: without an explicit BEGIN the trial
            # would commit whatever the statement writes.
            cur.execute("BEGIN")
            cur.execute(stmt)
        except t.spec.driver_error as exc:
            raise session_init_failed(t.where(), t.redact(t.error_text(exc))) from None
        finally:
            try:
                cur.execute("ROLLBACK")
            finally:
                cur.close()

    # -- executor side: the writer -------------------------------------------------------------
    def make_gid(self, context: TransactionContext) -> str:
        """:meth:`PreparedWriter.make_gid`."""
        return self.writer.make_gid(context)

    def begin_transaction(self, context: TransactionContext) -> SqlTxn[C]:
        """:meth:`PreparedWriter.begin_transaction`."""
        return self.writer.begin_transaction(context)

    def invoke(self, txn: SqlTxn[C], value: dict[str, Any]) -> None:
        """:meth:`PreparedWriter.invoke`."""
        self.writer.invoke(txn, value)

    def invoke_batch(self, txn: SqlTxn[C], batch: pa.RecordBatch) -> None:
        """:meth:`PreparedWriter.invoke_batch`."""
        self.writer.invoke_batch(txn, batch)

    def pre_commit(self, txn: SqlTxn[C]) -> H:
        """:meth:`PreparedWriter.pre_commit`."""
        return self.writer.pre_commit(txn)

    def rollback(self, txn: SqlTxn[C]) -> None:
        """:meth:`PreparedWriter.rollback`."""
        self.writer.rollback(txn)

    # -- driver side: the committer ------------------------------------------------------------
    def commit(self, handle: H) -> CommitOutcome:
        """:meth:`PreparedCommitter.commit`."""
        return self.committer.commit(handle)

    def commit_all(self, handles: Sequence[H], *, recovering: bool = False) -> list[CommitOutcome]:
        """:meth:`PreparedCommitter.commit_all`."""
        return self.committer.commit_all(handles, recovering=recovering)

    def abort(self, handle: H) -> None:
        """:meth:`PreparedCommitter.abort`."""
        self.committer.abort(handle)

    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> list[H]:
        """:meth:`PreparedCommitter.list_prepared`."""
        return self.committer.list_prepared(sink_id, batch_id)

    def prepared_details(self, sink_id: str) -> list[PreparedDetail]:
        """:meth:`PreparedCommitter.prepared_details`."""
        return self.committer.prepared_details(sink_id)

    def headroom(self, sink_id: str) -> Headroom | None:
        """:meth:`PreparedCommitter.headroom`."""
        return self.committer.headroom(sink_id)

    def parse_gid(self, gid: str) -> H | None:
        """:meth:`PreparedCommitter.parse_gid`."""
        return self.committer.parse_gid(gid)

    def purge_markers(self, sink_id: str, below_batch: int) -> int:
        """:meth:`PreparedCommitter.purge_markers`."""
        return self.committer.purge_markers(sink_id, below_batch)
