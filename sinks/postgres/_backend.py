"""PostgreSQL as the shared SQL layer sees it: the entry :mod:`twopc.sinks.postgres` registers in
the dialect registry (:mod:`twopc.sinks.sql._registry`)."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from .._net import KEEPALIVE_COUNT, KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S
from .._options import Duration
from ..sql._names import TableName
from ..sql._registry import SqlBackend
from ..sql.options._jdbc_options import JdbcOptions
from ..sql.options._net_timeouts import NetTimeouts
from . import _server as server
from ._deadline import deadline_cursor
from ._errors import value_error
from ._sink import PostgresSink
from ._spec import POSTGRES

if TYPE_CHECKING:
    from ._copy import CopyStream

__all__ = ["POSTGRES_BACKEND"]


def connect_args(timeouts: NetTimeouts) -> dict[str, Any]:
    """psycopg's connect arguments: connect timeout, TCP keepalive, ``tcp_user_timeout``
    (Linux), and cursors whose statements wait at most ``socketTimeout`` for a reply."""
    args: dict[str, Any] = {"connect_timeout": timeouts.connect, "keepalives": int(timeouts.keepalive),
                            "cursor_factory": deadline_cursor(timeouts.reply)}
    if timeouts.keepalive:
        args.update(keepalives_idle=KEEPALIVE_IDLE_S, keepalives_interval=KEEPALIVE_INTERVAL_S,
                    keepalives_count=KEEPALIVE_COUNT)
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        args["tcp_user_timeout"] = int(timeouts.reply * 1000)
    return args


def prepare_capacity(conn: Connection, sink: PostgresSink) -> tuple[bool, str]:
    """Whether the server allows prepared transactions (``max_prepared_transactions``)."""
    n, used = conn.exec_driver_sql("SELECT current_setting('max_prepared_transactions')::int, "
                                   "(SELECT count(*) FROM pg_prepared_xacts)").one()
    if n <= 0:
        return False, ("the server has max_prepared_transactions = 0, so it cannot prepare "
                       "transactions: set it in postgresql.conf to at least the partitions a batch "
                       "writes plus retried attempts (e.g. 64) and restart PostgreSQL, for the "
                       "faster prepared mode")
    return True, f"PostgreSQL PREPARE TRANSACTION, max_prepared_transactions = {n}, {n - used} free now"


def session_statements(lock_timeout: Duration, query_timeout: Duration) -> list[tuple[str, Any]]:
    """The statement that starts a write transaction (:func:`server.session_settings`)."""
    return [server.session_settings(lock_timeout, query_timeout)]


def catalog_columns(raw: Any, table: TableName) -> list[Any] | None:
    """The columns of *table* from ``pg_attribute``, ``None`` when it does not exist."""
    oid = server.table_oid(raw, table)
    return None if oid is None else list(server.table_columns(raw, oid))


def rollback_problem(raw: Any, table: TableName, role: str) -> str | None:
    """Why writes to *table* would not roll back (a foreign table...), ``None`` when they do."""
    oid = server.table_oid(raw, table)
    return None if oid is None else server.rollback_problem(raw, oid, table.display(), role=role)


def staging_copy(conn: Connection, table: TableName, txn_id: str) -> CopyStream:
    """A COPY stream into the staging *table* on *conn*'s transaction, which the staging
    table's trigger marks with *txn_id* (``twopc.txn_id``)."""
    from ._copy import CopyStream  # here: the encoders load pyarrow, which committing never needs

    conn.exec_driver_sql("SELECT set_config('twopc.txn_id', %s, true)", (txn_id,))
    return CopyStream(conn.connection.driver_connection, table)  # type: ignore[arg-type]  # psycopg under SQLAlchemy


def prepared_sink(options: JdbcOptions) -> PostgresSink:
    return PostgresSink.from_jdbc_options(options)


POSTGRES_BACKEND = SqlBackend(
    spec=POSTGRES, prepared_sink=prepared_sink, prepare_capacity=prepare_capacity, connect_args=connect_args,
    session_statements=session_statements, catalog_columns=catalog_columns, rollback_problem=rollback_problem,
    value_error=value_error, staging_copy=staging_copy,
)
