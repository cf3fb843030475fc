"""MariaDB / MySQL two-phase-commit sink built on XA transactions.

Each Spark task attempt opens one XA transaction on its own connection, inserts its rows
with multi-row ``INSERT ... VALUES (...), (...)`` statements, writes a marker row, and
``XA PREPARE``\\ s it under an xid whose gtrid names the sink, batch, partition and attempt::

    twopc:{sink_id}:{batch_id}:{partition_id}:{attempt_id}:{8 random hex}

(bqual empty, formatID 1; MariaDB and MySQL limit a gtrid to 64 bytes). The driver then
runs ``XA COMMIT`` (or ``XA ROLLBACK``) from another connection. A repeated ``XA COMMIT``
answers ``XAER_NOTA`` exactly like a rolled-back xid does, so the marker row (committed
atomically with the data) tells "already committed" from "lost".

Server semantics this relies on, checked by :meth:`MySqlXaSink.probe_xa` and by the tests
against a real MariaDB 10.11:

* A prepared XA transaction survives the disconnect of the session that prepared it
  (MariaDB >= 10.5, MySQL >= 5.7.7; older servers roll it back, and are refused).
* While that session is still connected, the transaction stays attached to it: no other
  session can commit it (``XA COMMIT`` answers ``XAER_NOTA``) and the session itself can
  start nothing new (``XAER_RMFAIL``). So :meth:`~MySqlXaSink.pre_commit` closes the
  writing connection and waits until the server has ended the session; it is never put
  back into a pool. ``XA RECOVER`` lists the xid in both states, which is how
  :meth:`~MySqlXaSink.commit` tells "attached to a live session" (retry) from "gone".
* InnoDB replays prepared XA transactions after a server crash.
* ``XA RECOVER`` is server-wide (not per database): the sink id must be unique per server.
  The default sink id derived from the checkpoint location is.

Requirements on the server: InnoDB target table (other engines cannot take part in XA),
``INSERT`` on it, ``CREATE`` on its database the first time (for the marker table; or
create it yourself: :meth:`MySqlXaSink.marker_table_ddl`), and, on MySQL 8,
``XA_RECOVER_ADMIN`` to see other sessions' prepared transactions.

Writes run with ``time_zone = '+00:00'`` (Arrow timestamps are written as naive UTC),
``innodb_lock_wait_timeout`` = ``lock_timeout_s``, and ``STRICT_TRANS_TABLES`` added to
``sql_mode`` when no strict mode is set (so a NULL in a NOT NULL column or a too-long value
fails the task instead of being silently changed).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
import secrets
import time
import urllib.parse
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import pyarrow as pa
import pyarrow.compute as pc
import pymysql
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
    TwoPhaseCommitSink,
    option,
    redact,
)

from ._columns import match_columns
from ._engines import EngineCache
from ._jdbc_options import secret_forms
from ._sqltypes import parse_table_name

if TYPE_CHECKING:
    from pymysql.connections import Connection as PyMySQLConnection
    from pymysql.cursors import Cursor
    from sqlalchemy.pool import PoolProxiedConnection

__all__ = ["MySqlXaHandle", "MySqlXaSink", "dispose_engines"]

log = logging.getLogger("twopc.sinks.mysql_xa")

GID_PREFIX = "twopc"
#: MariaDB's and MySQL's limit on an xid's gtrid (and on its bqual)
MAX_GTRID_BYTES = 64
#: formatID of the xids this sink makes (``XA START 'gtrid'`` uses 1)
FORMAT_ID = 1
_SINK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_GTRID_CHARS = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_PLAIN_IDENT = re.compile(r"^[A-Za-z0-9_$]+$")
_ISOLATION = {"READ UNCOMMITTED", "READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"}
_TXN_TABLE_TYPES = ("BASE TABLE", "SYSTEM VERSIONED")
_MARKER_COLUMNS = ("gid", "sink_id", "batch_id", "partition_id", "rows")

# server error codes (MariaDB / MySQL share them unless noted)
ER_DBACCESS_DENIED = 1044
ER_ACCESS_DENIED = 1045
ER_BAD_NULL = 1048
ER_DUP_ENTRY = 1062
ER_TABLEACCESS_DENIED = 1142
ER_NO_SUCH_TABLE = 1146
ER_LOCK_WAIT_TIMEOUT = 1205
ER_LOCK_DEADLOCK = 1213
ER_SPECIFIC_ACCESS_DENIED = 1227
ER_NO_DEFAULT_FOR_FIELD = 1364
ER_XAER_NOTA = 1397
ER_XAER_RMFAIL = 1399
ER_XA_RBROLLBACK = 1402
ER_XA_RBTIMEOUT = 1613
ER_XA_RBDEADLOCK = 1614
_FK_ERRORS = {1216, 1217, 1451, 1452}
_CHECK_ERRORS = {4025, 3819}  # MariaDB ER_CONSTRAINT_FAILED, MySQL ER_CHECK_CONSTRAINT_VIOLATED
_DATA_ERRORS = {1264: "out of range", 1406: "too long", 1366: "incorrect", 1292: "incorrect",
                1265: "truncated", 1367: "illegal"}
_XA_ROLLED_BACK = {ER_XA_RBROLLBACK, ER_XA_RBTIMEOUT, ER_XA_RBDEADLOCK}
#: errors that mean the session is gone (client CR_* codes are 2000-2999)
_CONNECTION_ERRORS = {1040, 1053, 1129, 1130, 1152, 1153, 1158, 1159, 1160, 1161, 1927, 4031}

#: how long pre_commit waits for the server to end the writing session after closing it,
#: and commit/abort retry an xid still attached to a live session
_DETACH_WAIT_S = 10.0


# -- handle --------------------------------------------------------------------------

@dataclass(frozen=True)
class MySqlXaHandle(TransactionHandle, kind="twopc.mysql_xa", version=1):
    """A prepared XA transaction. ``txn_id`` is its gtrid (bqual empty, formatID 1).

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
        if "charset" not in url.query:
            connect_args["charset"] = "utf8mb4"
        return create_engine(
            url,
            isolation_level="AUTOCOMMIT",  # we send XA START / XA END / XA PREPARE ourselves
            pool_pre_ping=True,
            pool_size=4,
            max_overflow=16,
            connect_args=connect_args,
        )

    return _ENGINES.get((url.render_as_string(hide_password=False), connect_timeout), make)


def dispose_engines() -> None:
    """Close every pooled connection of this process (prepared XA transactions are not
    affected: they are never left attached to a pooled connection)."""
    _ENGINES.dispose()


# -- names and URLs -----------------------------------------------------------------

def _parse_qualified(text: str, what: str) -> tuple[str | None, str]:
    """Parse ``[db.]name`` with MySQL rules (:func:`sinks._sqltypes.parse_table_name`:
    ```quoted``` parts verbatim, case kept), within MySQL's 64 characters per name."""
    name = parse_table_name(text, "mysql", what)
    for part in (name.schema, name.name):
        if part is not None and "\x00" in part:
            raise ConfigurationError(f"{what} {text!r}: names cannot contain NUL characters")
        if part is not None and len(part) > 64:
            raise ConfigurationError(f"{what} {text!r}: {part[:20]!r}... is longer than MySQL's 64 characters")
    return name.schema, name.name


def _quote_ident(name: str) -> str:
    """A backtick-quoted identifier (backticks doubled). Not safe for ``%`` formatting:
    see :func:`_q`."""
    return "`" + name.replace("`", "``") + "`"


def _q(name: str) -> str:
    """A backtick-quoted identifier for a statement sent with parameters: pymysql applies
    ``%`` formatting to such statements, so ``%`` is doubled."""
    return _quote_ident(name).replace("%", "%%")


def _qn(db: str | None, name: str) -> str:
    return f"{_q(db)}.{_q(name)}" if db else _q(name)


def _display_name(db: str | None, name: str) -> str:
    def one(p: str) -> str:
        return p if _PLAIN_IDENT.match(p) and not p.isdigit() else _quote_ident(p)
    return f"{one(db)}.{one(name)}" if db else one(name)


def _url_from_jdbc(jdbc: str) -> URL:
    """Translate ``jdbc:mysql://host[:port]/db?user=..&password=..`` (or ``jdbc:mariadb:``)."""
    rest = jdbc[len("jdbc:"):]
    scheme, _, rest = rest.partition(":")
    if scheme.lower() not in ("mysql", "mariadb") or not rest.startswith("//"):
        raise ConfigurationError("only jdbc:mysql:// and jdbc:mariadb:// URLs are supported")
    rest = rest[2:]
    query_text = ""
    if "?" in rest:
        rest, query_text = rest.split("?", 1)
    netloc, _, path = rest.partition("/")
    if "," in netloc:
        raise ConfigurationError("JDBC URLs with several hosts are not supported: give one host")
    host, port = netloc or "localhost", None
    if host.startswith("["):
        addr, _, tail = host[1:].partition("]")
        host, port_text = addr, tail.lstrip(":")
    elif ":" in host:
        host, port_text = host.rsplit(":", 1)
    else:
        port_text = ""
    if port_text:
        if not port_text.isdigit():
            raise ConfigurationError(f"invalid port {port_text!r} in the JDBC URL")
        port = int(port_text)
    user = password = None
    dropped = []
    for k, v in urllib.parse.parse_qsl(query_text, keep_blank_values=True):
        if k.lower() == "user":
            user = v
        elif k.lower() == "password":
            password = v
        else:
            dropped.append(k)
    if dropped:
        log.warning("twopc mysql xa: ignoring JDBC URL parameters: %s", ", ".join(sorted(dropped)))
    return URL.create("mysql+pymysql", username=user, password=password, host=host, port=port,
                      database=urllib.parse.unquote(path) or None)


def _normalize_url(raw: str | URL, user: str | None = None, password: str | None = None) -> URL:
    if isinstance(raw, URL):
        url = raw
    elif raw.strip().lower().startswith("jdbc:"):
        url = _url_from_jdbc(raw.strip())
    else:
        try:
            url = make_url(raw.strip())
        except (ArgumentError, ValueError):
            raise ConfigurationError(
                "url is not a valid database URL: use mysql+pymysql://user@host:port/database "
                "(or mariadb://...)") from None
    backend = url.drivername.split("+", 1)[0]
    if backend not in ("mysql", "mariadb"):
        raise ConfigurationError(f"url must be a MySQL or MariaDB URL, got a {backend!r} URL")
    if url.drivername != f"{backend}+pymysql":
        url = url.set(drivername=f"{backend}+pymysql")
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


def _server_kind(version: str) -> tuple[str, tuple[int, int, int]]:
    """("MariaDB" | "MySQL", (major, minor, patch)) from ``SELECT VERSION()``."""
    kind = "MariaDB" if "mariadb" in version.lower() else "MySQL"
    text = version[len("5.5.5-"):] if version.startswith("5.5.5-") else version
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", text)
    nums = (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else (0, 0, 0)
    return kind, nums


def _xa_version_problem(version: str) -> str | None:
    kind, v = _server_kind(version)
    if kind == "MariaDB" and v < (10, 5, 0):
        return (f"MariaDB {version} rolls back a prepared XA transaction when its client disconnects "
                f"(fixed in MariaDB 10.5): upgrade to MariaDB >= 10.5")
    if kind == "MySQL" and v < (5, 7, 7):
        return (f"MySQL {version} rolls back a prepared XA transaction when its client disconnects "
                f"(fixed in MySQL 5.7.7): upgrade MySQL")
    return None


# -- columns and values ------------------------------------------------------------------

@dataclass(frozen=True)
class _TableInfo:
    schema: str
    name: str
    table_type: str
    engine: str | None


@dataclass(frozen=True)
class MyColumn:
    """One column of the target table (from ``information_schema.COLUMNS``)."""

    name: str
    data_type: str
    """lower-case ``DATA_TYPE`` (``bigint``, ``varchar``, ``datetime``...)"""
    column_type: str
    """full ``COLUMN_TYPE`` for messages (``bigint(20) unsigned``)"""
    not_null: bool
    has_default: bool
    generated: bool

    @property
    def display_type(self) -> str:
        return self.column_type


_INT_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year", "bit"}
_FLOAT_TYPES = {"float", "double", "real", "decimal", "numeric"}
_TEXT_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json",
               "uuid", "inet4", "inet6"}
_BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "bit"}
_DATETIME_TYPES = {"datetime", "timestamp"}


def _compatible(t: pa.DataType, col: MyColumn) -> bool:
    """Whether Arrow values of type *t* can be written to *col* without loss of meaning."""
    d = col.data_type
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_null(t):
        return True
    if pa.types.is_boolean(t):
        return d in _INT_TYPES or d in _FLOAT_TYPES
    if pa.types.is_integer(t):
        return d in _INT_TYPES or d in _FLOAT_TYPES or d in _TEXT_TYPES
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return d in _FLOAT_TYPES or d in _TEXT_TYPES
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return (d in _TEXT_TYPES or d in _BINARY_TYPES or d in _DATETIME_TYPES or d in ("date", "time")
                or d in ("decimal", "numeric"))
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return d in _BINARY_TYPES
    if pa.types.is_timestamp(t):
        return d in _DATETIME_TYPES or d == "date"
    if pa.types.is_date(t):
        return d == "date" or d in _DATETIME_TYPES
    if pa.types.is_time(t) or pa.types.is_duration(t):
        return d == "time"
    return False


def _arrow_type_name(t: pa.DataType) -> str:
    return str(t)


def _normalize_array(arr: pa.Array) -> pa.Array:
    """Cast an Arrow array to one whose ``to_pylist()`` gives values pymysql can escape:
    dictionaries decoded, timestamps as naive UTC with microseconds, halves as floats."""
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if pa.types.is_timestamp(t):
        unit = "us" if t.unit == "ns" else t.unit
        if t.tz is not None or unit != t.unit:
            arr = arr.cast(pa.timestamp(unit), safe=False)  # tz-aware -> the UTC wall clock
    elif pa.types.is_time64(t) and t.unit == "ns":
        arr = arr.cast(pa.time64("us"), safe=False)
    elif pa.types.is_duration(t) and t.unit == "ns":
        arr = arr.cast(pa.duration("us"), safe=False)
    elif pa.types.is_float16(t):
        arr = arr.cast(pa.float32())
    return arr


def _check_array(arr: pa.Array, column: str, table: str) -> None:
    """Refuse values MariaDB would mangle or reject, naming the column.

    Raises:
        ConfigurationError: a string has a NUL byte, or a float is NaN or infinite.
    """
    t = arr.type
    if arr.null_count == len(arr):
        return
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if pc.any(pc.match_substring(arr, "\x00")).as_py():
            raise ConfigurationError(
                f"column {column!r}: a value contains a NUL byte (\\x00); twopc refuses to write it "
                f"to {table} (MySQL clients and tools truncate text there): remove it before writing")
    elif pa.types.is_floating(t):
        if pc.any(pc.is_nan(arr)).as_py() or pc.any(pc.is_inf(arr)).as_py():
            raise ConfigurationError(
                f"column {column!r}: a value is NaN or infinite, which MariaDB/MySQL cannot store; "
                f"replace it (e.g. with NULL) before writing to {table}")


def _check_value(value: Any, column: str, row: int, table: str) -> Any:
    """Check and convert one Python value of a dict row (see :func:`_check_array`)."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ConfigurationError(
                f"column {column!r}: the value of row {row} contains a NUL byte (\\x00); twopc refuses "
                f"to write it to {table}: remove it before writing")
    elif isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ConfigurationError(
                f"column {column!r}: the value of row {row} is {value!r}, which MariaDB/MySQL cannot "
                f"store; replace it (e.g. with None) before writing to {table}")
    elif isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


# -- open transaction -----------------------------------------------------------------

@dataclass(eq=False)
class _XaTxn:
    """The open XA transaction of one task attempt (process-local, never pickled)."""

    context: TransactionContext
    gid: str
    conn: PoolProxiedConnection | None
    columns: list[MyColumn]
    connection_id: int = 0
    state: str = "none"
    """``none`` (no XA yet), ``active`` (after XA START), ``idle`` (after XA END), ``prepared``"""
    rows: int = 0
    pending: list[dict[str, Any]] = field(default_factory=list)
    failed: str | None = None
    prepared: bool = False
    plans: dict[pa.Schema, tuple[list[MyColumn], str]] = field(default_factory=dict)


def _errno(exc: BaseException) -> int:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    return args[0] if args and isinstance(args[0], int) else 0


def _errmsg(exc: BaseException) -> str:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    if len(args) >= 2 and isinstance(args[1], str):
        return " ".join(args[1].split())
    return " ".join(str(exc).split()) or type(exc).__name__


def _is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, pymysql.err.InterfaceError):
        return True
    if isinstance(exc, pymysql.err.OperationalError):
        code = _errno(exc)
        return code == 0 or 2000 <= code < 3000 or code in _CONNECTION_ERRORS
    return isinstance(exc, OSError)


def _give_back(conn: PoolProxiedConnection | None, *, broken: bool) -> None:
    """Return *conn* to the pool, or close it for good (``broken``). Never raises."""
    if conn is None:
        return
    try:
        if broken:
            conn.invalidate()
        else:
            conn.close()
    except Exception:  # noqa: BLE001 - releasing must not fail
        log.debug("twopc mysql xa: releasing a connection failed", exc_info=True)


def _exec(cur: Cursor, query: str, params: Sequence[Any] = ()) -> int:
    """Execute with a parameter tuple, always: every statement of this module is written
    for pymysql's ``%`` formatting (identifiers come from :func:`_q`)."""
    return cur.execute(query, tuple(params))


# -- the sink -------------------------------------------------------------------------

class MySqlXaSink(TwoPhaseCommitSink[dict[str, Any], _XaTxn, MySqlXaHandle]):
    """Exactly-once appends to one MariaDB/MySQL InnoDB table through XA transactions.

    Args:
        url: SQLAlchemy URL (``mysql://``, ``mysql+pymysql://``, ``mariadb://``...; the
            driver is replaced by PyMySQL), a :class:`sqlalchemy.engine.URL`, or a
            ``jdbc:mysql://`` / ``jdbc:mariadb://`` URL. Credentials may be in the URL.
        table: ``[database.]table`` in MySQL syntax; quote names with backticks
            (```my table```, a backtick inside is doubled). Without a database, the
            URL's database is used.
        marker_table: ``[database.]table`` of the marker table, created by :meth:`validate`.
        batch_size: rows per multi-row ``INSERT`` (pymysql's ``executemany``).
        lock_timeout_s: ``innodb_lock_wait_timeout`` (and ``lock_wait_timeout``) of write
            transactions, in whole seconds. A task that meets rows locked by a prepared
            transaction of an earlier attempt fails after this time.
        connect_timeout: seconds to wait for a connection.
        isolation_level: ``READ COMMITTED``, ``REPEATABLE READ``... for write transactions
            (``_`` or ``-`` may replace the space); ``None`` keeps the server's.
        session_init_statement: SQL run once on every new write connection, before its
            first ``XA START`` (like Spark JDBC's ``sessionInitStatement``).

    Raises:
        ConfigurationError: an argument is invalid (nothing is contacted).

    The instance holds only configuration and pickles to executors; connections come from
    a per-process pool keyed by URL, opened lazily. A write connection is closed (never
    pooled) once its transaction is prepared.
    """

    handle_type = MySqlXaHandle

    def __init__(self, url: str | URL, table: str, *, marker_table: str = "twopc_markers",
                 batch_size: int = 1000, lock_timeout_s: int = 30, connect_timeout: int = 10,
                 isolation_level: str | None = None, session_init_statement: str | None = None) -> None:
        if not url:
            raise MissingOptionError("MySqlXaSink needs a url (mysql+pymysql://user:pw@host:port/database)")
        if not table:
            raise MissingOptionError('MySqlXaSink needs a table (e.g. "events" or "shop.events")')
        parsed = _normalize_url(url)
        self._url = parsed.render_as_string(hide_password=False)
        self._password = parsed.password
        self._db, self._name = _parse_qualified(table, "table")
        self._marker_db, self._marker_name = _parse_qualified(marker_table, "markerTable")
        if self._db is None and not parsed.database:
            raise ConfigurationError(
                f"table {table!r} names no database and the url has none: write database.table or "
                f"add the database to the url (mysql+pymysql://host:port/database)")
        self._batch_size = self._positive_int(batch_size, "batchSize")
        self._lock_timeout_s = self._positive_int(lock_timeout_s, "lockTimeout (seconds)")
        if self._lock_timeout_s > 1073741824:
            raise ConfigurationError("lockTimeout must be at most 1073741824 seconds")
        self._connect_timeout = self._positive_int(connect_timeout, "connectTimeout (seconds)")
        self._isolation = self._check_isolation(isolation_level)
        if session_init_statement is not None and not session_init_statement.strip():
            session_init_statement = None
        self._session_init = session_init_statement
        self._control: PoolProxiedConnection | None = None
        self._open: weakref.WeakSet[_XaTxn] = weakref.WeakSet()

    @staticmethod
    def _positive_int(value: Any, what: str) -> int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ConfigurationError(f"{what} must be a whole number >= 1, got {value!r}")
        try:
            number = int(str(value).strip()) if isinstance(value, str) else int(value)
        except (TypeError, ValueError):
            raise ConfigurationError(f"{what} must be a whole number >= 1, got {value!r}") from None
        if number < 1:
            raise ConfigurationError(f"{what} must be a whole number >= 1, got {value!r}")
        return number

    @staticmethod
    def _check_isolation(level: str | None) -> str | None:
        if level is None or not str(level).strip():
            return None
        norm = " ".join(re.split(r"[\s_-]+", str(level).strip().upper()))
        if norm == "NONE":
            raise ConfigurationError("isolationLevel NONE (no transactions) cannot be used with XA")
        if norm not in _ISOLATION:
            raise ConfigurationError(
                f"isolationLevel {level!r} is invalid: use one of {', '.join(sorted(_ISOLATION))}")
        return norm

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> MySqlXaSink:
        """Build the sink from Spark options (keys case-insensitive): ``url``, ``dbtable``
        (or ``table``), ``user``, ``password``, ``markerTable``, ``batchsize``,
        ``lockTimeout`` (seconds, ``30`` or ``30s``), ``connectTimeout``,
        ``isolationLevel``, ``sessionInitStatement``.

        Raises:
            MissingOptionError: ``url`` or ``dbtable`` is missing.
            ConfigurationError: an option is invalid.
        """
        raw = option(options, "url")
        if not raw:
            raise MissingOptionError('the MySQL XA sink needs option "url", e.g. '
                                     '.option("url", "mysql+pymysql://host:3306/db") or a jdbc:mysql:// URL')
        table = option(options, "dbtable") or option(options, "table")
        if not table:
            raise MissingOptionError('the MySQL XA sink needs option "dbtable", e.g. .option("dbtable", "events")')
        url = _normalize_url(raw, option(options, "user"), option(options, "password"))
        lock = (option(options, "lockTimeout") or "30").strip().lower()
        if lock.endswith("ms") and lock[:-2].strip().isdigit():
            lock_s: Any = max(1, math.ceil(int(lock[:-2]) / 1000))
        elif lock.endswith("s") and lock[:-1].strip().isdigit():
            lock_s = int(lock[:-1])
        else:
            lock_s = lock
        return cls(
            url, table,
            marker_table=option(options, "markerTable") or "twopc_markers",
            batch_size=option(options, "batchsize") or 1000,  # type: ignore[arg-type]
            lock_timeout_s=lock_s,
            connect_timeout=option(options, "connectTimeout") or 10,  # type: ignore[arg-type]
            isolation_level=option(options, "isolationLevel"),
            session_init_statement=option(options, "sessionInitStatement"),
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
        """The target table, as a display name (``db.table``, backticked when needed)."""
        return _display_name(self._db, self._name)

    @property
    def marker_table(self) -> str:
        """The marker table, as a display name."""
        return _display_name(self._marker_db, self._marker_name)

    @property
    def batch_size(self) -> int:
        """Rows per multi-row INSERT."""
        return self._batch_size

    def _url_obj(self) -> URL:
        return make_url(self._url)

    def describe(self) -> str:
        """``MariaDB/MySQL <url without password> table <table>``."""
        return f"MariaDB/MySQL {self._url_obj().render_as_string(hide_password=True)} table {self.table}"

    def __repr__(self) -> str:
        return f"MySqlXaSink({self.describe()})"

    def _where(self) -> str:
        u = self._url_obj()
        port = f":{u.port}" if u.port else ""
        return f"{u.host or 'localhost'}{port}/{u.database or ''}" + (f" as {u.username}" if u.username else "")

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
        except (pymysql.Error, DBAPIError, OSError) as exc:
            err = self._unavailable(exc)
        raise err

    def _unavailable(self, exc: BaseException) -> SinkUnavailableError:
        orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
        code = _errno(orig)
        reason = self._redact(_errmsg(orig))
        hint = ""
        if code == ER_ACCESS_DENIED:
            hint = " (check the user and password)"
        elif code == ER_DBACCESS_DENIED:
            hint = " (the user has no access to this database)"
        elif code in (2003, 2005) or "timed out" in reason.lower():
            hint = " (check host and port, and that the server accepts TCP connections)"
        prefix = f"{code} " if code else ""
        return SinkUnavailableError(f"cannot connect to MariaDB/MySQL at {self._where()}: {prefix}{reason}{hint}")

    def _control_conn(self) -> PoolProxiedConnection:
        if self._control is None:
            self._control = self._checkout()
        return self._control

    def _drop_control(self, *, broken: bool) -> None:
        conn, self._control = self._control, None
        _give_back(conn, broken=broken)

    def _control_execute(self, query: str, params: Sequence[Any] = (), *,
                         fetch: bool = False) -> tuple[int, list[tuple[Any, ...]]]:
        """Run one autocommit statement on the control connection; returns (rowcount, rows).

        Every statement sent here is idempotent (``XA COMMIT``/``XA ROLLBACK`` are
        disambiguated by the marker row, the rest are reads and a bounded ``DELETE``), so a
        connection that turns out to be dead is replaced and the statement sent once more.
        Connection-level failures become :class:`SinkUnavailableError`; other server errors
        propagate as pymysql exceptions.
        """
        err: SinkUnavailableError | None = None
        for attempt in (1, 2):
            reused = self._control is not None
            conn = self._control_conn()
            try:
                with conn.driver_connection.cursor() as cur:  # type: ignore[union-attr]
                    count = _exec(cur, query, params)
                    return count, list(cur.fetchall()) if fetch else []
            except pymysql.Error as exc:
                if not _is_connection_error(exc):
                    raise
                self._drop_control(broken=True)
                err = SinkUnavailableError(
                    f"lost the connection to MariaDB/MySQL at {self._where()}: {self._redact(_errmsg(exc))}")
            if not reused or attempt == 2:
                break
            log.info("twopc mysql xa: the control connection was dead; retrying on a new one")
        assert err is not None
        raise err

    def close(self) -> None:
        """Roll back transactions of this object that are still open (never prepared
        ones) and return the connections to the process pool. The sink stays usable."""
        for txn in list(self._open or ()):
            self.rollback(txn)
        self._drop_control(broken=False)

    # -- XA availability -------------------------------------------------------------------
    @classmethod
    def probe_xa(cls, url: str | URL, *, connect_timeout: int = 10) -> tuple[bool, str]:
        """Tell whether the server at *url* can run this sink's XA protocol.

        Checks: the server answers and accepts the login; its version keeps prepared XA
        transactions across a client disconnect (MariaDB >= 10.5, MySQL >= 5.7.7); InnoDB
        is available with XA support; the user may run ``XA RECOVER``. Never raises: the
        JDBC facade uses the answer to pick the prepared (XA) or the staging mode.

        Returns:
            ``(True, description)`` or ``(False, reason)``; neither contains the password.
        """
        try:
            parsed = _normalize_url(url)
        except ConfigurationError as exc:
            return False, str(exc)
        probe = cls.__new__(cls)
        probe._url = parsed.render_as_string(hide_password=False)
        probe._password = parsed.password
        probe._connect_timeout = max(1, int(connect_timeout))
        try:
            conn = probe._engine().raw_connection()
        except (pymysql.Error, DBAPIError, OSError) as exc:
            return False, str(probe._unavailable(exc))
        broken = False
        try:
            return probe._probe_on(conn.driver_connection)  # type: ignore[arg-type]
        except pymysql.Error as exc:
            broken = _is_connection_error(exc)
            return False, f"probing XA at {probe._where()} failed: {_errno(exc)} {probe._redact(_errmsg(exc))}"
        finally:
            _give_back(conn, broken=broken)

    def xa_available(self) -> tuple[bool, str]:
        """:meth:`probe_xa` for this sink's URL."""
        return self.probe_xa(self._url_obj(), connect_timeout=self._connect_timeout)

    def _probe_on(self, my: PyMySQLConnection) -> tuple[bool, str]:
        with my.cursor() as cur:
            _exec(cur, "SELECT VERSION()")
            row = cur.fetchone()
            version = str(row[0]) if row else "?"
            problem = _xa_version_problem(version)
            if problem:
                return False, problem
            _exec(cur, "SELECT SUPPORT, TRANSACTIONS, XA FROM information_schema.ENGINES WHERE ENGINE = 'InnoDB'")
            eng = cur.fetchone()
            if eng is None or str(eng[0]).upper() not in ("YES", "DEFAULT"):
                return False, f"{version} at {self._where()} has no InnoDB engine, which XA needs"
            if str(eng[2]).upper() != "YES":
                return False, f"{version} at {self._where()}: InnoDB reports no XA support"
            try:
                _exec(cur, "XA RECOVER")
                cur.fetchall()
            except pymysql.err.MySQLError as exc:
                if _errno(exc) in (ER_SPECIFIC_ACCESS_DENIED, ER_TABLEACCESS_DENIED, ER_DBACCESS_DENIED):
                    return False, (f"the user may not run XA RECOVER on {version} at {self._where()}: "
                                   f"GRANT XA_RECOVER_ADMIN ON *.* TO <user> ({self._redact(_errmsg(exc))})")
                raise
        kind, _ = _server_kind(version)
        return True, (f"{kind} {version} at {self._where()}: InnoDB with XA; prepared transactions survive "
                      f"client disconnects; XA RECOVER allowed")

    # -- validation (driver) -------------------------------------------------------------
    def marker_table_ddl(self) -> str:
        """The SQL :meth:`validate` runs to create the marker table (for DBAs)."""
        return self._marker_ddl().replace("%%", "%")

    def _marker_ddl(self) -> str:
        return (
            f"CREATE TABLE IF NOT EXISTS {_qn(self._marker_db, self._marker_name)} ("
            "`gid` VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY, "
            "`sink_id` VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, "
            "`batch_id` BIGINT NOT NULL, `partition_id` INT NOT NULL, `rows` BIGINT NOT NULL, "
            "`prepared_at` TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
            "KEY `twopc_sink_batch` (`sink_id`, `batch_id`)) ENGINE=InnoDB"
        )

    def validate(self, schema: pa.Schema) -> None:
        """Check the server and the table before any task writes; create the marker table.

        Raises:
            SinkUnavailableError: the server cannot be reached or refused the login.
            TargetConfigurationError: the server cannot run the XA protocol (version,
                InnoDB, ``XA RECOVER`` privilege), the target is a view or not InnoDB, or
                the marker table cannot be created or is not a twopc marker table.
            SchemaMismatchError: the table does not exist, or a DataFrame column is
                missing from it or has an incompatible type, or a NOT NULL column without
                default is absent from the DataFrame (every problem is listed).
        """
        conn = self._checkout()
        try:
            self._validate_on(conn.driver_connection, schema)  # type: ignore[arg-type]
        except pymysql.Error as exc:
            broken = _is_connection_error(exc)
            _give_back(conn, broken=broken)
            raise (SinkUnavailableError if broken else SinkError)(
                f"validating {self.table} on {self._where()} failed: {_errno(exc)} {self._redact(_errmsg(exc))}"
            ) from None
        except BaseException:
            _give_back(conn, broken=False)
            raise
        _give_back(conn, broken=False)

    def _validate_on(self, my: PyMySQLConnection, schema: pa.Schema) -> None:
        ok, reason = self._probe_on(my)
        if not ok:
            raise TargetConfigurationError(f"twopc cannot write exactly once through XA: {reason}")
        with my.cursor() as cur:
            info = self._table_info(cur, self._db, self._name)
            if info is None:
                raise SchemaMismatchError(self._missing_table_message(cur))
            table_type, engine = info.table_type, info.engine
            if table_type not in _TXN_TABLE_TYPES:
                raise TargetConfigurationError(
                    f"{self.table} is a {table_type.lower()}, not a table: twopc writes to base tables only")
            if (engine or "").lower() != "innodb":
                raise TargetConfigurationError(
                    f"{self.table} uses the {engine} engine, which cannot take part in XA transactions "
                    f"(its rows would be written even when the transaction is rolled back): XA needs "
                    f"InnoDB. Convert it with ALTER TABLE {self.table} ENGINE=InnoDB")
            columns = self._columns(cur, info)
            _match_columns(schema.names, [f.type for f in schema], columns, self.table, check_types=True,
                           check_required=True)
            self._ensure_markers(cur)

    def _missing_table_message(self, cur: Cursor) -> str:
        hint = ""
        _exec(cur, "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                   "WHERE LOWER(TABLE_NAME) = LOWER(%s) AND TABLE_SCHEMA = COALESCE(%s, DATABASE()) LIMIT 3",
              (self._name, self._db))
        rows = cur.fetchall()
        if rows:
            hint = " Did you mean " + ", ".join(_display_name(s, n) for s, n in rows) + "? Table names are case-sensitive here."
        db = self._db or self._url_obj().database
        return (f"table {self.table} does not exist in database {db!r}: create it first (e.g. CREATE TABLE "
                f"{self.table} (...) ENGINE=InnoDB with a column per DataFrame column).{hint}")

    @staticmethod
    def _table_info(cur: Cursor, db: str | None, name: str) -> _TableInfo | None:
        """Type, engine and stored names of ``db.name`` (``None``: no such table).

        ``information_schema`` compares names case-insensitively, MariaDB on Linux does
        not (``lower_case_table_names = 0``): an exact match is required there.
        """
        _exec(cur, "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE, ENGINE, DATABASE(), @@lower_case_table_names "
                   "FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(%s, DATABASE()) "
                   "AND TABLE_NAME = %s", (db, name))
        rows = list(cur.fetchall())
        if not rows:
            return None
        want_db = db if db is not None else rows[0][4]
        exact = [r for r in rows if r[0] == want_db and r[1] == name]
        if not exact and int(rows[0][5] or 0) != 0:
            exact = rows[:1]
        if not exact:
            return None
        r = exact[0]
        return _TableInfo(str(r[0]), str(r[1]), str(r[2]), None if r[3] is None else str(r[3]))

    @staticmethod
    def _columns(cur: Cursor, info: _TableInfo) -> list[MyColumn]:
        _exec(cur, "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, "
                   "COLUMN_DEFAULT, EXTRA FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                   "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (info.schema, info.name))
        out = []
        for sch, tab, col, dtype, ctype, nullable, default, extra in cur.fetchall():
            if sch != info.schema or tab != info.name:
                continue
            ext = str(extra or "").lower()
            generated = "generated" in ext or ext.strip() in ("virtual", "persistent", "stored")
            has_default = default is not None or "auto_increment" in ext or generated or nullable == "YES"
            out.append(MyColumn(str(col), str(dtype).lower(), str(ctype), nullable == "NO", has_default, generated))
        return out

    def _ensure_markers(self, cur: Cursor) -> None:
        info = self._table_info(cur, self._marker_db, self._marker_name)
        if info is not None:
            have = {c.name.lower() for c in self._columns(cur, info)}
            missing = [c for c in _MARKER_COLUMNS if c not in have]
            if missing:
                raise TargetConfigurationError(
                    f"{self.marker_table} exists but is not a twopc marker table (it lacks columns "
                    f"{', '.join(missing)}): set option markerTable to another name")
            if (info.engine or "").lower() != "innodb":
                raise TargetConfigurationError(
                    f"the marker table {self.marker_table} uses the {info.engine} engine: it must be InnoDB to "
                    f"commit atomically with the data (ALTER TABLE {self.marker_table} ENGINE=InnoDB)")
            return
        try:
            _exec(cur, self._marker_ddl())
        except pymysql.err.MySQLError as exc:
            code = _errno(exc)
            if code in (ER_DBACCESS_DENIED, ER_TABLEACCESS_DENIED, ER_SPECIFIC_ACCESS_DENIED):
                raise TargetConfigurationError(
                    f"cannot create the marker table {self.marker_table}: permission denied. Create it once "
                    f"as an owner: {self.marker_table_ddl()}; GRANT SELECT, INSERT, DELETE ON "
                    f"{self.marker_table} TO <user>") from None
            if code == 1049:  # unknown database
                raise TargetConfigurationError(
                    f"cannot create the marker table {self.marker_table}: its database does not exist. "
                    f"Set option markerTable to a table in an existing database") from None
            raise
        log.info("twopc mysql xa: created marker table %s", self.marker_table)

    # -- executor side -------------------------------------------------------------------
    def make_gid(self, context: TransactionContext) -> str:
        """``twopc:{sink}:{batch}:{partition}:{attempt}:{8 hex}``, the xid's gtrid.

        Raises:
            ProtocolError: the sink id has characters outside ``[A-Za-z0-9_.-]``, or the
                gtrid would exceed MariaDB's/MySQL's 64 bytes (use a shorter sink id).
        """
        if not _SINK_ID.match(context.sink_id):
            raise ProtocolError(f"sink id {context.sink_id!r} is not valid in an XA transaction id")
        gid = (f"{GID_PREFIX}:{context.sink_id}:{int(context.batch_id)}:{int(context.partition_id)}:"
               f"{int(context.attempt_id)}:{secrets.token_hex(4)}")
        if len(gid.encode()) > MAX_GTRID_BYTES:
            raise ProtocolError(
                f"XA transaction id {gid!r} is {len(gid.encode())} bytes, over the {MAX_GTRID_BYTES}-byte "
                f"limit of MariaDB/MySQL on an xid's gtrid: use a shorter sink id (option sinkId; "
                f"{len(context.sink_id)} characters now)")
        return gid

    def begin_transaction(self, context: TransactionContext) -> _XaTxn:
        """Check out a connection, run ``session_init_statement`` once per connection, set
        ``innodb_lock_wait_timeout``, ``time_zone = '+00:00'``, strict ``sql_mode`` and the
        isolation level, read the table's columns, then ``XA START``.

        Raises:
            SinkUnavailableError: no connection.
            SchemaMismatchError: the table no longer exists.
            ProtocolError: invalid or too long sink id.
            SinkError: the server refused a statement (e.g. the session init statement).
        """
        gid = self.make_gid(context)
        conn = self._checkout()
        txn = _XaTxn(context, gid, conn, [])
        self._open.add(txn)
        try:
            with self._my(txn).cursor() as cur:
                if self._session_init is not None:
                    done: set[str] = conn.info.setdefault("twopc_session_init", set())
                    if self._session_init not in done:
                        _exec(cur, self._session_init.replace("%", "%%"))
                        while cur.nextset():
                            pass
                        done.add(self._session_init)
                _exec(cur, "SET SESSION innodb_lock_wait_timeout = %s, lock_wait_timeout = %s, "
                           "time_zone = '+00:00', sql_mode = IF(FIND_IN_SET('STRICT_TRANS_TABLES', @@SESSION.sql_mode) "
                           "OR FIND_IN_SET('STRICT_ALL_TABLES', @@SESSION.sql_mode), @@SESSION.sql_mode, "
                           "CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'STRICT_TRANS_TABLES'))",
                      (self._lock_timeout_s, self._lock_timeout_s))
                _exec(cur, "SELECT CONNECTION_ID()")
                row = cur.fetchone()
                txn.connection_id = int(row[0]) if row else 0
                info = self._table_info(cur, self._db, self._name)
                if info is None:
                    raise SchemaMismatchError(f"table {self.table} does not exist (any more): create it first")
                txn.columns = self._columns(cur, info)
                if self._isolation is not None:
                    _exec(cur, f"SET TRANSACTION ISOLATION LEVEL {self._isolation}")
                _exec(cur, "XA START %s", (gid,))
                txn.state = "active"
        except pymysql.Error as exc:
            self._fail(txn, exc, "begin an XA transaction")
        except BaseException:
            self._release(txn, broken=txn.state != "none")
            raise
        log.debug("twopc mysql xa: began %s", gid)
        return txn

    @staticmethod
    def _my(txn: _XaTxn) -> PyMySQLConnection:
        assert txn.conn is not None
        return txn.conn.driver_connection  # type: ignore[return-value]

    def _usable(self, txn: _XaTxn) -> PyMySQLConnection:
        if txn.prepared:
            raise ProtocolError(f"transaction {txn.gid} is already prepared")
        if txn.failed is not None or txn.conn is None:
            raise SinkError(f"transaction {txn.gid} was already rolled back: {txn.failed or 'closed'}")
        return self._my(txn)

    def invoke(self, txn: _XaTxn, value: dict[str, Any]) -> None:
        """Buffer one row (a dict of column -> value); rows are inserted ``batch_size`` at a
        time and at :meth:`pre_commit`. Aware datetimes are converted to naive UTC.

        Raises:
            SchemaMismatchError: a key is not a column of the table.
            ConfigurationError: a string contains a NUL byte or a float is NaN/infinite
                (the transaction is rolled back).
            SinkError: the server rejected the rows (the transaction is rolled back).
        """
        self._usable(txn)
        if not isinstance(value, Mapping):
            raise ConfigurationError(f"MySqlXaSink.invoke takes a dict of column -> value, got {type(value).__name__}")
        txn.pending.append(dict(value))
        if len(txn.pending) >= self._batch_size:
            self._flush_rows(txn)

    def _insert_sql(self, cols: Sequence[MyColumn]) -> str:
        names = ", ".join(_q(c.name) for c in cols)
        marks = ", ".join(["%s"] * len(cols))
        return f"INSERT INTO {_qn(self._db, self._name)} ({names}) VALUES ({marks})"

    def _insert(self, txn: _XaTxn, query: str, rows: list[tuple[Any, ...]]) -> None:
        with self._my(txn).cursor() as cur:
            for i in range(0, len(rows), self._batch_size):
                cur.executemany(query, rows[i:i + self._batch_size])
        txn.rows += len(rows)

    def _flush_rows(self, txn: _XaTxn) -> None:
        self._usable(txn)
        pending, txn.pending = txn.pending, []
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for row in pending:
            groups.setdefault(tuple(row), []).append(row)
        try:
            for keys, rows in groups.items():
                if not keys:
                    raise ConfigurationError("MySqlXaSink.invoke got an empty row (no columns)")
                cols = _match_columns(list(keys), None, txn.columns, self.table, check_types=False,
                                      check_required=False)
                values = [tuple(_check_value(r[k], k, i, self.table) for k in keys) for i, r in enumerate(rows)]
                self._insert(txn, self._insert_sql(cols), values)
        except pymysql.Error as exc:
            self._fail(txn, exc, f"insert rows into {self.table}")
        except BaseException as exc:
            self._abandon(txn, exc)
            raise

    def invoke_batch(self, txn: _XaTxn, batch: pa.RecordBatch) -> None:
        """Insert a whole Arrow batch into the transaction with multi-row INSERTs of
        ``batch_size`` rows. Timestamps are written as naive UTC (microseconds).

        Raises:
            SchemaMismatchError: a batch column is not in the table or has an incompatible
                type.
            ConfigurationError: a string contains a NUL byte or a float is NaN/infinite;
                nothing of the transaction remains.
            SinkError: the server rejected the rows, e.g. a constraint violation or a lock
                timeout (the transaction is rolled back: nothing of it remains).
        """
        self._usable(txn)
        if batch.num_rows == 0:
            return
        if txn.pending:
            self._flush_rows(txn)
        try:
            plan = txn.plans.get(batch.schema)
            if plan is None:
                cols = _match_columns(batch.schema.names, [f.type for f in batch.schema], txn.columns,
                                      self.table, check_types=True, check_required=False)
                if not cols:
                    raise ConfigurationError("MySqlXaSink.invoke_batch got a batch without columns")
                plan = (cols, self._insert_sql(cols))
                txn.plans[batch.schema] = plan
            _cols, query = plan
            arrays = []
            for name, arr in zip(batch.schema.names, batch.columns, strict=True):
                arr = _normalize_array(arr)
                _check_array(arr, name, self.table)
                arrays.append(arr)
            for start in range(0, batch.num_rows, self._batch_size):
                chunk = [a.slice(start, self._batch_size).to_pylist() for a in arrays]
                self._insert(txn, query, list(zip(*chunk, strict=True)))
        except pymysql.Error as exc:
            self._fail(txn, exc, f"insert into {self.table}")
        except BaseException as exc:
            self._abandon(txn, exc)
            raise

    def pre_commit(self, txn: _XaTxn) -> MySqlXaHandle:
        """Insert the marker row, ``XA END``, ``XA PREPARE``, check with ``XA RECOVER`` that
        the server really prepared it, then close the connection and wait until the server
        has ended that session (a prepared XA transaction stays attached to a live session,
        and only then can another session commit it).

        Raises:
            SinkError: the server rejected the rows, the marker or the prepare (e.g. a
                constraint violation, a lock timeout, a deadlock). The transaction is rolled
                back; nothing is left prepared.
            SinkUnavailableError: the connection broke (if ``XA PREPARE`` had reached the
                server, the orphan is rolled back here when possible, else by the next
                sweep or recovery).
        """
        self._usable(txn)
        if txn.pending:
            self._flush_rows(txn)
        ctx = txn.context
        marker = _qn(self._marker_db, self._marker_name)
        prepare_sent = False
        try:
            with self._my(txn).cursor() as cur:
                _exec(cur, f"INSERT INTO {marker} (`gid`, `sink_id`, `batch_id`, `partition_id`, `rows`) "
                           "VALUES (%s, %s, %s, %s, %s)",
                      (txn.gid, ctx.sink_id, ctx.batch_id, ctx.partition_id, txn.rows))
                _exec(cur, "XA END %s", (txn.gid,))
                txn.state = "idle"
                prepare_sent = True
                _exec(cur, "XA PREPARE %s", (txn.gid,))
                txn.state = "prepared"
                prepared = txn.gid in self._recover_on(cur)
        except pymysql.Error as exc:
            if prepare_sent and _is_connection_error(exc):
                self._release(txn, broken=True)
                self._rollback_prepared_quietly(txn)
            self._fail(txn, exc, f"prepare the XA transaction on {self.table}")
        except BaseException as exc:
            if txn.state == "prepared":
                txn.prepared = True  # nothing else may touch the session: close it, sweep the orphan
                self._release(txn, broken=True)
                self._rollback_prepared_quietly(txn)
            else:
                self._abandon(txn, exc)
            raise
        if not prepared:
            self._abandon(txn, SinkError("XA RECOVER does not list the transaction"))
            raise SinkError(
                f"MariaDB/MySQL acknowledged XA PREPARE of {txn.gid} on {self.table} but XA RECOVER does not "
                f"list it: nothing was written; the task must be retried")
        txn.prepared = True
        self._release(txn, broken=True)  # close: a prepared xid is committable only once its session ended
        self._wait_detached(txn)
        log.debug("twopc mysql xa: prepared %s (%s rows)", txn.gid, txn.rows)
        return MySqlXaHandle(txn.gid, ctx.sink_id, ctx.batch_id, ctx.partition_id, ctx.attempt_id,
                             table=self.table, rows=txn.rows)

    def _wait_detached(self, txn: _XaTxn) -> None:
        """Wait (bounded) until the server has ended the closed write session, so that the
        returned handle is committable at once. Best effort: commit retries anyway."""
        if not txn.connection_id:
            return
        deadline = time.monotonic() + _DETACH_WAIT_S
        delay = 0.002
        try:
            while True:
                _n, rows = self._control_execute(
                    "SELECT 1 FROM information_schema.PROCESSLIST WHERE ID = %s", (txn.connection_id,), fetch=True)
                if not rows or time.monotonic() > deadline:
                    return
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
        except (SinkError, pymysql.Error):
            log.debug("twopc mysql xa: could not watch session %s end", txn.connection_id, exc_info=True)

    def rollback(self, txn: _XaTxn) -> None:
        """Roll back an open, unprepared transaction (``XA END`` + ``XA ROLLBACK``; if that
        fails the connection is closed, which makes the server roll it back). Idempotent;
        never raises."""
        if txn.prepared or txn.conn is None:
            return
        broken = False
        try:
            with self._my(txn).cursor() as cur:
                if txn.state == "active":
                    try:
                        _exec(cur, "XA END %s", (txn.gid,))
                    except pymysql.err.MySQLError as exc:
                        if _is_connection_error(exc) or _errno(exc) not in _XA_ROLLED_BACK:
                            raise
                    txn.state = "idle"
                if txn.state in ("idle", "prepared"):
                    try:
                        _exec(cur, "XA ROLLBACK %s", (txn.gid,))
                    except pymysql.err.MySQLError as exc:
                        if _is_connection_error(exc) or _errno(exc) not in (_XA_ROLLED_BACK | {ER_XAER_NOTA}):
                            raise
                    txn.state = "none"
        except Exception:  # noqa: BLE001 - the server rolls back when the session ends
            broken = True
            log.debug("twopc mysql xa: rollback of %s failed; closing the connection", txn.gid, exc_info=True)
        txn.failed = txn.failed or "rolled back"
        self._release(txn, broken=broken or txn.state != "none")

    def _release(self, txn: _XaTxn, *, broken: bool) -> None:
        conn, txn.conn = txn.conn, None
        if self._open is not None:
            self._open.discard(txn)
        _give_back(conn, broken=broken)

    def _abandon(self, txn: _XaTxn, exc: BaseException) -> None:
        """Roll back after a non-driver error (our own check, an interrupt)."""
        txn.failed = f"{type(exc).__name__}: {exc}"[:200]
        self.rollback(txn)

    def _fail(self, txn: _XaTxn, exc: pymysql.err.MySQLError, action: str) -> NoReturn:
        """Roll the transaction back and raise a credential-free :class:`SinkError`."""
        broken = _is_connection_error(exc)
        txn.failed = f"{_errno(exc) or 'connection'} during {action}"
        if broken:
            self._release(txn, broken=True)
        else:
            self.rollback(txn)
        raise self._map_error(exc, action) from None

    def _map_error(self, exc: pymysql.err.MySQLError, action: str) -> SinkError:
        code, msg = _errno(exc), self._redact(_errmsg(exc))
        rolled = "The transaction was rolled back; nothing of this attempt was written"
        if _is_connection_error(exc):
            return SinkUnavailableError(f"lost the connection to MariaDB/MySQL at {self._where()} while trying "
                                        f"to {action}: {code} {msg}")
        if code == ER_LOCK_WAIT_TIMEOUT:
            return SinkError(
                f"could not {action}: lock wait timeout ({self._lock_timeout_s}s) on rows of {self.table}. A "
                f"prepared transaction of an earlier attempt may hold these rows; twopc rolls it back at the "
                f"next recovery (query restart) — this attempt fails instead of waiting. ({code} {msg}) {rolled}")
        if code in (ER_LOCK_DEADLOCK, ER_XA_RBDEADLOCK):
            return SinkError(f"could not {action}: deadlock on {self.table} ({code} {msg}). {rolled}")
        if code == ER_DUP_ENTRY:
            m = re.search(r"for key '([^']*)'", msg)
            key = m.group(1) if m else "?"
            return SinkError(f"could not {action}: unique constraint violated (key {key!r}) on table "
                             f"{self.table}: {msg}. {rolled}")
        if code == ER_BAD_NULL:
            m = re.search(r"Column '([^']*)'", msg)
            col = m.group(1) if m else "?"
            return SinkError(f"could not {action}: NOT NULL constraint violated (column {col!r}) on table "
                             f"{self.table}: {msg}. {rolled}")
        if code == ER_NO_DEFAULT_FOR_FIELD:
            m = re.search(r"Field '([^']*)'", msg)
            col = m.group(1) if m else "?"
            return SinkError(f"could not {action}: column {col!r} of {self.table} is NOT NULL without a "
                             f"default and was not written: {msg}. {rolled}")
        if code in _FK_ERRORS:
            m = re.search(r"CONSTRAINT `((?:[^`]|``)*)`", msg)
            name = m.group(1).replace("``", "`") if m else "?"
            return SinkError(f"could not {action}: foreign key constraint violated (constraint {name!r}) on "
                             f"{self.table}: {msg}. {rolled}")
        if code in _CHECK_ERRORS:
            m = re.search(r"CONSTRAINT `((?:[^`]|``)*)`", msg) or re.search(r"constraint '([^']*)'", msg)
            name = m.group(1).replace("``", "`") if m else "?"
            return SinkError(f"could not {action}: check constraint violated (constraint {name!r}) on "
                             f"{self.table}: {msg}. {rolled}")
        if code in _DATA_ERRORS:
            m = re.search(r"column `?'?([^'`]*)'?`? at row", msg) or re.search(r"column '([^']*)'", msg)
            col = m.group(1) if m else "?"
            return SinkError(f"could not {action}: value {_DATA_ERRORS[code]} for column {col!r} of "
                             f"{self.table}: {msg}. {rolled}")
        if code == ER_NO_SUCH_TABLE:
            return SinkError(f"could not {action}: {msg} (was the table or the marker table {self.marker_table} "
                             f"dropped? validate() creates the marker table)")
        if code in (ER_TABLEACCESS_DENIED, ER_DBACCESS_DENIED, ER_SPECIFIC_ACCESS_DENIED):
            return SinkError(f"could not {action}: permission denied: {msg}")
        if code in _XA_ROLLED_BACK:
            return SinkError(f"could not {action}: the server had already rolled the XA transaction back "
                             f"({code} {msg}). {rolled}")
        return SinkError(f"could not {action}: MariaDB/MySQL error {code}: {msg}. {rolled}")

    def _rollback_prepared_quietly(self, txn: _XaTxn) -> None:
        """After the write connection broke around ``XA PREPARE``: end its server session
        (``KILL``; the server may not have noticed the disconnect yet, and a prepared xid is
        attached to its session until then) and roll the xid back if it was prepared. Best
        effort, never raises: recovery's sweep rolls back whatever remains."""
        try:
            if txn.connection_id:
                try:
                    self._control_execute(f"KILL CONNECTION {int(txn.connection_id)}")
                except pymysql.err.MySQLError:
                    pass  # unknown thread: already gone
                self._wait_detached(txn)
            self._control_execute("XA ROLLBACK %s", (txn.gid,))
        except Exception:  # noqa: BLE001 - recovery's sweep will find it
            log.debug("twopc mysql xa: could not roll back %s after a failed prepare", txn.gid, exc_info=True)

    # -- driver side -----------------------------------------------------------------------
    @staticmethod
    def _checked_gid(handle: TransactionHandle) -> str:
        gid = handle.txn_id
        if not isinstance(gid, str) or not _GTRID_CHARS.match(gid) or len(gid.encode()) > MAX_GTRID_BYTES:
            raise ProtocolError(f"handle txn_id {gid!r:.80} is not a twopc XA transaction id")
        return gid

    @staticmethod
    def _recover_on(cur: Cursor) -> set[str]:
        _exec(cur, "XA RECOVER")
        return set(_parse_recover(cur.fetchall()))

    def _recovered(self) -> set[str]:
        """Gtrids of every prepared XA transaction on the server (formatID 1, empty bqual)."""
        _n, rows = self._control_execute("XA RECOVER", fetch=True)
        return set(_parse_recover(rows))

    def _marker_exists(self, gid: str) -> bool:
        try:
            _n, rows = self._control_execute(
                f"SELECT 1 FROM {_qn(self._marker_db, self._marker_name)} WHERE `gid` = %s", (gid,), fetch=True)
        except pymysql.err.MySQLError as exc:
            if _errno(exc) == ER_NO_SUCH_TABLE:
                return False
            raise self._map_error(exc, "read the marker table") from None
        return bool(rows)

    def _xa_finish(self, verb: str, gid: str) -> bool:
        """Send ``XA COMMIT``/``XA ROLLBACK`` for *gid*; ``True`` if it did it, ``False`` if
        the server does not know the xid (XAER_NOTA and not listed by XA RECOVER).

        An xid that XA RECOVER lists but XA COMMIT calls unknown is still attached to a
        live session (the one that prepared it has not ended yet): retried for a while,
        then a :class:`SinkError`.
        """
        deadline = time.monotonic() + _DETACH_WAIT_S
        delay = 0.01
        while True:
            try:
                self._control_execute(f"XA {verb} %s", (gid,))
                return True
            except pymysql.err.MySQLError as exc:
                if _errno(exc) != ER_XAER_NOTA:
                    raise self._map_error(exc, f"XA {verb} {gid}") from None
            if gid not in self._recovered():
                return False
            if time.monotonic() > deadline:
                raise SinkError(
                    f"XA {verb} {gid}: the transaction is prepared but still attached to a live session "
                    f"(the task's connection has not ended); nothing changed, retry later or end that "
                    f"connection (KILL it)")
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def commit(self, handle: MySqlXaHandle) -> CommitOutcome:
        """``XA COMMIT`` the handle's xid from the control connection.

        Returns:
            ``COMMITTED``; ``ALREADY_COMMITTED`` when the xid is unknown (``XAER_NOTA``)
            and its marker row exists; ``LOST`` when it is unknown without a marker (it was
            rolled back).

        Raises:
            ProtocolError: the handle's xid is malformed.
            SinkUnavailableError: the connection failed (nothing changed, or the commit
                happened and a retry answers ``ALREADY_COMMITTED``).
            SinkError: another server error, or the xid is still attached to a live
                session after a wait; retry.
        """
        gid = self._checked_gid(handle)
        if self._xa_finish("COMMIT", gid):
            return CommitOutcome.COMMITTED
        if self._marker_exists(gid):
            return CommitOutcome.ALREADY_COMMITTED
        log.error("twopc mysql xa: %s is neither prepared nor committed on %s", gid, self.table)
        return CommitOutcome.LOST

    def abort(self, handle: MySqlXaHandle) -> None:
        """``XA ROLLBACK`` the handle's xid; an xid that is already gone is fine.

        Raises:
            ProtocolError: the xid is gone and its marker row exists: it was committed; or
                the handle's xid is malformed.
            SinkError / SinkUnavailableError: the server failed; retry.
        """
        gid = self._checked_gid(handle)
        if self._xa_finish("ROLLBACK", gid):
            return
        if self._marker_exists(gid):
            raise ProtocolError(
                f"asked to roll back {gid}, but it was already committed to {self.table} (its marker row exists)")

    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> list[MySqlXaHandle]:
        """Prepared XA transactions of *sink_id* (and *batch_id*) on the server, from
        ``XA RECOVER`` (server-wide). ``rows`` is ``-1`` (unknown) in the returned handles.

        Raises:
            SinkUnavailableError / SinkError: the server failed.
        """
        prefix = f"{GID_PREFIX}:{sink_id}:"
        try:
            gids = self._recovered()
        except pymysql.err.MySQLError as exc:
            raise self._map_error(exc, "list prepared XA transactions") from None
        out = []
        for gid in sorted(g for g in gids if g.startswith(prefix)):
            h = self.parse_gid(gid)
            if h is None or h.sink_id != sink_id:
                log.warning("twopc mysql xa: ignoring prepared XA transaction with malformed id %r", gid)
                continue
            if batch_id is None or h.batch_id == batch_id:
                out.append(h)
        return out

    def parse_gid(self, gid: str) -> MySqlXaHandle | None:
        """Rebuild a handle from a gtrid made by :meth:`make_gid` (``None`` if it is not one)."""
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
        return MySqlXaHandle(gid, sink_id, b, p, a, table=self.table, rows=-1)

    def purge_committed(self, sink_id: str, below_batch: int) -> None:
        """The runtime's hook after the ledger forgot batches ``< below_batch``: delete
        their marker rows (:meth:`purge_markers`). Best effort: a failure is logged, not
        raised (the rows are deleted at the next purge)."""
        try:
            deleted = self.purge_markers(sink_id, below_batch)
        except SinkError as exc:
            log.warning("twopc mysql xa: could not purge marker rows of sink %s below batch %s: %s",
                        sink_id, below_batch, exc)
            return
        log.debug("twopc mysql xa: purged %s marker rows of sink %s below batch %s", deleted, sink_id, below_batch)

    def purge_markers(self, sink_id: str, below_batch: int) -> int:
        """Delete the marker rows of *sink_id*'s batches ``< below_batch``; returns how many.

        Markers let :meth:`commit` tell ``ALREADY_COMMITTED`` from ``LOST``; purge only
        batches older than every batch the commit ledger still holds.

        Raises:
            SinkError / SinkUnavailableError: the server failed.
        """
        try:
            count, _rows = self._control_execute(
                f"DELETE FROM {_qn(self._marker_db, self._marker_name)} WHERE `sink_id` = %s AND `batch_id` < %s",
                (sink_id, below_batch))
        except pymysql.err.MySQLError as exc:
            raise self._map_error(exc, f"purge markers from {self.marker_table}") from None
        return count


def _parse_recover(rows: Iterable[Sequence[Any]]) -> list[str]:
    """Gtrids from ``XA RECOVER`` rows ``(formatID, gtrid_length, bqual_length, data)``,
    keeping only xids of this sink's shape (formatID 1, empty bqual, ASCII gtrid)."""
    out = []
    for row in rows:
        try:
            fmt, glen, blen, data = int(row[0]), int(row[1]), int(row[2]), row[3]
        except (TypeError, ValueError, IndexError):
            continue
        if fmt != FORMAT_ID or blen != 0:
            continue
        raw = data if isinstance(data, bytes | bytearray) else str(data).encode("utf-8", "surrogateescape")
        try:
            gid = bytes(raw[:glen]).decode("ascii")
        except UnicodeDecodeError:
            continue
        if _GTRID_CHARS.match(gid):
            out.append(gid)
    return out


def _match_columns(names: Sequence[str], types: Sequence[pa.DataType] | None, columns: Sequence[MyColumn],
                   table: str, *, check_types: bool, check_required: bool) -> list[MyColumn]:
    """:func:`sinks._columns.match_columns` with MySQL's type rules."""
    return match_columns(names, types, columns, table, compatible=_compatible if check_types else None,
                         type_name=_arrow_type_name, check_required=check_required)
