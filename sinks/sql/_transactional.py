"""The one rule every SQL commit mode applies before any task runs: twopc writes only to
tables whose writes roll back with their transaction (else "a failed batch leaves nothing"
breaks: a staging move failing half-way, a prepared transaction rolled back, would leave
rows). Each dialect's catalog reader says why a table cannot
(:meth:`~twopc.sinks.sql._registry.SqlDatabase.rollback_problem`: MariaDB/MySQL's
non-transactional engines and views, PostgreSQL's foreign tables and partitions); on SQLite
and other dialects every table is transactional.
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
