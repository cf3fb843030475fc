"""The database and tables a SQL sink writes to. :class:`SqlTarget` is what a prepared sink's parts
share: configuration, display names, connections (a pool, and a *control* connection retried once
when dead: every control statement is idempotent) and error mapping. :class:`SqlNamedTarget` asks
the server which it is (a URL does not say), falling back to the URL when it cannot answer."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.exc import DBAPIError

from twopc import SinkError
from twopc.spi import NamedTarget, SchemaMismatchError, SinkUnavailableError, redact

from ._engines import engine_for
from ._names import TableName, parse_table_name
from ._registry import SqlDatabase, dialect_for
from .options import JdbcOptions

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlalchemy.engine import Engine
    from sqlalchemy.pool import PoolProxiedConnection

    from ._column_match import TableColumn

__all__ = ["SqlNamedTarget", "SqlTarget", "give_back", "server_instance"]

log = logging.getLogger("twopc.sinks.sql")

C = TypeVar("C", bound="TableColumn")
R = TypeVar("R")


def give_back(conn: PoolProxiedConnection | None, *, broken: bool) -> None:
    """Return *conn* to the pool (its reset rolls back an unprepared transaction), or invalidate
    it when *broken*. Never raises."""
    if conn is None:
        return
    try:
        if broken:
            conn.invalidate()
        else:
            conn.close()
    except Exception:
        log.debug("twopc: releasing a connection failed", exc_info=True)


class SqlTarget:
    """A prepared SQL sink's handle on its target database (pickles without its control connection): the *table*
    rows are appended to, the *marker* table (in ``twopcSchema`` when set), their display names for messages
    (*table_label*, *marker_label*) and *quote*, the database's quoting for statements sent with ``%s`` parameters."""

    def __init__(self, options: JdbcOptions, database: type[SqlDatabase]) -> None:
        self.options = options
        self.database = database
        self.table = parse_table_name(options.table, database.name)
        self.marker = options.bookkeeping(parse_table_name(options.marker_table, database.name, "markerTable"))
        self.table_label = self.table.display()
        self.marker_label = self.marker.display()
        self.quote = database.quote
        self._control: PoolProxiedConnection | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_control": None}

    def where(self) -> str:
        """``host:port/database as user`` for messages (no password)."""
        u = self.options.url
        hosts = u.query.get("host")
        where = ",".join(hosts) if isinstance(hosts, tuple) else (hosts or u.host or "localhost")
        port = f":{u.port}" if u.port else ""
        return f"{where}{port}/{u.database or ''}" + (f" as {u.username}" if u.username else "")

    def redact(self, text: str) -> str:
        """*text* without the configured secrets."""
        return redact(text, self.options.secrets())

    def qualified(self, table: TableName) -> str:
        """*table* as ``schema.name``, each part quoted."""
        return f"{self.quote(table.schema)}.{self.quote(table.name)}" if table.schema else self.quote(table.name)

    def map_error(self, exc: BaseException, action: str) -> SinkError:
        """The credential-free :class:`SinkError` for a failed *action*."""
        return self.database.map_error(exc, action, table=self.table_label, marker_table=self.marker_label,
                                       lock_timeout=self.database.lock_timeout_text(self.options.lock_timeout),
                                       where=self.where(), redact=self.redact)

    @contextlib.contextmanager
    def mapped(self, action: str) -> Iterator[None]:
        """Driver errors of the block as :meth:`map_error`'s for *action*."""
        try:
            yield
        except self.database.driver_error as exc:
            raise self.map_error(exc, action) from None

    def unavailable(self, exc: BaseException) -> SinkUnavailableError:
        """The credential-free error for a failed connection attempt (no driver exception chained)."""
        orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
        reason, hint = self.database.connect_failure(orig)
        return SinkUnavailableError(f"cannot connect to {self.database.product} at {self.where()}: "
                                    f"{self.redact(reason)}{hint}")

    def no_such_table(self, similar: Sequence[TableName], *, validating: bool, database: str | None,
                      case_hint: str, table_options: str = "") -> SchemaMismatchError:
        """The error for a missing :attr:`table`: at validation with names differing in case and
        the DDL to start from; while writing, short."""
        if not validating:
            return SchemaMismatchError(f"table {self.table_label} does not exist (any more): create it first")
        hint = f" Did you mean {', '.join(t.display() for t in similar)}? {case_hint}" if similar else ""
        return SchemaMismatchError(
            f"table {self.table_label} does not exist in database {database!r}: create it first (e.g. CREATE TABLE "
            f"{self.table_label} (...){table_options} with a column per DataFrame column).{hint}")

    def match(self, names: Sequence[str], types: Sequence[pa.DataType] | None, columns: Sequence[C], *,
              check_types: bool, check_required: bool) -> list[C]:
        """:func:`twopc.sinks.sql._column_match.match_columns` with this database's type rules."""
        from ._column_match import match_columns  # a task's and the plan's: a commit matches no columns
        return match_columns(names, types, columns, self.table_label,
                             compatible=self.database.compatible if check_types else None,
                             type_name=str, check_required=check_required)

    def engine(self) -> Engine:
        """This process's engine (pool) for the URL, in autocommit mode."""
        return engine_for(self.options.url, self.options.net_timeouts(), autocommit=True)

    def checkout(self) -> PoolProxiedConnection:
        """A pooled connection in autocommit mode. Raises ``SinkUnavailableError``: the server cannot be reached or
        refused the login (no password, no driver exception chained)."""
        err: SinkUnavailableError | None = None
        try:
            return self.engine().raw_connection()
        except (self.database.driver_error, DBAPIError, OSError) as exc:
            err = self.unavailable(exc)
        raise err

    def drop_control(self, *, broken: bool) -> None:
        """Give the control connection back to the pool (or discard it when *broken*)."""
        conn, self._control = self._control, None
        give_back(conn, broken=broken)

    def control_execute(self, query: Any, params: Sequence[Any] = (), *,
                        fetch: bool = False) -> tuple[int, list[tuple[Any, ...]]]:
        """Run one idempotent autocommit statement by :meth:`control_run`; ``(rowcount, rows)``.
        A statement without *params* is sent as it is (no ``%%`` unescaping)."""
        def run(dbapi: Any) -> tuple[int, list[tuple[Any, ...]]]:
            with dbapi.cursor() as cur:
                cur.execute(query, tuple(params) if params else None)
                return cur.rowcount, (list(cur.fetchall()) if fetch else [])

        return self.control_run(run)

    def read_if_exists(self, query: str, params: Sequence[Any], action: str) -> list[tuple[Any, ...]]:
        """The rows of a query on the control connection, none when its table does not exist."""
        try:
            return self.control_execute(query, params, fetch=True)[1]
        except self.database.driver_error as exc:
            if self.database.is_missing_table(exc):
                return []
            raise self.map_error(exc, action) from None

    def control_run(self, action: Callable[[Any], R]) -> R:
        """Call the idempotent *action* with the control DB-API connection (autocommit), once more on a new connection
        when it was dead. Connection failures become :class:`SinkUnavailableError`; other driver errors propagate."""
        err: SinkUnavailableError | None = None
        for attempt in (1, 2):
            reused = self._control is not None
            if self._control is None:
                self._control = self.checkout()
            conn = self._control
            try:
                return action(conn.driver_connection)
            except self.database.driver_error as exc:
                if not self.database.is_connection_error(exc):
                    raise
                self.drop_control(broken=True)
                err = SinkUnavailableError(f"lost the connection to {self.database.product} at {self.where()}: "
                                           f"{self.redact(self.database.error_text(exc))}")
            if not reused or attempt == 2:
                break
            log.info("twopc: the control connection to %s was dead; retrying on a new one", self.database.product)
        assert err is not None
        raise err

    def run_pooled(self, action: Callable[[Any], R]) -> R:
        """Call *action* with a pooled autocommit DB-API connection of its own (for work beside the control connection,
        on another thread). Raises ``SinkUnavailableError``: no connection, or it failed (it is discarded). Exception:
        other driver errors, as the driver's exceptions."""
        conn = self.checkout()
        broken = True
        try:
            result = action(conn.driver_connection)
            broken = False
            return result
        except self.database.driver_error as exc:
            if not (broken := self.database.is_connection_error(exc)):
                raise
            raise SinkUnavailableError(f"lost a connection to {self.database.product} at {self.where()}: "
                                       f"{self.redact(self.database.error_text(exc))}") from None
        finally:
            give_back(conn, broken=broken)


def server_instance(options: JdbcOptions) -> str | None:
    """The server's own identity and the table (``postgresql system <id> database oid <oid> table
    <table>``...); ``None`` when the server does not answer or cannot tell. Never raises."""
    dialect = dialect_for(options.identity_dialect)
    query = dialect.server_identity_sql
    if query is None:
        return None
    try:
        with engine_for(options.url, options.net_timeouts(), autocommit=True).connect() as conn:
            row = conn.exec_driver_sql(query).one()
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot tell": the URLs are compared instead
        log.info("twopc: could not ask %s which server it is (%s): the checkpoint's target is compared by URL",
                 options.safe_url(), redact(str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                                            options.secrets()))
        return None
    return dialect.server_identity(row, options.identity_table())


class SqlNamedTarget(NamedTarget):
    """:class:`~twopc.spi.NamedTarget` of a SQL sink, from its :attr:`options`."""

    options: JdbcOptions

    def target_identity(self) -> str:
        """What this write writes to, credential-free and the same for every spelling:
        ``<dialect> <host>:<port>/<database> table <schema.table>`` (SQLite: the file's path)."""
        dialect = self.options.identity_dialect
        where = dialect_for(dialect).identity_where(self.options.url)
        return f"{dialect} {where} table {self.options.identity_table()}"

    def target_instance(self) -> str | None:
        """The server's own identity and the table (:func:`server_instance`)."""
        return server_instance(self.options)

    @classmethod
    def reopen_options(cls, options: Mapping[str, str]) -> dict[str, str] | None:
        """*options* without a secret (:func:`twopc.sinks._secrets.credential_free`), recorded in the checkpoint."""
        from .._secrets import credential_free  # the plan's: workers record no options
        return credential_free(options)
