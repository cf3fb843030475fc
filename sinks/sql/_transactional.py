"""The one rule every SQL commit mode applies before any task runs: twopc writes only to
tables whose writes roll back with their transaction.

A table that cannot roll back breaks the promise "a failed batch leaves nothing": in the
staging mode a duplicate key half-way through the move would leave the rows moved before
it; in the prepared modes the rows would be written even when the transaction is rolled
back. Per dialect (each part lives with the dialect's catalog reader):

- MariaDB/MySQL (:func:`sinks.mysql._server.engine_problem`): a base table whose engine
  ``information_schema.ENGINES`` calls transactional (InnoDB; not MyISAM, Aria, MEMORY, CSV,
  ARCHIVE, ...), with XA support in the XA mode; views are refused (the engines under them
  are not checked cheaply). The fix named: ``ALTER TABLE ... ENGINE=InnoDB``.
- PostgreSQL (:func:`sinks.postgres._server.rollback_problem`): no foreign table, no foreign
  partition. UNLOGGED tables are transactional (only not crash-safe) and pass.
- SQLite and other dialects: every table is transactional.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from twopc.spi import TargetConfigurationError

from ._names import TableName

__all__ = ["require_transactional"]


def require_transactional(conn: Connection, table: TableName, *, role: str = "table") -> None:
    """Raise unless writes to *table* roll back with the transaction that made them. A
    missing table passes (whoever creates it checks again).

    Raises:
        TargetConfigurationError: naming the table (as *role*), why, and the fix.
    """
    raw = conn.connection.driver_connection
    problem: str | None = None
    if conn.dialect.name == "mysql":
        from ..mysql._server import engine_problem, table_info

        with raw.cursor() as cur:  # type: ignore[union-attr]  # a PyMySQL connection
            info = table_info(cur, table)
            problem = None if info is None else engine_problem(cur, info, table.display(), role=role, xa=False)
    elif conn.dialect.name == "postgresql":
        from ..postgres._server import rollback_problem, table_oid

        oid = table_oid(raw, table)  # type: ignore[arg-type]  # a psycopg connection
        problem = None if oid is None else rollback_problem(raw, oid, table.display(), role=role)  # type: ignore[arg-type]  # a psycopg connection
    if problem:
        raise TargetConfigurationError(problem + ". Nothing was written")
