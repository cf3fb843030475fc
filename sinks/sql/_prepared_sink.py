"""The prepared-transaction SQL sink: the protocol written once, a database supplies a dialect
(:class:`~twopc.sinks.sql._sql_dialect.SqlDialect`). The sink *is* its executor-side
:class:`~twopc.sinks.sql._prepared_writer.PreparedWriter` and driver-side
:class:`~twopc.sinks.sql._prepared_committer.PreparedCommitter`; it validates the target at plan time.

Failure windows: a task that dies before ``PREPARE`` leaves an open transaction the server
rolls back with the session; one that dies after it leaves a prepared transaction recovery
finds (:meth:`PreparedSqlSink.list_prepared`) and rolls back unless a decision names it; a
commit that dies after ``COMMIT`` is answered ``ALREADY_COMMITTED`` by the marker on retry."""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Self, TypeVar

from twopc import ConfigurationError, SinkError, TwoPhaseCommitSink
from twopc.spi import BatchCommit, Inspectable, LedgerHost, MarkerPurge, SinkUnavailableError, WriteSetup

from .._handles import PreparedSqlHandle
from ._prepared_committer import MARKER_COLUMNS, MarkerTable, PreparedCommitter
from ._prepared_writer import PreparedWriter
from ._registry import SqlDatabase
from ._sql_dialect import SqlDialect, SqlTxn
from ._sql_target import SqlNamedTarget, SqlTarget, give_back
from ._target_ledger import SqlTargetLedger
from .options import JDBC_FORMAT, JdbcOptions, safe_url

if TYPE_CHECKING:
    import pyarrow as pa

    from ._column_match import TableColumn

__all__ = ["PreparedSqlSink"]

C = TypeVar("C", bound="TableColumn")
H = TypeVar("H", bound=PreparedSqlHandle)

#: the parts, rebuilt from the options when unpickled (open transactions stay behind)
_PARTS = ("target", "dialect", "markers", "_open")


class PreparedSqlSink(PreparedWriter[C, H], PreparedCommitter[C, H], TwoPhaseCommitSink[dict[str, Any], SqlTxn[C], H],
                      WriteSetup, BatchCommit, Inspectable, MarkerPurge, SqlNamedTarget, LedgerHost, Generic[C, H]):
    """Exactly-once appends to one SQL table through prepared transactions. Raises ``ConfigurationError``: an
    argument is invalid (nothing is contacted).

    Args:
        url: a JDBC URL (``jdbc:postgresql://``, ``jdbc:mysql://``...) or a SQLAlchemy URL (a string or
            :class:`sqlalchemy.engine.URL`) of the dialect's database.
        table: ``[schema.]table`` in the database's syntax (quote special names).
        **options: the format's options as keywords (see :mod:`twopc.sinks.sql.options._jdbc_options`).

    A database's sink sets :attr:`database`, :attr:`__handle_type__` and :attr:`dialect_type`. The instance holds
    only configuration; connections come from a per-process pool.
    """

    database: ClassVar[type[SqlDatabase]]  #: what the parts need to know about the database
    #: the handle class the sink makes (a :class:`~twopc.sinks.PreparedSqlHandle` kind)
    __handle_type__: ClassVar[type[Any]]
    #: the database's :class:`~twopc.sinks.sql._sql_dialect.SqlDialect`, made from the target
    dialect_type: ClassVar[type[SqlDialect[Any]]]

    #: ``spark.twopc.twopcSchema`` sets ``twopcSchema`` for a whole session (see :func:`twopc.register`)
    __session_options__ = ("twopcSchema",)

    options: JdbcOptions

    def __init__(self, url: Any, table: str, **options: Any) -> None:
        database = self.database
        self._configure(JdbcOptions.from_kwargs(url, table, format_name=database.format_name, dialect=database.name,
                                                **options))

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> Self:
        """Build the sink from Spark writer options (the parser of ``twopc-jdbc``). Raises ``MissingOptionError``:
        ``url`` or ``dbtable`` is missing; ``ConfigurationError``: an option is invalid, unknown, or needs
        ``twopc-jdbc``."""
        database = cls.database
        return cls.from_jdbc_options(JdbcOptions.parse(options, format_name=database.format_name,
                                                       dialect=database.name))

    @classmethod
    def from_jdbc_options(cls, options: JdbcOptions) -> Self:
        """Build the sink from parsed options (``ConfigurationError`` when for another database)."""
        sink = cls.__new__(cls)
        sink._configure(options)
        return sink

    def _configure(self, options: JdbcOptions) -> None:
        if options.dialect != self.database.name:
            raise ConfigurationError(f"{type(self).__name__} writes to {self.database.product}, not {options.dialect}")
        self.options = options
        self.target = SqlTarget(options, self.database)
        self.dialect = type(self).dialect_type(self.target)
        self.markers = MarkerTable(self.target)
        self._open = weakref.WeakSet()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in _PARTS}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._configure(self.options)

    def commit_mode(self) -> str:
        """Prepared mode: one prepared transaction per task attempt, committed by the driver."""
        return (f"{self.database.product} prepared transactions: one per task attempt, committed by the driver "
                f"after the ledger's decision")

    def describe(self) -> str:
        """``<product> <url without password> table <table>``."""
        return f"{self.database.product} {safe_url(self.options.url)} table {self.target.table_label}"

    def close(self) -> None:
        """Roll back this object's open (never prepared) transactions and return the connections;
        the sink stays usable."""
        super().close()
        self.target.drop_control(broken=False)

    def target_ledger(self) -> SqlTargetLedger:
        """The ledger table and leases on this server, for batch writes without ``checkpointLocation``."""
        return SqlTargetLedger(self.target)

    def configure_write(self, schema: pa.Schema, *, overwrite: bool, streaming: bool,
                        checkpointed: bool) -> None:
        """Appends only; Spark's overwrite flag is refused, naming the format that serves it. Raises
        ``ConfigurationError``: ``outputMode("complete")`` or ``mode("overwrite")``."""
        if not overwrite:
            return
        if streaming:
            raise ConfigurationError(
                f"{self.database.format_name} appends through prepared transactions and cannot serve "
                f'outputMode("complete"), which replaces the rows every micro-batch: use format {JDBC_FORMAT} '
                f"(same options), which replaces them in each micro-batch's commit transaction and keeps the "
                f"table (its keys, indexes, grants and comment)")
        raise ConfigurationError(
            f'{self.database.format_name} appends through prepared transactions and cannot serve mode("overwrite"): '
            f'use format {JDBC_FORMAT} (same options) with .option("truncate", "true") to replace the rows and keep '
            f"the table (without it the table is dropped and re-created, as Spark's JDBC writer does)")

    def validate(self, schema: pa.Schema) -> None:
        """Check the server and the table before any task writes; create the marker table. Raises
        ``SinkUnavailableError``: the server cannot be reached or refused the login; ``TargetConfigurationError``: the
        server cannot prepare, the target cannot take part, privileges on the marker table are missing (the message has
        the GRANT), or the marker table cannot be created or is not twopc's; ``SchemaMismatchError``: the table is
        missing, a column is missing or incompatible, or a NOT NULL column without default is absent (every problem is
        listed)."""
        from ._privileges import dbapi_runner, require_privileges  # the plan's checks: workers make none
        t = self.target
        conn = t.checkout()
        broken = False
        try:
            dbapi = conn.driver_connection
            self.dialect.check_server(dbapi)
            self._try_session_init(dbapi)
            columns = self.dialect.table_columns(dbapi, validating=True)
            t.match(schema.names, [f.type for f in schema], columns, check_types=True, check_required=True)
            if (own := self.options.twopc_schema) is not None:
                t.database.ensure_schema(dbapi_runner(dbapi), own, self.options.url.database or "")
            MarkerTable(t).ensure(dbapi, self.dialect)
            # the tasks insert marker rows, recovery reads them, the commit of a later batch purges them
            require_privileges(dbapi_runner(dbapi), t.database.name, table=t.qualified(t.marker),
                               display=t.marker_label, columns=[t.quote(c) for c in MARKER_COLUMNS],
                               privileges=("SELECT", "INSERT", "DELETE"), role="the marker table")
        except t.database.driver_error as exc:
            broken = t.database.is_connection_error(exc)
            raise (SinkUnavailableError if broken else SinkError)(
                f"validating {t.table_label} on {t.where()} failed: {t.redact(t.database.error_text(exc))}"
            ) from None
        finally:
            give_back(conn, broken=broken)

    def _try_session_init(self, dbapi: Any) -> None:
        """Run ``sessionInitStatement`` once, rolled back, so a bad one fails here
        (``TargetConfigurationError``) rather than in every task."""
        t = self.target
        stmt = t.options.session_init_statement
        if not stmt:
            return
        cur = dbapi.cursor()
        try:
            # autocommit connection: without BEGIN the trial would commit what it writes
            cur.execute("BEGIN")
            cur.execute(stmt)
        except t.database.driver_error as exc:
            from ._errors import session_init_failed  # the plan's: workers never try the statement
            raise session_init_failed(t.where(), t.redact(t.database.error_text(exc))) from None
        finally:
            try:
                cur.execute("ROLLBACK")
            finally:
                cur.close()
