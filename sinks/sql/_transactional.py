"""twopc writes only to tables whose writes roll back with their transaction (else a failed batch would leave rows),
checked before any task runs by the dialect's :meth:`~twopc.sinks.sql._registry.SqlDatabase.rollback_problem`."""

from __future__ import annotations

from sqlalchemy.engine import Connection

from twopc.spi import TargetConfigurationError

from ._names import TableName
from ._registry import dialect_for

__all__ = ["require_transactional"]


def require_transactional(conn: Connection, table: TableName, *, role: str = "table") -> None:
    """Raise unless writes to *table* roll back with their transaction (a missing table passes). Raises
    ``TargetConfigurationError``: naming the table (as *role*), why, and the fix."""
    if problem := dialect_for(conn.dialect.name).rollback_problem(conn.connection.driver_connection, table, role):
        raise TargetConfigurationError(problem + ". Nothing was written")
