"""The dialect registry: a database is one :class:`SqlDatabase` subclass in its folder, found by
the names it claims as entry points (:func:`dialect_for`); the shared SQL layer holds no list
of databases, and a name no folder claims gets SQLAlchemy's generic behaviour (this base)."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

from twopc import SinkError

from .._options import Duration

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlalchemy.engine import URL, Connection, Engine
    from sqlalchemy.types import TypeEngine

__all__ = ["ERROR_RULES", "GROUP", "DriverBound", "SqlDatabase", "dialect_for"]

T = TypeVar("T")


#: the driver's error rules of a database, the functions its :attr:`SqlDatabase.errors_module` defines
ERROR_RULES = ("connect_failure", "is_connection_error", "is_missing_table", "error_code", "error_text", "map_error",
               "value_error")


@dataclasses.dataclass(frozen=True)
class DriverBound(Generic[T]):
    """A class attribute of a dialect that lives in its driver's modules (``module:name``),
    imported when it is first read: a dialect's folder loads without its driver."""

    path: str

    def __get__(self, obj: object, owner: type | None = None) -> T:
        module, _, name = self.path.partition(":")
        return cast(T, getattr(importlib.import_module(module), name))


def _connect_failure(exc: BaseException) -> tuple[str, str]:
    return _one_line(exc), ""


def _never(exc: BaseException) -> bool:
    return False


def _no_code(exc: BaseException) -> str:
    return ""


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _no_value_error(exc: BaseException, action: str, table: str, redact: Callable[[str], str]) -> SinkError | None:
    return None


class _NoDriverError(Exception):
    """Raised by no driver: what a database without a twopc driver catches."""


class SqlDatabase:
    """One database as the shared SQL layer sees it, as class attributes and static methods (the class is the dialect
    object). This base is SQLAlchemy's generic behaviour without prepared transactions; a database's folder subclasses
    it without importing its driver (:class:`DriverBound`), and a database that prepares subclasses that again with its
    :class:`~twopc.sinks.sql._sql_dialect.SqlDialect`."""

    name: ClassVar[str] = "other"  #: the dialect's name (in target identities)
    format_name: ClassVar[str] = "twopc-jdbc"  #: the name the sink's options are read under (its Spark format)
    product: ClassVar[str] = "the database"  #: the database's name in messages
    id_name: ClassVar[str] = "transaction id"  #: what the database calls a transaction id, in messages
    #: the longest transaction id (in bytes) the database prepares (``None``: no prepared transactions)
    max_id_bytes: ClassVar[int | None] = None
    #: the error codes (:attr:`error_code`) of a unique key's violation
    unique_violations: ClassVar[frozenset[str]] = frozenset()
    driver_error: ClassVar[type[Exception]] = _NoDriverError  #: the driver's base exception class
    #: the DB-API module twopc connects with without SQLAlchemy (:func:`~twopc.sinks.sql._engines.dbapi_connect_params`)
    dbapi: ClassVar[str | None] = None
    extra: ClassVar[str] = ""  #: the extra of ``pyspark-twopc`` that installs :attr:`dbapi`
    #: names a message shows without quotes
    shown_plain: ClassVar[re.Pattern[str]] = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")
    #: the quotes a table name may be written in (the first: how messages quote)
    name_quotes: ClassVar[str] = '"`['
    folds_lower: ClassVar[bool] = False  #: whether unquoted names fold to lower case

    @staticmethod
    def name_too_long(part: str) -> str | None:
        """*part*'s length and the database's limit when it is too long; ``None`` when it fits."""
        return None

    #: whether twopc's tables can live in a schema of their own (option ``twopcSchema``)
    twopc_schemas: ClassVar[bool] = False
    #: whether a write checks its user's privileges on twopc's tables before any task
    checks_privileges: ClassVar[bool] = False

    @staticmethod
    def bookkeeping_name(name: str, schema: str, database: str) -> str:
        """The name of twopc's table *name* in *schema* (``twopcSchema``) of *database*."""
        return name

    @classmethod
    def ensure_schema(cls, run: Callable[[str], list[tuple[Any, ...]]], schema: str, database: str) -> None:
        """Create *schema* when missing and check the user may use it (*run*: one autocommit statement)."""

    @staticmethod
    def current_user(run: Callable[[str], list[tuple[Any, ...]]]) -> str:
        """The connection's user as a ``GRANT`` names it."""
        rows = run("SELECT current_user")
        return str(rows[0][0]) if rows else "<user>"

    # -- URLs (:mod:`twopc.sinks.sql.options._jdbc_url`)
    #: the JDBC subprotocols the dialect translates (``jdbc:<subprotocol>:...``)
    jdbc_subprotocols: ClassVar[frozenset[str]] = frozenset()
    #: whether a JDBC URL may omit the host (``jdbc:postgresql:db``) and use the driver's host syntax
    jdbc_bare_database: ClassVar[bool] = False

    @staticmethod
    def split_jdbc(rest: str) -> Any:
        """The text after ``jdbc:<subprotocol>:`` as a ``JdbcParts``; ``None``: the common
        ``//user:password@host:port/database?params`` form."""
        return None

    @staticmethod
    def jdbc_url(parts: Any) -> tuple[URL, dict[str, str | tuple[str, ...]]]:
        """The credential-free SQLAlchemy URL of a JDBC URL taken apart, and its added query parameters."""
        raise NotImplementedError

    @staticmethod
    def sqlalchemy_url(url: URL, driver: str) -> URL:
        """*url* (its driver *driver*) with the driver twopc connects with. Raises ``ConfigurationError``: twopc
        connects with another driver."""
        return url

    @staticmethod
    def translate_params(props: Sequence[Any], base_query: Mapping[str, str | tuple[str, ...]], flavor: str,
                         supported: Sequence[str]) -> Any:
        """The driver parameters (a ``Translated``) for the JDBC *props*; ``None``: none translated."""
        return None

    @staticmethod
    def login(url: URL, user: str | None, password: str | None) -> URL:
        """*url* with *user* and *password* (username ``""`` with a password alone: SQLAlchemy
        renders no password without a username)."""
        return url.set(username=user if user else ("" if password else None), password=password)

    # -- the staging commit mode (:mod:`twopc.sinks.sql._staging_sink`)
    #: whether the database is a file (SQLite): no twopc schemas, isolation levels or host
    file_based: ClassVar[bool] = False
    #: whether DDL runs inside a transaction (MySQL/MariaDB commit it by themselves)
    transactional_ddl: ClassVar[bool] = True
    truncates_in_transaction: ClassVar[bool] = False  #: whether ``TRUNCATE`` runs inside the commit transaction
    #: how ``tableComment`` is set: ``"create"`` (in ``CREATE TABLE``), ``"comment on"``, ``None`` (unsupported)
    table_comments: ClassVar[str | None] = None
    #: whether staging tables copy the target's column types (from :meth:`catalog_columns`)
    stages_in_table_types: ClassVar[bool] = False
    #: the staging table's default of the transaction id column (SQL), for :attr:`staging_copy`
    stage_txn_default: ClassVar[str | None] = None

    #: the column types twopc creates unlike SQLAlchemy's, by Arrow kind (``float32``, ``string``, ``nested``...)
    arrow_types: ClassVar[Mapping[str, TypeEngine[Any]]] = {}

    @staticmethod
    def normalize_type(ddl: str) -> str:
        """A column type (DDL or catalog) in one lower-case spelling without spaces."""
        return ddl.lower().replace(" ", "")

    @staticmethod
    def upsert_sql(into: str, select: str, source: str, q: Callable[[str], str], keys: Sequence[str],
                   others: Sequence[str], stage_keys: Sequence[str]) -> str | None:
        """The move of staged rows (``{into} SELECT {select} {source}``) as an upsert on *keys*
        (*stage_keys* in the stage) updating *others*; ``None``: no upsert twopc knows."""
        return None

    @staticmethod
    def recreate_losses(conn: Connection, quoted: str) -> list[str]:
        """What recreating table *quoted* would lose beyond SQLAlchemy's reflection (grants, triggers...)."""
        return []

    # -- the target ledger (:mod:`twopc.sinks.sql._target_ledger`), on databases that prepare
    ledger_ddl: ClassVar[str]  #: ``CREATE TABLE IF NOT EXISTS {table}`` of the ledger table
    #: the statement that inserts or replaces a ledger record (``{table}``; sink_id, name, body)
    ledger_upsert: ClassVar[str]
    session_id_sql: ClassVar[str]  #: the query of the session's id on the server

    @staticmethod
    def lease_sql(sink_id: str, database: str) -> tuple[str, str, Any]:
        """(try-lock statement, unlock statement, parameter) of *sink_id*'s lease in *database*."""
        raise NotImplementedError

    @staticmethod
    def lease_holder_sql(key: Any, session: int) -> tuple[str, tuple[Any, ...]]:
        """The query (and parameters) positive when *session* holds lock *key* (:meth:`lease_sql`)."""
        raise NotImplementedError

    #: ``SELECT`` of the server's identity: a row of strings :meth:`server_identity` reads
    server_identity_sql: ClassVar[str | None] = None

    @staticmethod
    def server_identity(row: Sequence[Any], table: str) -> str:
        """Which server (and database) a row of :attr:`server_identity_sql` names, with *table*."""
        raise NotImplementedError

    label: ClassVar[str | None] = None  #: the database's name in messages about URLs (``None``: the dialect's name)
    default_port: ClassVar[int | None] = None  #: the port a URL without one connects to, for target identities
    prepares: ClassVar[bool] = False  #: whether the database has a prepared-transaction sink (:meth:`prepared_sink`)
    #: whether ``twopc-jdbc``'s tasks that find no free prepared-transaction slot stage their rows
    stages_without_slot: ClassVar[bool] = False
    #: why ``commitMode=prepared`` is refused, when the database does not :attr:`prepares`
    no_prepare_reason: ClassVar[str] = "twopc can prepare transactions only on PostgreSQL and MySQL/MariaDB"
    copy_formats: ClassVar[bool] = False  #: whether the ``copyFormat`` option applies (a COPY loader)
    dead_letters: ClassVar[bool] = False  #: whether the ``deadLetterTable`` option applies
    #: whether a table's schema is a database (MySQL: a table without one is in the URL's)
    schema_is_database: ClassVar[bool] = False
    @classmethod
    def quote(cls, name: str) -> str:
        """*name* as an identifier (in the first of :attr:`name_quotes`), ``%`` doubled for a
        statement sent with ``%s`` parameters."""
        q = cls.name_quotes[0]
        return (q + name.replace(q, q * 2) + q).replace("%", "%%")

    #: the module (importing the driver) whose functions named as :data:`ERROR_RULES` are the
    #: database's error rules, loaded on first use (:class:`DriverBound`); ``None``: the generic ones
    errors_module: ClassVar[str | None] = None
    #: (reason, hint) of a failed connection attempt
    connect_failure: ClassVar[Callable[[BaseException], tuple[str, str]]] = _connect_failure
    is_connection_error: ClassVar[Callable[[BaseException], bool]] = _never  #: whether *exc* means the session is gone
    is_missing_table: ClassVar[Callable[[BaseException], bool]] = _never  #: whether *exc* means a table does not exist
    #: the error's code (SQLSTATE, MySQL error number), ``""`` if none
    error_code: ClassVar[Callable[[BaseException], str]] = _no_code
    #: the error as one line: its code and primary message
    error_text: ClassVar[Callable[[BaseException], str]] = _one_line
    #: a driver error as a credential-free :class:`SinkError` (action; table, marker_table, lock_timeout, where, redact)
    map_error: ClassVar[Callable[..., SinkError]]
    #: a driver error about a value that does not fit its column as a :class:`SinkError`, else ``None``
    value_error: ClassVar[Callable[[BaseException, str, str, Callable[[str], str]], SinkError | None]] = _no_value_error
    #: whether an Arrow type fits a :meth:`catalog_columns` column; ``None``: the shared type rules
    compatible: ClassVar[Callable[[pa.DataType, Any], bool] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        module = vars(cls).get("errors_module")
        if module is not None:
            for rule in ERROR_RULES:
                setattr(cls, rule, DriverBound[Any](f"{module}:{rule}"))

    @staticmethod
    def lock_timeout_text(timeout: Duration) -> str:
        """How the ``lockTimeout`` in force reads in messages."""
        return str(timeout)

    @staticmethod
    def server_lock_wait(lock: Duration) -> Duration:
        """How long the server lets a statement wait for a lock under ``lockTimeout`` *lock*."""
        return lock

    @staticmethod
    def connect_args(url: URL, timeouts: Any) -> dict[str, Any]:
        """The DB-API connect arguments for the connection *timeouts* (generic: the driver's defaults)."""
        return {}

    @staticmethod
    def prepare_engine(engine: Engine, timeouts: Any) -> None:
        """Set up a new engine (event listeners) before its first connection."""

    @staticmethod
    def session_statements(lock_timeout: Duration, query_timeout: Duration) -> list[tuple[str, Any]]:
        """The statements (with parameters) that start a write transaction."""
        return []

    @staticmethod
    def catalog_columns(raw: Any, table: Any) -> list[Any] | None:
        """*table*'s catalog columns on a DB-API connection; ``None``: missing, or the dialect cannot tell."""
        return None

    @staticmethod
    def rollback_problem(raw: Any, table: Any, role: str) -> str | None:
        """Why writes to *table* (in *role*) would not roll back; ``None``: they do, or cannot tell."""
        return None

    #: opens the bulk loader into a staging table for a transaction id; ``None``: multi-row ``INSERT``
    staging_copy: ClassVar[Callable[[Connection, Any, str], Any] | None] = None
    #: a column's values as the driver takes them (array, column, table); ``None``: the shared conversion
    staging_values: ClassVar[Callable[[pa.Array, str, str], list[Any]] | None] = None

    @classmethod
    def identity_where(cls, url: URL) -> str:
        """``host:port/database`` of *url* (default port filled in), for target identities."""
        return f"{url.host or 'localhost'}:{url.port or cls.default_port or ''}/{url.database or ''}"

    sink_class: ClassVar[Any] = None  #: the database's prepared-transaction sink class (``None``: it has none)

    @classmethod
    def prepared_sink(cls, options: Any) -> Any:
        """The prepared-transaction sink for ``twopc-jdbc``'s options, ``None`` when there is none."""
        return None if cls.sink_class is None else cls.sink_class.from_jdbc_options(options)

    @classmethod
    def prepare_capacity(cls, conn: Connection, sink: Any) -> tuple[bool, str]:
        """Whether the server can prepare transactions for *sink*, and the reason as logged."""
        return False, f"{cls.name} has no prepared transactions twopc can use"


GROUP = "twopc.sql_dialects"  #: the entry-point group a database's folder registers its dialect in


@functools.cache
def dialect_for(name: str) -> type[SqlDatabase]:
    """The dialect claiming *name* (JDBC subprotocol, SQLAlchemy backend, JDBC driver class or dialect name, any case)
    as an entry point of :data:`GROUP`, loading only that folder; the generic :class:`SqlDatabase` when none claims it.
    Raises ``ConfigurationError``: the folder's driver is not installed (says which extra to install)."""
    claim = _claims().get(name.lower())
    return SqlDatabase if claim is None else cast(type[SqlDatabase], claim.load())


@functools.cache
def _claims() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=GROUP)}

