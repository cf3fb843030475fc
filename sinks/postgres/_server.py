"""What a PostgreSQL server says about a table (oid, columns with domains resolved, the tables a
mistyped name meant), and a write session's settings. No Arrow: a worker that only commits loads this."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from .._options import Duration
from ..sql._names import TableName
from ._dialect import _quoted

__all__ = ["PgColumn", "catalog_columns", "identifier", "rollback_problem", "session_settings", "similar_tables",
           "table_columns", "table_oid", "table_rollback_problem"]


@dataclass(frozen=True)
class PgColumn:
    """A column of the target table, as the catalog describes it: ``base_type`` is ``pg_type.typname``
    with domains resolved (``int4``...), ``display_type`` as ``format_type`` prints it, ``kind`` the base
    type's ``typtype`` (``e`` enum), ``category`` its ``typcategory`` (``A`` array); ``has_default`` holds
    for identity and generated columns, and ``generated`` ones cannot be written."""

    name: str
    base_type: str
    display_type: str
    kind: str = "b"
    category: str = ""
    not_null: bool = False
    has_default: bool = False
    generated: bool = False


def identifier(table: TableName) -> sql.Identifier:
    return sql.Identifier(table.schema, table.name) if table.schema else sql.Identifier(table.name)


def regclass_text(table: TableName) -> str:
    """*table* as ``to_regclass`` reads it: every part quoted, so it is taken verbatim."""
    return f"{_quoted(table.schema)}.{_quoted(table.name)}" if table.schema else _quoted(table.name)


def table_oid(pg: psycopg.Connection[Any], table: TableName) -> int | None:
    row = pg.execute("SELECT to_regclass(%s)::oid", (regclass_text(table),)).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def rollback_problem(pg: psycopg.Connection[Any], oid: int, display: str, *, role: str = "") -> str | None:
    """Why writes to relation *oid* (*display*, called *role*) cannot roll back with their transaction
    (a foreign table, or a foreign partition), or ``None``; see :func:`twopc.sinks.sql.require_transactional`."""
    row = pg.execute(
        "SELECT c.relkind, (SELECT string_agg(p.oid::regclass::text, ', ') FROM pg_partition_tree(c.oid) t "
        "JOIN pg_class p ON p.oid = t.relid WHERE p.relkind = 'f' AND c.relkind = 'p') "
        "FROM pg_class c WHERE c.oid = %s", (oid,)).fetchone()
    if row is None:
        return None
    what = f"{role} {display}".strip()
    if row[0] == "f":
        return (f"{what} is a foreign table: its rows are written on another server, outside the "
                f"transaction twopc commits or rolls back, so twopc refuses it in every commit mode. Write "
                f"to a local table (and copy from there)")
    if row[1]:
        return (f"{what} has foreign partitions ({row[1]}): rows routed there are written on another "
                f"server, outside the transaction twopc commits or rolls back. Detach them "
                f"(ALTER TABLE {display} DETACH PARTITION ...) or write to a local table")
    return None


def table_rollback_problem(pg: psycopg.Connection[Any], table: TableName, role: str) -> str | None:
    oid = table_oid(pg, table)
    return None if oid is None else rollback_problem(pg, oid, table.display(), role=role)


def catalog_columns(pg: psycopg.Connection[Any], table: TableName) -> list[PgColumn] | None:
    oid = table_oid(pg, table)
    return None if oid is None else table_columns(pg, oid)


def table_columns(pg: psycopg.Connection[Any], oid: int) -> list[PgColumn]:
    """The columns of relation *oid*, in order, domains resolved (up to 16 levels)."""
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


def similar_tables(pg: psycopg.Connection[Any], table: TableName) -> list[TableName]:
    """Up to three tables whose name differs from *table*'s only in case."""
    rows = pg.execute(
        "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE lower(c.relname) = lower(%s) AND c.relkind IN ('r','p') "
        "AND (%s::text IS NULL OR lower(n.nspname) = lower(%s)) LIMIT 3",
        (table.name, table.schema, table.schema)).fetchall()
    return [TableName(s, n, "postgresql") for s, n in rows]


def session_settings(lock_timeout: Duration, query_timeout: Duration) -> list[tuple[str, tuple[str, str]]]:
    """The one statement (with parameters) that bounds a write transaction's lock waits and
    statements (0: no limit) and sets its time zone to UTC, local to the transaction."""
    return [(("SELECT set_config('lock_timeout', %s, true), set_config('TimeZone', 'UTC', true), "
             "set_config('statement_timeout', %s, true)"), (f"{lock_timeout.ms}ms", f"{query_timeout.ms}ms"))]
