"""The dialect registry: what the shared SQL layer asks of a database it does not know.

A database is one folder (:mod:`twopc.sinks.postgres`, :mod:`twopc.sinks.mysql`) that registers one
:class:`SqlBackend` when it is imported. The shared layer never imports those folders: it
asks :func:`backend_for`, which imports the folder named in :data:`_PACKAGES` the first time
a dialect is asked for. A dialect without a folder (SQLite, others SQLAlchemy knows) has
no entry: the shared layer then uses SQLAlchemy's generic behaviour.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twopc import SinkError

from .._options import Duration

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlalchemy.engine import Connection

    from ._names import TableName
    from .options._jdbc_options import JdbcOptions
    from .options._jdbc_url import Dialect
    from .options._net_timeouts import NetTimeouts

__all__ = ["DialectSpec", "SqlBackend", "backend_for", "register"]


@dataclass(frozen=True)
class DialectSpec:
    """What the prepared base needs to know about a database, as values and functions (the
    dialect's module-level helpers): one object per backend, instead of a method per fact.

    Attributes:
        name: the dialect (``postgresql``, ``mysql``), a key of :data:`twopc.spi.MAX_XID_BYTES`.
        format_name: the name the sink's options are read under (its Spark format).
        product: the database's name in messages.
        id_name: what the database calls a transaction id, in messages.
        driver_error: the driver's base exception class.
        quote: quotes an identifier for a statement sent with ``%s`` parameters.
        connect_failure: (reason, hint) of a failed connection attempt.
        is_connection_error: whether an error means the session is gone.
        is_missing_table: whether an error means a table does not exist.
        error_code: the error's code (SQLSTATE, MySQL error number), ``""`` if none.
        error_text: the error as one line: its code and primary message.
        compatible: whether an Arrow type can be written to a column.
        map_error: a driver error as a credential-free :class:`SinkError`.
        lock_timeout_text: how the ``lockTimeout`` in force reads in messages.
    """

    name: Dialect
    format_name: str
    product: str
    id_name: str
    driver_error: type[Exception]
    quote: Callable[[str], str]
    connect_failure: Callable[[BaseException], tuple[str, str]]
    is_connection_error: Callable[[BaseException], bool]
    is_missing_table: Callable[[BaseException], bool]
    error_code: Callable[[BaseException], str]
    error_text: Callable[[BaseException], str]
    compatible: Callable[[pa.DataType, Any], bool]
    map_error: Callable[..., SinkError]
    lock_timeout_text: Callable[[Duration], str]


@dataclass(frozen=True)
class SqlBackend:
    """What a database's folder gives the shared layer (registered by :func:`register`).

    Attributes:
        spec: the facts and error rules of the prepared-transaction sinks.
        prepared_sink: the prepared-transaction sink for ``twopc-jdbc``'s options.
        prepare_capacity: on an open connection to the server, whether it can prepare
            transactions for the prepared sink given, and the reason as logged.
        connect_args: the driver's connect arguments for the connection timeouts.
        session_statements: the statements (with parameters) that start a write
            transaction, for (``lockTimeout``, ``queryTimeout``).
        catalog_columns: the columns of a table read from the catalog on a DB-API
            connection (the dialect's column objects), ``None`` when it does not exist.
        rollback_problem: why writes to a table would not roll back with their
            transaction (a table given by name, in the role named), ``None`` when they do.
        value_error: a driver error about a value that does not fit its column as a
            :class:`SinkError` (action, table, redact), ``None`` for other errors.
        staging_copy: opens the dialect's bulk loader into a staging table on a SQLAlchemy
            connection, for the attempt's transaction id; ``None``: multi-row ``INSERT``.
        staging_values: a column's values as the dialect's driver takes them, checked by
            its rules (array, column name, table); ``None``: the shared conversion.
    """

    spec: DialectSpec
    prepared_sink: Callable[[JdbcOptions], Any]
    prepare_capacity: Callable[[Connection, Any], tuple[bool, str]]
    connect_args: Callable[[NetTimeouts], dict[str, Any]]
    session_statements: Callable[[Duration, Duration], list[tuple[str, Any]]]
    catalog_columns: Callable[[Any, TableName], list[Any] | None]
    rollback_problem: Callable[[Any, TableName, str], str | None]
    value_error: Callable[[BaseException, str, str, Callable[[str], str]], SinkError | None]
    staging_copy: Callable[[Connection, TableName, str], Any] | None = None
    staging_values: Callable[[pa.Array, str, str], list[Any]] | None = None


#: the folder that registers each dialect (SQLAlchemy's backend names)
_PACKAGES: dict[str, str] = {"postgresql": "twopc.sinks.postgres", "mysql": "twopc.sinks.mysql",
                             "mariadb": "twopc.sinks.mysql"}
#: SQLAlchemy backend names that are another dialect's
_ALIASES: dict[str, str] = {"mariadb": "mysql"}
_REGISTERED: dict[str, SqlBackend] = {}
_LOCK = threading.Lock()


def register(backend: SqlBackend) -> None:
    """Make *backend* the answer for its dialect (called by the dialect's folder on import)."""
    with _LOCK:
        _REGISTERED[backend.spec.name] = backend


def backend_for(dialect: str) -> SqlBackend | None:
    """The registered backend of *dialect* (a SQLAlchemy backend name), importing its folder
    the first time; ``None`` for a dialect without a folder.

    Raises:
        ConfigurationError: the folder's driver is not installed (its import says which
            extra to install).
    """
    name = _ALIASES.get(dialect, dialect)
    if name not in _REGISTERED and dialect in _PACKAGES:
        importlib.import_module(_PACKAGES[dialect])
    return _REGISTERED.get(name)
