"""The base of every sink that prepares SQL transactions (PostgreSQL ``PREPARE TRANSACTION``,
MySQL/MariaDB XA): the protocol is written once here, the dialects supply hooks.

What the base owns:

- configuration (one :class:`~twopc.sinks.sql.options._jdbc_options.JdbcOptions`, read by the same parser
  as ``twopc-jdbc``), pickling without connections, descriptions without secrets;
- connections: a per-process pool (:func:`~twopc.sinks.sql.connect._engines.engine_for`), a *control*
  connection for the driver's statements, retried once on a new connection when it turns
  out dead (every control statement is idempotent);
- the transaction id (:class:`twopc.Xid`, checked against the target's byte limit) and
  the marker table: a row written inside each prepared transaction, so that a commit
  that finds its transaction gone can tell "already committed" (marker present) from
  "lost" (absent) — the database answers both the same way;
- the open transaction's life: buffering dict rows, loading Arrow batches, marker +
  prepare, rollback, and how every failure leaves nothing behind;
- commit / abort / list_prepared / purge_markers.

What a dialect supplies (methods starting with ``_`` that raise ``NotImplementedError``
here): opening a write transaction, loading rows, preparing, finishing a prepared id
(``COMMIT``/``ROLLBACK``), listing prepared ids, the target's catalog (columns, checks),
the marker table's DDL, and the mapping of driver errors to twopc's exception tree.

Failure windows, in one place: a task that dies before ``PREPARE`` leaves an open
transaction the server rolls back with the session; one that dies after it leaves a
prepared transaction that recovery finds by :meth:`PreparedSqlSink.list_prepared` and rolls
back unless a decision names it; a commit that dies after ``COMMIT`` is answered
``ALREADY_COMMITTED`` by the marker on retry.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

import pyarrow as pa

from twopc import ConfigurationError, SinkError, TwoPhaseCommitSink
from twopc.spi import SinkUnavailableError, TargetConfigurationError

from ..._handles import PreparedSqlHandle
from ..._secrets import credential_free
from .._errors import session_init_failed
from .._names import parse_table_name
from .._privileges import dbapi_runner, require_privileges
from .._twopc_schema import ensure_schema
from ..connect._sql_dialect import SqlTxn, give_back, log
from ..ledger._target_ledger import SqlTargetLedger
from ..options._jdbc_options import JDBC_FORMAT, JdbcOptions
from ..types._column_match import TableColumn
from ._committer import PreparedCommitter
from ._writer import MARKER_COLUMNS, PreparedWriter

if TYPE_CHECKING:
    from sqlalchemy.pool import PoolProxiedConnection


__all__ = ["PreparedSqlSink"]

C = TypeVar("C", bound=TableColumn)
H = TypeVar("H", bound=PreparedSqlHandle)


class PreparedSqlSink(PreparedWriter[C, H], PreparedCommitter[C, H],
                      TwoPhaseCommitSink[dict[str, Any], SqlTxn[C], H], Generic[C, H]):
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

    The instance holds only configuration and pickles to executors; connections come from
    a per-process pool, opened lazily and reused across tasks.
    """

    #: ``spark.twopc.twopcSchema`` sets ``twopcSchema`` for a whole session (see :func:`twopc.register`)
    session_options = ("twopcSchema",)

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
        if options.dialect != self.spec.name:
            raise ConfigurationError(f"{type(self).__name__} writes to {self.spec.product}, not {options.dialect}")
        self.options = options
        self._target = parse_table_name(options.table, self.spec.name)
        self._marker = options.bookkeeping(parse_table_name(options.marker_table, self.spec.name, "markerTable"))
        self._control: PoolProxiedConnection | None = None
        self._open: weakref.WeakSet[SqlTxn[C]] | None = weakref.WeakSet()

    # -- pickling / description ---------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_control"] = None
        state["_open"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._open = weakref.WeakSet()

    def close(self) -> None:
        """Roll back transactions of this object that are still open (never prepared
        ones) and return the connections to the process pool. The sink stays usable."""
        for txn in list(self._open or ()):
            self.rollback(txn)
        self._drop_control(broken=False)

    def target_ledger(self) -> SqlTargetLedger:
        """The ledger table and writers' leases on this server (:mod:`twopc.sinks.sql.ledger._target_ledger`):
        batch writes without ``checkpointLocation`` keep their decisions there."""
        return SqlTargetLedger(self)

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
        conn = self._checkout()
        try:
            dbapi = conn.driver_connection
            self._check_server(dbapi)
            self._try_session_init(dbapi)
            columns = self._target_columns(dbapi, validating=True)
            self._match(schema.names, [f.type for f in schema], columns, check_types=True, check_required=True)
            if (own := self.options.twopc_schema) is not None:
                ensure_schema(dbapi_runner(dbapi), self.spec.name, own, self.options.url.database or "")
            self._ensure_markers(dbapi)
            # the tasks insert marker rows, recovery reads them, the commit of a later batch purges them
            require_privileges(dbapi_runner(dbapi), self.spec.name, table=self._qualified(self._marker),
                               display=self.marker_table, columns=[self._quote(c) for c in MARKER_COLUMNS],
                               privileges=("SELECT", "INSERT", "DELETE"), role="the marker table")
        except self.spec.driver_error as exc:
            broken = self._is_connection_error(exc)
            give_back(conn, broken=broken)
            raise (SinkUnavailableError if broken else SinkError)(
                f"validating {self.table} on {self._where()} failed: {self._redact(self._error_text(exc))}"
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
        stmt = self.options.session_init_statement
        if not stmt:
            return
        cur = dbapi.cursor()
        try:
            # The connection is in autocommit mode: without an explicit BEGIN the trial
            # would commit whatever the statement writes.
            cur.execute("BEGIN")
            cur.execute(stmt)
        except self.spec.driver_error as exc:
            raise session_init_failed(self._where(), self._redact(self._error_text(exc))) from None
        finally:
            try:
                cur.execute("ROLLBACK")
            finally:
                cur.close()

    def _ensure_markers(self, dbapi: Any) -> None:
        have = self._marker_columns(dbapi)
        if have is not None:
            missing = [c for c in MARKER_COLUMNS if c not in {h.lower() for h in have}]
            if missing:
                raise TargetConfigurationError(
                    f"{self.marker_table} exists but is not a twopc marker table (it lacks columns "
                    f"{', '.join(missing)}): set option markerTable to another name")
            return
        self._create_markers(dbapi)
        log.info("twopc: created marker table %s", self.marker_table)

