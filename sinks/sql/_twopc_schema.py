"""The schema of twopc's own tables (option ``twopcSchema``; a database on MySQL/MariaDB):
created when missing, checked usable by the writer's user, before any of twopc's tables is
created or any task runs. A refusal names the schema, the user and the statement an owner
runs to fix it.
"""

from __future__ import annotations

import logging

from twopc import ConfigurationError

from ._names import TableName, parse_table_name
from ._registry import dialect_for

__all__ = ["bookkeeping_table", "parse_twopc_schema", "sql_literal"]

log = logging.getLogger("twopc.sinks.sql")


def parse_twopc_schema(text: str | None, dialect: str) -> str | None:
    """The ``twopcSchema`` option as the database stores the name (PostgreSQL folds
    unquoted names to lower case), or None (also on databases other than PostgreSQL and
    MySQL/MariaDB: SQLite keeps twopc's tables in the target's database file).

    Raises:
        ConfigurationError: not one name.
    """
    if text is None:
        return None
    if not dialect_for(dialect).twopc_schemas:
        log.info("twopc: twopcSchema applies to PostgreSQL and MariaDB/MySQL; on %s twopc's tables stay in the "
                 "target's database", dialect)
        return None
    name = parse_table_name(text, dialect, "twopcSchema")
    if name.schema is not None:
        raise ConfigurationError(f"twopcSchema {text!r} has two parts; give one schema name such as twopc "
                                 f"(quote a name with a dot in it)")
    return name.name


def bookkeeping_table(table: TableName, schema: str | None, dialect: str, database: str) -> TableName:
    """*table*, one of twopc's own tables, in *schema* (``twopcSchema``) when it names no
    schema and *schema* is set; else as it is. On MySQL/MariaDB, where that database serves
    every database of the server, the name there ends with ``_<8 hex of the URL's
    *database*>``: each database keeps its own tables, as without the option (the ledger's
    writers and leases and the batch markers are per database).

    Raises:
        ConfigurationError: the name would be longer than MySQL/MariaDB allows.
    """
    if table.schema is not None or schema is None:
        return table
    return TableName(schema, dialect_for(dialect).bookkeeping_name(table.name, schema, database), table.dialect)


def sql_literal(text: str) -> str:
    """*text* as a SQL string literal (for statements sent without parameters)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"
