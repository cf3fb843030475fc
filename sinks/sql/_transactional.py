"""The one rule every SQL commit mode applies before any task runs: twopc writes only to
tables whose writes roll back with their transaction.

A table that cannot roll back breaks the promise "a failed batch leaves nothing": in the
staging mode a duplicate key half-way through the move would leave the rows moved before
it; in the prepared modes the rows would be written even when the transaction is rolled
back. Per dialect (each part lives with the dialect's catalog reader):

- MariaDB/MySQL (:func:`twopc.sinks.mysql._server.engine_problem`): a base table whose engine
  ``information_schema.ENGINES`` calls transactional (InnoDB; not MyISAM, Aria, MEMORY, CSV,
  ARCHIVE, ...), with XA support in the XA mode; views are refused (the engines under them
  are not checked cheaply). The fix named: ``ALTER TABLE ... ENGINE=InnoDB``.
- PostgreSQL (:func:`twopc.sinks.postgres._server.rollback_problem`): no foreign table, no foreign
  partition. UNLOGGED tables are transactional (only not crash-safe) and pass.
- SQLite and other dialects: every table is transactional.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from twopc.spi import TargetConfigurationError

from ._names import TableName
from ._registry import dialect_for

__all__ = ["require_transactional"]


def require_transactional(conn: Connection, table: TableName, *, role: str = "table") -> None:
    """Raise unless writes to *table* roll back with the transaction that made them. A
    missing table passes (whoever creates it checks again).

    Raises:
        TargetConfigurationError: naming the table (as *role*), why, and the fix.
    """
    if problem := dialect_for(conn.dialect.name).rollback_problem(conn.connection.driver_connection, table, role):
        raise TargetConfigurationError(problem + ". Nothing was written")
