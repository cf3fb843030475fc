"""PostgreSQL two-phase-commit sink.

Each Spark task attempt opens one PostgreSQL transaction, bulk-loads its rows with
``COPY ... FROM STDIN`` (binary when every column allows it, else CSV; see
:mod:`sinks._arrow_copy`), writes a marker row, and ``PREPARE TRANSACTION``\\ s it under a
GID that names the sink, batch, partition and attempt::

    twopc:{sink_id}:{batch_id}:{partition_id}:{attempt_id}:{8 random hex}

The driver then runs ``COMMIT PREPARED`` (or ``ROLLBACK PREPARED``) from any session.
Because a repeated ``COMMIT PREPARED`` answers "does not exist" exactly like a rolled-back
GID does, the marker row (committed atomically with the data) tells "already committed"
from "lost".

Requirements on the server: ``max_prepared_transactions`` > 0 (at least the number of
concurrent write tasks), ``INSERT`` on the target table, and ``CREATE`` on the marker
table's schema the first time (or create the marker table yourself; see
:meth:`PostgresSink.marker_table_ddl`).

Options (``df.write.format("twopc-postgres").option(...)``, keys case-insensitive):

========================  =========================================================
``url``                   SQLAlchemy URL (``postgresql://``, ``postgresql+psycopg://``)
                          or JDBC URL (``jdbc:postgresql://host:port/db?user=..``)
``dbtable`` / ``table``   target table, PostgreSQL syntax: ``schema.table``,
                          ``"Mixed Case"``; unquoted names are folded to lower case
``user``, ``password``    credentials (override those in the URL)
``markerTable``           marker table, default ``twopc_markers``
``lockTimeout``           PostgreSQL ``lock_timeout`` of write transactions, default
                          ``30s``
``connectTimeout``        seconds, default 10
``copyFormat``            ``auto`` (default), ``binary`` or ``csv``
========================  =========================================================
"""

from __future__ import annotations

import logging
import re
import secrets
import urllib.parse
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg
import pyarrow as pa
from psycopg import errors as pgerr
from psycopg import sql
from sqlalchemy import create_engine
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from twopc import (
    CommitOutcome,
    ConfigurationError,
    MissingOptionError,
    ProtocolError,
    SchemaMismatchError,
    SinkError,
    SinkUnavailableError,
    TargetConfigurationError,
    TransactionContext,
    TransactionHandle,
    TwoPhaseCommitDataSource,
    TwoPhaseCommitSink,
    option,
    redact,
)

from ._arrow_copy import (
    BINARY_HEADER,
    BINARY_TRAILER,
    PgColumn,
    arrow_type_name,
    binary_supported,
    compatible,
    encode_binary,
    encode_csv,
    normalize_array,
)
from ._columns import match_columns
from ._engines import EngineCache
from ._jdbc_options import secret_forms
from ._sqltypes import parse_table_name

if TYPE_CHECKING:
    from sqlalchemy.pool import PoolProxiedConnection

__all__ = ["PostgresDataSource", "PostgresHandle", "PostgresSink", "dispose_engines"]

log = logging.getLogger("twopc.sinks.postgres")

GID_PREFIX = "twopc"
MAX_GID_BYTES = 199
_GID_CHARS = re.compile(r"^[A-Za-z0-9_.:-]{1,199}$")
_SINK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_LOCK_TIMEOUT = re.compile(r"^\s*\d+(\.\d+)?\s*(us|ms|s|min|h|d)?\s*$")
_COPY_CHUNK = 1 << 20
#: rows that :meth:`PostgresSink.invoke` buffers before it sends them
_ROW_BUFFER = 2000


# -- handle --------------------------------------------------------------------------

@dataclass(frozen=True)
class PostgresHandle(TransactionHandle, kind="twopc.postgres", version=1):
    """A prepared PostgreSQL transaction. ``txn_id`` is its GID.

    Attributes:
        table: the target table (for reports; commit does not need it).
        rows: rows written, ``-1`` when unknown (handles rebuilt by ``list_prepared``).
    """

    table: str = ""
    rows: int = -1


# -- engines (one per process and URL, reused by every task a Python worker runs) -----

_ENGINES = EngineCache()


def _engine_for(url: URL, connect_timeout: int) -> Engine:
    def make() -> Engine:
        connect_args: dict[str, Any] = {"connect_timeout": connect_timeout}
        if "application_name" not in url.query:
            connect_args["application_name"] = "twopc"
        return create_engine(
            url,
            isolation_level="AUTOCOMMIT",  # we send BEGIN / PREPARE TRANSACTION ourselves
            pool_pre_ping=True,  # workers are reused: a connection may have died between tasks
            pool_size=4,
            max_overflow=16,
            connect_args=connect_args,
        )

    return _ENGINES.get((url.render_as_string(hide_password=False), connect_timeout), make)


def dispose_engines() -> None:
    """Close every pooled connection of this process (prepared transactions are not
    affected: they no longer belong to a session)."""
    _ENGINES.dispose()


# -- names and URLs -----------------------------------------------------------------

def _parse_qualified(text: str, what: str) -> tuple[str | None, str]:
    """Parse ``[schema.]name`` with PostgreSQL rules: ``"quoted"`` parts are verbatim,
    unquoted ones are folded to lower case and must be plain identifiers."""
    name = parse_table_name(text, "postgresql", what)
    return name.schema, name.name


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _display_name(schema: str | None, name: str) -> str:
    def one(p: str) -> str:
        return p if re.match(r"^[a-z_][a-z0-9_]*$", p) else _quote_ident(p)
    return f"{one(schema)}.{one(name)}" if schema else one(name)


def _regclass_text(schema: str | None, name: str) -> str:
    return f"{_quote_ident(schema)}.{_quote_ident(name)}" if schema else _quote_ident(name)


def _ident(schema: str | None, name: str) -> sql.Identifier:
    return sql.Identifier(schema, name) if schema else sql.Identifier(name)


_JDBC_PASSTHROUGH = {"sslmode": "sslmode", "sslrootcert": "sslrootcert", "sslcert": "sslcert",
                     "sslkey": "sslkey", "applicationname": "application_name",
                     "connecttimeout": "connect_timeout", "options": "options"}


def _url_from_jdbc(jdbc: str) -> URL:
    """Translate ``jdbc:postgresql://host[:port][,host2...]/db?user=..&password=..``."""
    rest = jdbc[len("jdbc:"):]
    if not rest.startswith("postgresql:"):
        raise ConfigurationError("only jdbc:postgresql: URLs are supported")
    rest = rest[len("postgresql:"):]
    query_text = ""
    if "?" in rest:
        rest, query_text = rest.split("?", 1)
    hosts: list[str] = []
    if rest.startswith("//"):
        netloc, _, path = rest[2:].partition("/")
        hosts = [h for h in netloc.split(",") if h]
        database = urllib.parse.unquote(path) or None
    else:
        database = urllib.parse.unquote(rest.lstrip("/")) or None
    params = dict(urllib.parse.parse_qsl(query_text, keep_blank_values=True))
    user = password = None
    query: dict[str, str | tuple[str, ...]] = {}
    dropped = []
    for k, v in params.items():
        lk = k.lower()
        if lk == "user":
            user = v
        elif lk == "password":
            password = v
        elif lk == "ssl":
            if v.lower() in ("true", "1", "") and "sslmode" not in {x.lower() for x in params}:
                query["sslmode"] = "require"
        elif lk == "currentschema":
            query["options"] = f"-csearch_path={v}"
        elif lk in _JDBC_PASSTHROUGH:
            query[_JDBC_PASSTHROUGH[lk]] = v
        else:
            dropped.append(k)
    if dropped:
        log.warning("twopc postgres: ignoring JDBC URL parameters with no libpq equivalent: %s",
                    ", ".join(sorted(dropped)))
    host: str | None = None
    port: int | None = None
    if len(hosts) == 1:
        h = hosts[0]
        if h.startswith("["):  # [ipv6]:port
            addr, _, tail = h[1:].partition("]")
            host, port_text = addr, tail.lstrip(":")
        elif h.count(":") == 1:
            host, port_text = h.split(":")
        else:
            host, port_text = h, ""
        if port_text:
            if not port_text.isdigit():
                raise ConfigurationError(f"invalid port {port_text!r} in the JDBC URL")
            port = int(port_text)
    elif len(hosts) > 1:
        query["host"] = tuple(hosts)
    else:
        host = "localhost"
    return URL.create("postgresql+psycopg", username=user, password=password, host=host,
                      port=port, database=database, query=query)


def _normalize_url(raw: str, user: str | None, password: str | None) -> URL:
    if raw.strip().lower().startswith("jdbc:"):
        url = _url_from_jdbc(raw.strip())
    else:
        try:
            url = make_url(raw.strip())
        except (ArgumentError, ValueError):
            raise ConfigurationError(
                "url is not a valid database URL: use postgresql://user@host:port/database "
                "or jdbc:postgresql://host:port/database"
            ) from None
        backend = url.drivername.split("+", 1)[0]
        if backend not in ("postgresql", "postgres"):
            raise ConfigurationError(f"url must be a PostgreSQL URL, got a {backend!r} URL")
        if url.drivername != "postgresql+psycopg":
            url = url.set(drivername="postgresql+psycopg")
    for key in ("user", "password"):  # credentials in the query string would show in describe()
        if key in url.query:
            value = url.query[key]
            value = value[0] if isinstance(value, tuple) else value
            url = url.difference_update_query([key])
            url = url.set(username=value) if key == "user" else url.set(password=value)
    if user is not None:
        url = url.set(username=user)
    if password is not None:
        url = url.set(password=password)
    return url


# -- open transaction -----------------------------------------------------------------

@dataclass(eq=False)
class _PgTxn:
    """The open transaction of one task attempt (process-local, never pickled)."""

    context: TransactionContext
    gid: str
    conn: PoolProxiedConnection | None
    columns: list[PgColumn]
    rows: int = 0
    pending: list[dict[str, Any]] = field(default_factory=list)
    failed: str | None = None
    prepared: bool = False
    plans: dict[pa.Schema, tuple[list[PgColumn], bool]] = field(default_factory=dict)
    copy: _OpenCopy | None = None


@dataclass(eq=False)
class _OpenCopy:
    """A ``COPY ... FROM STDIN`` kept open across ``invoke_batch`` calls with the same
    columns and format: the client encodes batch k+1 while the server parses batch k
    (one COPY per batch makes them take turns, measured ~2x slower on 2 cores)."""

    key: tuple[tuple[str, ...], bool]
    cursor: psycopg.Cursor[Any]
    context: Any  # the cursor.copy() context manager
    copy: psycopg.Copy


def _diag(exc: psycopg.Error) -> tuple[str, str]:
    """(SQLSTATE, primary message) of a driver error."""
    text = str(exc).strip()
    primary = exc.diag.message_primary or (text.splitlines()[0] if text else type(exc).__name__)
    return (exc.sqlstate or ""), primary


def _is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, psycopg.OperationalError):
        state = getattr(exc, "sqlstate", None)
        return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")
    return isinstance(exc, psycopg.InterfaceError)


# -- the sink -------------------------------------------------------------------------

def _give_back(conn: PoolProxiedConnection | None, *, broken: bool) -> None:
    """Return *conn* to the pool (whose reset rolls back an open, unprepared transaction; a
    prepared one is no longer the session's), or invalidate it if it is broken. Never raises."""
    if conn is None:
        return
    try:
        if broken:
            conn.invalidate()
        else:
            conn.close()
    except Exception:  # noqa: BLE001 - releasing must not fail
        log.debug("twopc postgres: releasing a connection failed", exc_info=True)


class PostgresSink(TwoPhaseCommitSink[dict[str, Any], _PgTxn, PostgresHandle]):
    """Exactly-once appends to one PostgreSQL table through ``PREPARE TRANSACTION``.

    Args:
        url: SQLAlchemy URL (``postgresql://`` or ``postgresql+psycopg://``; other
            PostgreSQL drivers are replaced by psycopg 3) or a ``jdbc:postgresql://`` URL.
        table: ``[schema.]table`` in PostgreSQL syntax (quote mixed-case names).
        user, password: override the URL's credentials.
        marker_table: ``[schema.]table`` of the marker table, created by :meth:`validate`.
        lock_timeout: PostgreSQL ``lock_timeout`` for write transactions (``"30s"``,
            ``"500ms"``; ``"0"`` waits forever). A task that meets rows locked by a
            prepared transaction of an earlier attempt fails after this time.
        connect_timeout: seconds to wait for a connection.
        copy_format: ``"auto"`` (binary COPY when every column allows it, else CSV),
            ``"binary"`` or ``"csv"``.
        isolation_level: Spark's name (``READ_COMMITTED``, ``SERIALIZABLE``...) for write
            transactions; ``None``: the server's default.
        statement_timeout_s: PostgreSQL ``statement_timeout`` of write transactions (0: none).
        session_init_statement: SQL run at the start of every write transaction.

    Raises:
        ConfigurationError: an argument is invalid.

    The instance holds only configuration and pickles to executors; connections come from
    a per-process pool keyed by URL, opened lazily and reused across tasks.
    """

    handle_type = PostgresHandle

    def __init__(self, url: str, table: str, *, user: str | None = None, password: str | None = None,
                 marker_table: str = "twopc_markers", lock_timeout: str | int = "30s",
                 connect_timeout: int = 10, copy_format: str = "auto", isolation_level: str | None = None,
                 statement_timeout_s: int = 0, session_init_statement: str | None = None) -> None:
        if not url:
            raise MissingOptionError("PostgresSink needs option url (postgresql://host:port/database)")
        if not table:
            raise MissingOptionError('PostgresSink needs option dbtable (e.g. "public.events")')
        parsed = _normalize_url(url, user, password)
        self._url = parsed.render_as_string(hide_password=False)
        self._password = parsed.password
        self._schema, self._name = _parse_qualified(table, "dbtable")
        self._marker_schema, self._marker_name = _parse_qualified(marker_table, "markerTable")
        lt = f"{lock_timeout}ms" if isinstance(lock_timeout, int) else str(lock_timeout)
        if not _LOCK_TIMEOUT.match(lt):
            raise ConfigurationError(f"lockTimeout {lock_timeout!r} is invalid: use e.g. 30s, 500ms, 2min")
        self._lock_timeout = lt.replace(" ", "")
        try:
            self._connect_timeout = int(connect_timeout)
        except (TypeError, ValueError):
            raise ConfigurationError(f"connectTimeout must be a number of seconds, got {connect_timeout!r}") from None
        if self._connect_timeout < 1:
            raise ConfigurationError("connectTimeout must be >= 1 second")
        if copy_format not in ("auto", "binary", "csv"):
            raise ConfigurationError(f"copyFormat must be auto, binary or csv, got {copy_format!r}")
        self._copy_format = copy_format
        levels = {"READ_UNCOMMITTED": "READ UNCOMMITTED", "READ_COMMITTED": "READ COMMITTED",
                  "REPEATABLE_READ": "REPEATABLE READ", "SERIALIZABLE": "SERIALIZABLE"}
        if isolation_level is not None and isolation_level not in levels:
            raise ConfigurationError(f"isolationLevel must be one of {', '.join(levels)}, got {isolation_level!r}")
        self._begin_sql = "BEGIN" + (f" ISOLATION LEVEL {levels[isolation_level]}" if isolation_level else "")
        self._statement_timeout = f"{int(statement_timeout_s)}s"
        self._session_init = session_init_statement
        self._control: PoolProxiedConnection | None = None
        self._open: weakref.WeakSet[_PgTxn] = weakref.WeakSet()

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> PostgresSink:
        """Build the sink from Spark options (see the module docstring for the keys).

        Raises:
            MissingOptionError: ``url`` or ``dbtable`` is missing.
            ConfigurationError: an option is invalid.
        """
        url = option(options, "url")
        if not url:
            raise MissingOptionError(
                'twopc-postgres needs option "url", e.g. .option("url", "postgresql://host:5432/db") '
                'or a jdbc:postgresql:// URL'
            )
        table = option(options, "dbtable") or option(options, "table")
        if not table:
            raise MissingOptionError('twopc-postgres needs option "dbtable", e.g. .option("dbtable", "public.events")')
        return cls(
            url, table,
            user=option(options, "user"),
            password=option(options, "password"),
            marker_table=option(options, "markerTable") or "twopc_markers",
            lock_timeout=option(options, "lockTimeout") or "30s",
            connect_timeout=option(options, "connectTimeout") or 10,  # type: ignore[arg-type]
            copy_format=(option(options, "copyFormat") or "auto").lower(),
        )

    # -- pickling / description ---------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_control"] = None
        state["_open"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._open = weakref.WeakSet()

    @property
    def table(self) -> str:
        """The target table, as a display name (``schema.table``, quoted when needed)."""
        return _display_name(self._schema, self._name)

    @property
    def marker_table(self) -> str:
        """The marker table, as a display name."""
        return _display_name(self._marker_schema, self._marker_name)

    def _url_obj(self) -> URL:
        return make_url(self._url)

    def describe(self) -> str:
        """``PostgreSQL <url without password> table <table>``."""
        return f"PostgreSQL {self._url_obj().render_as_string(hide_password=True)} table {self.table}"

    def __repr__(self) -> str:
        return f"PostgresSink({self.describe()})"

    def _where(self) -> str:
        u = self._url_obj()
        hosts = u.query.get("host")
        where = ",".join(hosts) if isinstance(hosts, tuple) else (hosts or u.host or "localhost")
        port = f":{u.port}" if u.port else ""
        return f"{where}{port}/{u.database or ''}" + (f" as {u.username}" if u.username else "")

    def _redact(self, text: str) -> str:
        return redact(text, secret_forms([self._password]))

    # -- connections -------------------------------------------------------------------
    def _engine(self) -> Engine:
        return _engine_for(self._url_obj(), self._connect_timeout)

    def _checkout(self) -> PoolProxiedConnection:
        """A pooled connection in autocommit mode.

        Raises:
            SinkUnavailableError: the server cannot be reached or refused the login; the
                message never contains the password and chains no driver exception.
        """
        err: SinkUnavailableError | None = None
        try:
            return self._engine().raw_connection()
        except (psycopg.Error, DBAPIError, OSError) as exc:
            err = self._unavailable(exc)
        raise err

    def _unavailable(self, exc: BaseException) -> SinkUnavailableError:
        orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
        reason = " ".join(str(orig).split()) or type(orig).__name__
        reason = self._redact(reason)
        hint = ""
        low = reason.lower()
        if "password authentication failed" in low or "no password supplied" in low:
            hint = " (check the user and password options)"
        elif "connection refused" in low or "timeout" in low or "resolve host" in low:
            hint = " (check host and port, and that PostgreSQL accepts TCP connections)"
        return SinkUnavailableError(f"cannot connect to PostgreSQL at {self._where()}: {reason}{hint}")

    def _control_conn(self) -> PoolProxiedConnection:
        if self._control is None:
            self._control = self._checkout()
        return self._control

    def _drop_control(self, *, broken: bool) -> None:
        conn, self._control = self._control, None
        _give_back(conn, broken=broken)

    def _control_execute(self, query: Any, params: Sequence[Any] | None = None,
                         *, fetch: bool = False) -> list[tuple[Any, ...]]:
        """Run one autocommit statement on the control connection.

        Every statement sent here is idempotent (``COMMIT/ROLLBACK PREPARED`` are
        disambiguated by the marker row, the rest are reads and a bounded ``DELETE``),
        so a connection that turns out to be dead is replaced and the statement sent once
        more. Connection-level failures then become :class:`SinkUnavailableError`; other
        driver errors propagate as psycopg exceptions.
        """
        err: SinkUnavailableError | None = None
        for attempt in (1, 2):
            reused = self._control is not None
            conn = self._control_conn()
            try:
                with conn.driver_connection.cursor() as cur:  # type: ignore[union-attr]
                    cur.execute(query, params)
                    return cur.fetchall() if fetch else []
            except psycopg.Error as exc:
                if not _is_connection_error(exc):
                    raise
                self._drop_control(broken=True)
                err = SinkUnavailableError(
                    f"lost the connection to PostgreSQL at {self._where()}: "
                    f"{self._redact(' '.join(str(exc).split()))}"
                )
            if not reused or attempt == 2:
                break
            log.info("twopc postgres: the control connection was dead; retrying on a new one")
        assert err is not None
        raise err

    def close(self) -> None:
        """Roll back transactions of this object that are still open (never prepared
        ones) and return the connections to the process pool. The sink stays usable."""
        for txn in list(self._open or ()):
            self.rollback(txn)
        self._drop_control(broken=False)

    # -- validation (driver) -------------------------------------------------------------
    def marker_table_ddl(self) -> list[str]:
        """The SQL :meth:`validate` runs to create the marker table (for DBAs)."""
        conn = self._checkout()
        try:
            return [q.as_string(conn.driver_connection) for q in self._marker_ddl()]
        finally:
            conn.close()

    def _marker_ddl(self) -> list[sql.Composed]:
        marker = _ident(self._marker_schema, self._marker_name)
        index = sql.Identifier((self._marker_name[:40] + "_sink_batch_idx"))
        return [
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (gid text PRIMARY KEY, sink_id text NOT NULL, "
                "batch_id bigint NOT NULL, partition_id int NOT NULL, rows bigint NOT NULL, "
                "prepared_at timestamptz NOT NULL DEFAULT now())"
            ).format(marker),
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (sink_id, batch_id)").format(index, marker),
        ]

    def validate(self, schema: pa.Schema) -> None:
        """Check the server and the table before any task writes; create the marker table.

        Raises:
            SinkUnavailableError: the server cannot be reached or refused the login.
            TargetConfigurationError: ``max_prepared_transactions`` is 0, the target is
                not a table, privileges are missing, or the marker table cannot be created.
            SchemaMismatchError: the table does not exist, or a DataFrame column is
                missing from it or has an incompatible type, or a NOT NULL column without
                default is absent from the DataFrame.
        """
        conn = self._checkout()
        try:
            self._validate_on(conn.driver_connection, schema)  # type: ignore[arg-type]
        except psycopg.Error as exc:
            broken = _is_connection_error(exc)
            if broken:
                conn.invalidate()
            else:
                conn.close()
            state, msg = _diag(exc)
            raise (SinkUnavailableError if broken else SinkError)(
                f"validating {self.table} on {self._where()} failed: {state} {self._redact(msg)}"
            ) from None
        except BaseException:
            conn.close()
            raise
        conn.close()

    def _validate_on(self, pg: psycopg.Connection[Any], schema: pa.Schema) -> None:
        mpt = pg.execute("SHOW max_prepared_transactions").fetchone()
        if mpt is None or int(mpt[0]) <= 0:
            raise TargetConfigurationError(
                f"PostgreSQL at {self._where()} has max_prepared_transactions = "
                f"{mpt[0] if mpt else '?'}, so it cannot prepare transactions and twopc cannot "
                f"write exactly once. Set max_prepared_transactions (e.g. 64, and at least the "
                f"number of concurrent write tasks) in postgresql.conf and restart PostgreSQL"
            )
        oid = self._table_oid(pg, self._schema, self._name)
        if oid is None:
            raise SchemaMismatchError(self._missing_table_message(pg))
        kind, can_insert = pg.execute(
            "SELECT c.relkind, has_table_privilege(c.oid, 'INSERT') FROM pg_class c WHERE c.oid = %s",
            (oid,)).fetchone() or ("?", False)
        if kind not in ("r", "p"):
            raise TargetConfigurationError(
                f"{self.table} is not a table (relkind {kind!r}): twopc writes to ordinary or "
                f"partitioned tables only")
        if not can_insert:
            raise TargetConfigurationError(
                f"the user has no INSERT privilege on {self.table}: GRANT INSERT ON {self.table} TO <user>")
        columns = self._columns(pg, oid)
        _match_columns(schema.names, [f.type for f in schema], columns, self.table, check_types=True,
                       check_required=True)
        self._ensure_markers(pg)

    def _missing_table_message(self, pg: psycopg.Connection[Any]) -> str:
        hint = ""
        rows = pg.execute(
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE lower(c.relname) = lower(%s) AND c.relkind IN ('r','p') "
            "AND (%s::text IS NULL OR lower(n.nspname) = lower(%s)) LIMIT 3",
            (self._name, self._schema, self._schema)).fetchall()
        if rows:
            names = ", ".join(_display_name(s, n) for s, n in rows)
            hint = f" Did you mean {names}? Quote mixed-case names in dbtable."
        return (f"table {self.table} does not exist in database {self._url_obj().database!r}: "
                f"create it first (e.g. CREATE TABLE {self.table} (...) with a column per "
                f"DataFrame column).{hint}")

    @staticmethod
    def _table_oid(pg: psycopg.Connection[Any], schema: str | None, name: str) -> int | None:
        row = pg.execute("SELECT to_regclass(%s)::oid", (_regclass_text(schema, name),)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    @staticmethod
    def _columns(pg: psycopg.Connection[Any], oid: int) -> list[PgColumn]:
        rows = pg.execute(
            """
            SELECT a.attname, bt.typname, format_type(a.atttypid, a.atttypmod), bt.typtype,
                   bt.typcategory, a.attnotnull,
                   a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '',
                   a.attgenerated <> ''
            FROM pg_attribute a
            CROSS JOIN LATERAL (
                WITH RECURSIVE chain(oid, depth) AS (
                    SELECT a.atttypid, 0
                    UNION ALL
                    SELECT t.typbasetype, c.depth + 1 FROM chain c JOIN pg_type t ON t.oid = c.oid
                    WHERE t.typtype = 'd' AND c.depth < 16)
                SELECT oid FROM chain ORDER BY depth DESC LIMIT 1) base
            JOIN pg_type bt ON bt.oid = base.oid
            WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
            ORDER BY a.attnum
            """, (oid,)).fetchall()
        return [PgColumn(r[0], r[1], r[2], r[3], r[4], bool(r[5]), bool(r[6]), bool(r[7])) for r in rows]

    def _ensure_markers(self, pg: psycopg.Connection[Any]) -> None:
        oid = self._table_oid(pg, self._marker_schema, self._marker_name)
        if oid is not None:
            have = {c.name for c in self._columns(pg, oid)}
            missing = sorted({"gid", "sink_id", "batch_id", "partition_id", "rows"} - have)
            if missing:
                raise TargetConfigurationError(
                    f"{self.marker_table} exists but is not a twopc marker table (it lacks columns "
                    f"{', '.join(missing)}): set option markerTable to another name")
            return
        try:
            with pg.transaction():
                for q in self._marker_ddl():
                    pg.execute(q)
        except (pgerr.UniqueViolation, pgerr.DuplicateTable, pgerr.DuplicateObject):
            pass  # created concurrently
        except pgerr.InvalidSchemaName:
            raise TargetConfigurationError(
                f"cannot create the marker table {self.marker_table}: its schema does not exist. "
                f"Create the schema or set option markerTable to a table in an existing schema"
            ) from None
        except pgerr.InsufficientPrivilege:
            ddl = "; ".join(q.as_string(pg) for q in self._marker_ddl())
            raise TargetConfigurationError(
                f"cannot create the marker table {self.marker_table}: permission denied. Create it "
                f"once as an owner: {ddl}; GRANT SELECT, INSERT, DELETE ON {self.marker_table} TO <user>"
            ) from None
        log.info("twopc postgres: created marker table %s", self.marker_table)

    # -- executor side -------------------------------------------------------------------
    def make_gid(self, context: TransactionContext) -> str:
        """``twopc:{sink}:{batch}:{partition}:{attempt}:{8 hex}``.

        Raises:
            ProtocolError: the sink id has characters outside ``[A-Za-z0-9_.-]`` or the GID
                would exceed PostgreSQL's 199 bytes.
        """
        if not _SINK_ID.match(context.sink_id):
            raise ProtocolError(f"sink id {context.sink_id!r} is not valid in a PostgreSQL GID")
        gid = (f"{GID_PREFIX}:{context.sink_id}:{int(context.batch_id)}:{int(context.partition_id)}:"
               f"{int(context.attempt_id)}:{secrets.token_hex(4)}")
        if len(gid.encode()) > MAX_GID_BYTES or not _GID_CHARS.match(gid):
            raise ProtocolError(f"GID {gid!r} is longer than PostgreSQL's {MAX_GID_BYTES} bytes or malformed")
        return gid

    def begin_transaction(self, context: TransactionContext) -> _PgTxn:
        """Check out a connection, ``BEGIN``, set ``lock_timeout`` and the UTC time zone,
        and read the table's columns.

        Raises:
            SinkUnavailableError: no connection.
            SchemaMismatchError: the table no longer exists.
            ProtocolError: invalid sink id.
        """
        gid = self.make_gid(context)
        conn = self._checkout()
        txn = _PgTxn(context, gid, conn, [])
        self._open.add(txn)
        pg = self._pg(txn)
        try:
            pg.execute(self._begin_sql)
            pg.execute("SELECT set_config('lock_timeout', %s, true), set_config('TimeZone', 'UTC', true), "
                       "set_config('statement_timeout', %s, true)",
                       (self._lock_timeout, self._statement_timeout))
            if self._session_init:
                pg.execute(self._session_init)  # type: ignore[call-overload]
            oid = self._table_oid(pg, self._schema, self._name)
            if oid is None:
                raise SchemaMismatchError(f"table {self.table} does not exist (any more): create it first")
            txn.columns = self._columns(pg, oid)
        except psycopg.Error as exc:
            self._fail(txn, exc, "begin a transaction")
        except BaseException:
            self._release(txn, broken=False)
            raise
        log.debug("twopc postgres: began %s", gid)
        return txn

    @staticmethod
    def _pg(txn: _PgTxn) -> psycopg.Connection[Any]:
        assert txn.conn is not None
        return txn.conn.driver_connection  # type: ignore[return-value]

    def _usable(self, txn: _PgTxn) -> psycopg.Connection[Any]:
        if txn.prepared:
            raise ProtocolError(f"transaction {txn.gid} is already prepared")
        if txn.failed is not None or txn.conn is None:
            raise SinkError(f"transaction {txn.gid} was already rolled back: {txn.failed or 'closed'}")
        return self._pg(txn)

    def invoke(self, txn: _PgTxn, value: dict[str, Any]) -> None:
        """Buffer one row (a dict of column -> value); rows are sent with COPY every
        2000 rows and at :meth:`pre_commit`.

        Raises:
            SchemaMismatchError: a key is not a column of the table.
            ConfigurationError: a string contains a NUL byte.
            SinkError: the server rejected the rows (the transaction is rolled back).
        """
        self._usable(txn)
        if not isinstance(value, Mapping):
            raise ConfigurationError(f"PostgresSink.invoke takes a dict of column -> value, got {type(value).__name__}")
        txn.pending.append(dict(value))
        if len(txn.pending) >= _ROW_BUFFER:
            self._flush_rows(txn)

    def _flush_rows(self, txn: _PgTxn) -> None:
        pg = self._usable(txn)
        pending, txn.pending = txn.pending, []
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for row in pending:
            groups.setdefault(tuple(row), []).append(row)
        try:
            self._end_copy(txn)
            for keys, rows in groups.items():
                cols = _match_columns(list(keys), None, txn.columns, self.table, check_types=False,
                                      check_required=False)
                for k in keys:
                    for i, r in enumerate(rows):
                        v = r[k]
                        if isinstance(v, str) and "\x00" in v:
                            raise ConfigurationError(
                                f"column {k!r}: the value of row {i} contains a NUL byte (\\x00), "
                                f"which PostgreSQL text cannot store; remove it before writing")
                stmt = sql.SQL("COPY {} ({}) FROM STDIN").format(
                    _ident(self._schema, self._name), sql.SQL(", ").join(sql.Identifier(c.name) for c in cols))
                with pg.cursor() as cur, cur.copy(stmt) as copy:
                    for r in rows:
                        copy.write_row([r[k] for k in keys])
                txn.rows += len(rows)
        except psycopg.Error as exc:
            self._fail(txn, exc, f"write rows to {self.table}")
        except BaseException as exc:
            self._abandon(txn, exc)
            raise

    def invoke_batch(self, txn: _PgTxn, batch: pa.RecordBatch) -> None:
        """COPY a whole Arrow batch into the transaction (binary COPY when every column
        allows it, else CSV), without Python objects per row.

        Raises:
            SchemaMismatchError: a batch column is not in the table or has an incompatible type.
            ConfigurationError: a string contains a NUL byte.
            SinkError: the server rejected the data, e.g. a constraint violation or a lock
                timeout (the transaction is rolled back: nothing of it remains). The COPY
                stream stays open across calls, so the server's verdict on a batch may
                arrive at a later call or at :meth:`pre_commit`.
        """
        pg = self._usable(txn)
        if batch.num_rows == 0:
            return
        if txn.pending:
            self._flush_rows(txn)
        try:
            plan = txn.plans.get(batch.schema)
            if plan is None:
                cols = _match_columns(batch.schema.names, [f.type for f in batch.schema], txn.columns,
                                      self.table, check_types=True, check_required=False)
                bad = [c.name for f, c in zip(batch.schema, cols, strict=True) if not binary_supported(f.type, c)]
                if self._copy_format == "binary" and bad:
                    raise ConfigurationError(f"copyFormat=binary cannot encode columns {bad}: use auto or csv")
                binary = self._copy_format == "binary" or (self._copy_format == "auto" and not bad)
                plan = (cols, binary)
                txn.plans[batch.schema] = plan
            cols, binary = plan
            arrays = [normalize_array(a) for a in batch.columns]
            names = batch.schema.names
            chunks = (encode_binary if binary else encode_csv)(arrays, names, cols)
            copy = self._copy_for(txn, pg, cols, binary)
            for chunk in chunks:
                for i in range(0, len(chunk), _COPY_CHUNK):
                    copy.write(chunk[i:i + _COPY_CHUNK])
            txn.rows += batch.num_rows
        except psycopg.Error as exc:
            self._fail(txn, exc, f"COPY into {self.table}")
        except BaseException as exc:
            self._abandon(txn, exc)
            raise

    def _copy_for(self, txn: _PgTxn, pg: psycopg.Connection[Any], cols: Sequence[PgColumn],
                  binary: bool) -> psycopg.Copy:
        """The open COPY for these columns and format, opening it (and ending another) if needed."""
        key = (tuple(c.name for c in cols), binary)
        if txn.copy is not None and txn.copy.key == key:
            return txn.copy.copy
        self._end_copy(txn)
        stmt = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT {})").format(
            _ident(self._schema, self._name), sql.SQL(", ").join(sql.Identifier(c.name) for c in cols),
            sql.SQL("binary" if binary else "csv"))
        cur = pg.cursor()
        context = cur.copy(stmt)
        copy = context.__enter__()
        txn.copy = _OpenCopy(key, cur, context, copy)
        if binary:
            copy.write(BINARY_HEADER)
        return copy

    @staticmethod
    def _end_copy(txn: _PgTxn) -> None:
        """Finish the open COPY; the server's verdict on its rows (constraint violations,
        lock timeouts, bad values) arrives here as a psycopg error."""
        open_copy, txn.copy = txn.copy, None
        if open_copy is None:
            return
        try:
            if open_copy.key[1]:
                open_copy.copy.write(BINARY_TRAILER)
            open_copy.context.__exit__(None, None, None)
        finally:
            open_copy.cursor.close()

    @staticmethod
    def _cancel_copy(txn: _PgTxn, reason: BaseException | None) -> None:
        """Abandon the open COPY (psycopg sends CopyFail); never raises."""
        open_copy, txn.copy = txn.copy, None
        if open_copy is None:
            return
        exc = reason if reason is not None else SinkError("transaction rolled back")
        try:
            open_copy.context.__exit__(type(exc), exc, None)
        except Exception:  # noqa: BLE001 - the transaction is rolled back next anyway
            log.debug("twopc postgres: cancelling COPY of %s failed", txn.gid, exc_info=True)
        try:
            open_copy.cursor.close()
        except Exception:  # noqa: BLE001
            pass

    def pre_commit(self, txn: _PgTxn) -> PostgresHandle:
        """Write the marker row, ``PREPARE TRANSACTION``, check that PostgreSQL really
        prepared it, and release the connection (which does not roll it back).

        Raises:
            SinkError: the server rejected the rows, the marker or the prepare (e.g. a
                constraint violation, ``53200`` too many prepared transactions, or an
                aborted transaction answering ``ROLLBACK``). Nothing is left prepared.
            SinkUnavailableError: the connection broke (if ``PREPARE`` had reached the
                server, the orphan is rolled back by the next sweep or recovery).
        """
        pg = self._usable(txn)
        if txn.pending:
            self._flush_rows(txn)
        ctx = txn.context
        marker = _ident(self._marker_schema, self._marker_name)
        try:
            self._end_copy(txn)
        except psycopg.Error as exc:
            self._fail(txn, exc, f"COPY into {self.table}")
        except BaseException as exc:
            self._abandon(txn, exc)
            raise
        prepare_sent = False
        try:
            with pg.cursor() as cur:
                cur.execute(sql.SQL("INSERT INTO {} (gid, sink_id, batch_id, partition_id, rows) "
                                    "VALUES (%s, %s, %s, %s, %s)").format(marker),
                            (txn.gid, ctx.sink_id, ctx.batch_id, ctx.partition_id, txn.rows))
                prepare_sent = True
                cur.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(txn.gid)))
                status = cur.statusmessage
                prepared = status == "PREPARE TRANSACTION" and cur.execute(
                    "SELECT 1 FROM pg_prepared_xacts WHERE gid = %s AND database = current_database()",
                    (txn.gid,)).fetchone() is not None
        except psycopg.Error as exc:
            if prepare_sent:
                self._rollback_prepared_quietly(txn.gid)
            self._fail(txn, exc, f"prepare the transaction on {self.table}")
        except BaseException as exc:
            if prepare_sent:
                self._rollback_prepared_quietly(txn.gid)
            self._abandon(txn, exc)
            raise
        if not prepared:
            self._release(txn, broken=False)
            txn.failed = f"PREPARE TRANSACTION answered {status!r}"
            raise SinkError(
                f"PostgreSQL did not prepare transaction {txn.gid} on {self.table} (it answered "
                f"{status!r}): the transaction had already been aborted by an earlier error, so "
                f"nothing was written; the task must be retried")
        txn.prepared = True
        self._release(txn, broken=False)  # the session is idle: returning it cannot touch the prepared txn
        log.debug("twopc postgres: prepared %s (%s rows)", txn.gid, txn.rows)
        return PostgresHandle(txn.gid, ctx.sink_id, ctx.batch_id, ctx.partition_id, ctx.attempt_id,
                              table=self.table, rows=txn.rows)

    def rollback(self, txn: _PgTxn) -> None:
        """Roll back an open, unprepared transaction. Idempotent; never raises."""
        if txn.prepared or txn.conn is None:
            return
        broken = False
        self._cancel_copy(txn, None)
        try:
            pg = self._pg(txn)
            if not pg.closed and pg.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                pg.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 - the server rolls back when the session ends
            broken = True
            log.debug("twopc postgres: rollback of %s failed; discarding the connection", txn.gid, exc_info=True)
        txn.failed = txn.failed or "rolled back"
        self._release(txn, broken=broken)

    def _release(self, txn: _PgTxn, *, broken: bool) -> None:
        conn, txn.conn = txn.conn, None
        if txn.copy is not None:  # only after a broken connection: drop it with the connection
            txn.copy = None
            broken = True
        if self._open is not None:
            self._open.discard(txn)
        _give_back(conn, broken=broken)

    def _abandon(self, txn: _PgTxn, exc: BaseException) -> None:
        """Roll back after a non-driver error (our own check, an interrupt)."""
        txn.failed = f"{type(exc).__name__}: {exc}"[:200]
        self._cancel_copy(txn, exc)
        self.rollback(txn)

    def _fail(self, txn: _PgTxn, exc: psycopg.Error, action: str) -> None:
        """Roll the transaction back and raise a credential-free :class:`SinkError`."""
        broken = _is_connection_error(exc)
        txn.failed = f"{exc.sqlstate or 'connection'} during {action}"
        if broken:
            self._release(txn, broken=True)
        else:
            self.rollback(txn)
        raise self._map_error(exc, action) from None

    def _map_error(self, exc: psycopg.Error, action: str) -> SinkError:
        state, primary = _diag(exc)
        primary = self._redact(primary)
        d = exc.diag
        if isinstance(exc, pgerr.LockNotAvailable):
            return SinkError(
                f"could not {action}: lock timeout ({self._lock_timeout}) while waiting for rows of "
                f"{self.table} held by another prepared transaction: either another task of this write "
                f"wrote the same unique key (duplicate keys across partitions: deduplicate, or use "
                f"upsertKeys / commitMode=staging), or a prepared transaction of an earlier attempt, "
                f"which twopc rolls back at the next recovery (query restart). This attempt fails "
                f"instead of waiting. (PostgreSQL: {primary})")
        if isinstance(exc, pgerr.IntegrityError):
            kind = {"23502": "NOT NULL", "23505": "unique", "23503": "foreign key",
                    "23514": "check", "23P01": "exclusion"}.get(state, "integrity")
            what = []
            if d.column_name:
                what.append(f"column {d.column_name!r}")
            if d.constraint_name:
                what.append(f"constraint {d.constraint_name!r}")
            detail = f" {self._redact(d.message_detail)}" if d.message_detail and state in ("23505", "23503") else ""
            return SinkError(
                f"could not {action}: {kind} constraint violated ({', '.join(what) or 'unnamed'}) on "
                f"table {d.table_name or self.table}: {primary}.{detail} The transaction was rolled "
                f"back; nothing of this attempt was written")
        if _is_connection_error(exc):
            return SinkUnavailableError(f"lost the connection to PostgreSQL at {self._where()} while trying to "
                                        f"{action}: {self._redact(' '.join(str(exc).split()))}")
        if isinstance(exc, pgerr.UndefinedTable):
            return SinkError(f"could not {action}: {primary} (was the table or the marker table "
                             f"{self.marker_table} dropped? validate() creates the marker table)")
        context = f" ({self._redact(d.context.splitlines()[0])})" if d.context else ""
        if state == "53200":
            primary += " — raise max_prepared_transactions or resolve stale prepared transactions"
        return SinkError(f"could not {action}: {state} {primary}{context}; the transaction was rolled back")

    def _rollback_prepared_quietly(self, gid: str) -> None:
        try:
            self._control_execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
        except Exception:  # noqa: BLE001 - recovery's sweep will find it
            log.debug("twopc postgres: could not roll back %s after a failed prepare", gid, exc_info=True)

    # -- driver side -----------------------------------------------------------------------
    @staticmethod
    def _checked_gid(handle: TransactionHandle) -> str:
        gid = handle.txn_id
        if not isinstance(gid, str) or not _GID_CHARS.match(gid) or len(gid.encode()) > MAX_GID_BYTES:
            raise ProtocolError(f"handle txn_id {gid!r:.80} is not a twopc PostgreSQL GID")
        return gid

    def _marker_exists(self, gid: str) -> bool:
        marker = _ident(self._marker_schema, self._marker_name)
        try:
            rows = self._control_execute(sql.SQL("SELECT 1 FROM {} WHERE gid = %s").format(marker), (gid,),
                                         fetch=True)
        except pgerr.UndefinedTable:
            return False
        except psycopg.Error as exc:
            raise self._map_error(exc, "read the marker table") from None
        return bool(rows)

    def commit(self, handle: PostgresHandle) -> CommitOutcome:
        """``COMMIT PREPARED`` the handle's GID.

        Returns:
            ``COMMITTED``; ``ALREADY_COMMITTED`` when the GID is gone and its marker row
            exists; ``LOST`` when it is gone without a marker (rolled back).

        Raises:
            ProtocolError: the handle's GID is malformed.
            SinkUnavailableError: the connection failed (nothing changed, or the commit
                happened and a retry answers ``ALREADY_COMMITTED``).
            SinkError: another server error; retry.
        """
        gid = self._checked_gid(handle)
        try:
            self._control_execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(gid)))
        except pgerr.UndefinedObject:
            if self._marker_exists(gid):
                return CommitOutcome.ALREADY_COMMITTED
            log.error("twopc postgres: %s is neither prepared nor committed on %s", gid, self.table)
            return CommitOutcome.LOST
        except psycopg.Error as exc:
            raise self._map_error(exc, f"COMMIT PREPARED {gid}") from None
        return CommitOutcome.COMMITTED

    def abort(self, handle: PostgresHandle) -> None:
        """``ROLLBACK PREPARED`` the handle's GID; a GID that is already gone is fine.

        Raises:
            ProtocolError: the GID is gone and its marker row exists: it was committed; or
                the handle's GID is malformed.
            SinkError / SinkUnavailableError: the server failed; retry.
        """
        gid = self._checked_gid(handle)
        try:
            self._control_execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
        except pgerr.UndefinedObject:
            if self._marker_exists(gid):
                raise ProtocolError(
                    f"asked to roll back {gid}, but it was already committed to {self.table} "
                    f"(its marker row exists)") from None
        except psycopg.Error as exc:
            raise self._map_error(exc, f"ROLLBACK PREPARED {gid}") from None

    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> list[PostgresHandle]:
        """Prepared transactions of *sink_id* (and *batch_id*) in this database, from
        ``pg_prepared_xacts``. ``rows`` is ``-1`` (unknown) in the returned handles.

        Raises:
            SinkUnavailableError / SinkError: the server failed.
        """
        prefix = f"{GID_PREFIX}:{sink_id}:"
        try:
            rows = self._control_execute(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
                "AND starts_with(gid, %s) ORDER BY gid", (prefix,), fetch=True)
        except psycopg.Error as exc:
            raise self._map_error(exc, "list prepared transactions") from None
        out = []
        for (gid,) in rows:
            h = self.parse_gid(gid)
            if h is None or h.sink_id != sink_id:
                log.warning("twopc postgres: ignoring prepared transaction with malformed GID %r", gid)
                continue
            if batch_id is None or h.batch_id == batch_id:
                out.append(h)
        return out

    def parse_gid(self, gid: str) -> PostgresHandle | None:
        """Rebuild a handle from a GID made by :meth:`make_gid` (``None`` if it is not one)."""
        if not gid.startswith(GID_PREFIX + ":"):
            return None
        parts = gid[len(GID_PREFIX) + 1:].rsplit(":", 4)
        if len(parts) != 5 or not _SINK_ID.match(parts[0]):
            return None
        sink_id, batch, part, attempt, nonce = parts
        try:
            b, p, a = int(batch), int(part), int(attempt)
        except ValueError:
            return None
        if not re.fullmatch(r"[0-9a-f]{8}", nonce):
            return None
        return PostgresHandle(gid, sink_id, b, p, a, table=self.table, rows=-1)

    def purge_committed(self, sink_id: str, below_batch: int) -> None:
        """The runtime's hook after the ledger forgot batches ``< below_batch``: delete
        their marker rows (:meth:`purge_markers`). Best effort: the batch being committed
        is already committed and marked, so a failure is logged, not raised (the rows are
        deleted at the next purge)."""
        try:
            deleted = self.purge_markers(sink_id, below_batch)
        except SinkError as exc:
            log.warning("twopc postgres: could not purge marker rows of sink %s below batch %s: %s",
                        sink_id, below_batch, exc)
            return
        log.debug("twopc postgres: purged %s marker rows of sink %s below batch %s", deleted, sink_id, below_batch)

    def purge_markers(self, sink_id: str, below_batch: int) -> int:
        """Delete the marker rows of *sink_id*'s batches ``< below_batch``; returns how many.

        Markers let :meth:`commit` tell ``ALREADY_COMMITTED`` from ``LOST``; purge only
        batches older than every batch the commit ledger still holds (a purged batch's
        replayed commit would be reported ``LOST``).

        Raises:
            SinkError / SinkUnavailableError: the server failed.
        """
        marker = _ident(self._marker_schema, self._marker_name)
        conn = self._control_conn()
        try:
            with conn.driver_connection.cursor() as cur:  # type: ignore[union-attr]
                cur.execute(sql.SQL("DELETE FROM {} WHERE sink_id = %s AND batch_id < %s").format(marker),
                            (sink_id, below_batch))
                return cur.rowcount
        except psycopg.Error as exc:
            if _is_connection_error(exc):
                self._drop_control(broken=True)
            raise self._map_error(exc, f"purge markers from {self.marker_table}") from None


def _match_columns(names: Sequence[str], types: Sequence[pa.DataType] | None, columns: Sequence[PgColumn],
                   table: str, *, check_types: bool, check_required: bool) -> list[PgColumn]:
    """:func:`sinks._columns.match_columns` with this database's type rules."""
    return match_columns(names, types, columns, table, compatible=compatible if check_types else None,
                         type_name=arrow_type_name, check_required=check_required)


class PostgresDataSource(TwoPhaseCommitDataSource):
    """Spark data source ``twopc-postgres`` (register with :func:`twopc.register`)."""

    sink_class = PostgresSink
    format_name = "twopc-postgres"
