"""MariaDB/MySQL as the shared SQL layer sees it: the entry :mod:`twopc.sinks.mysql` registers in
the dialect registry (:mod:`twopc.sinks.sql._registry`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._options import Duration
from ..sql._names import TableName
from ..sql._registry import SqlBackend
from ..sql.options._jdbc_options import JdbcOptions
from ..sql.options._net_timeouts import NetTimeouts
from . import _server as server
from ._errors import value_error
from ._sink import MySqlXaSink
from ._spec import MYSQL, lock_seconds

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlalchemy.engine import Connection

__all__ = ["MYSQL_BACKEND"]


def connect_args(timeouts: NetTimeouts) -> dict[str, Any]:
    """PyMySQL's connect arguments: connect timeout, and ``socketTimeout`` as its read and
    write timeouts (TCP keepalive is set on the socket: :meth:`NetTimeouts.tune_socket`)."""
    return {"connect_timeout": timeouts.connect, "read_timeout": timeouts.reply, "write_timeout": timeouts.reply}


def prepare_capacity(conn: Connection, sink: MySqlXaSink) -> tuple[bool, str]:
    """Whether the server can run XA transactions for *sink* (:meth:`MySqlXaSink.xa_available`)."""
    ok, why = sink.xa_available()
    return ok, (f"MySQL/MariaDB XA: {why}" if ok else why)


def session_statements(lock_timeout: Duration, query_timeout: Duration) -> list[tuple[str, Any]]:
    """The statements that start a write session (:func:`server.session_settings`)."""
    return list(server.session_settings(lock_seconds(lock_timeout), query_timeout.seconds))


def catalog_columns(raw: Any, table: TableName) -> list[Any] | None:
    """The columns of *table* from ``information_schema``, ``None`` when it does not exist."""
    with raw.cursor() as cur:
        info = server.table_info(cur, table)
        return None if info is None else list(server.table_columns(cur, info))


def rollback_problem(raw: Any, table: TableName, role: str) -> str | None:
    """Why writes to *table* would not roll back (a MyISAM table...), ``None`` when they do."""
    with raw.cursor() as cur:
        info = server.table_info(cur, table)
        return None if info is None else server.engine_problem(cur, info, table.display(), role=role, xa=False)


def staging_values(arr: pa.Array, column: str, table: str) -> list[Any]:
    """A column's values as the XA sink writes them, checked by its rules."""
    from ._values import check_array, normalize_array  # here: a worker that only commits loads no pyarrow

    arr = normalize_array(arr)
    check_array(arr, column, table)
    return list(arr.to_pylist())


def prepared_sink(options: JdbcOptions) -> MySqlXaSink:
    return MySqlXaSink.from_jdbc_options(options)


MYSQL_BACKEND = SqlBackend(
    spec=MYSQL, prepared_sink=prepared_sink, prepare_capacity=prepare_capacity, connect_args=connect_args,
    session_statements=session_statements, catalog_columns=catalog_columns, rollback_problem=rollback_problem,
    value_error=value_error, staging_values=staging_values,
)
