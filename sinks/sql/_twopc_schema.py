"""The schema of twopc's own tables (option ``twopcSchema``; a database on MySQL/MariaDB):
created when missing, checked usable by the writer's user, before any of twopc's tables is
created or any task runs. A refusal names the schema, the user and the statement an owner
runs to fix it.
"""

from __future__ import annotations

import hashlib
import logging

from twopc import ConfigurationError
from twopc.spi import TargetConfigurationError

from ._names import TableName, parse_table_name
from ._privileges import Run, current_user, denied

__all__ = ["bookkeeping_table", "ensure_schema", "parse_twopc_schema"]

log = logging.getLogger("twopc.sinks.sql")

#: MariaDB's and MySQL's longest identifier
_MYSQL_NAME_CHARS = 64


def parse_twopc_schema(text: str | None, dialect: str) -> str | None:
    """The ``twopcSchema`` option as the database stores the name (PostgreSQL folds
    unquoted names to lower case), or None (also on databases other than PostgreSQL and
    MySQL/MariaDB: SQLite keeps twopc's tables in the target's database file).

    Raises:
        ConfigurationError: not one name.
    """
    if text is None:
        return None
    if dialect not in ("postgresql", "mysql"):
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
    name = table.name
    if dialect == "mysql":
        name = f"{name}_{hashlib.sha256(database.encode()).hexdigest()[:8]}"
        if len(name) > _MYSQL_NAME_CHARS:
            raise ConfigurationError(
                f"the table {table.name!r} in twopcSchema {schema} would be named {name!r}, {len(name)} "
                f"characters; MySQL/MariaDB names are at most {_MYSQL_NAME_CHARS}: use a shorter name")
    return TableName(schema, name, table.dialect)


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def _pg_quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _my_quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def ensure_schema(run: Run, dialect: str, schema: str, database: str) -> None:
    """Create *schema* (``CREATE SCHEMA IF NOT EXISTS``; MySQL/MariaDB: ``CREATE DATABASE
    IF NOT EXISTS``) when it does not exist, and check the user may use it (PostgreSQL:
    ``USAGE`` on it). *run* sends one statement, in autocommit, and returns its rows;
    *database* is the URL's database (for the GRANT of PostgreSQL's ``CREATE``). Other
    dialects pass.

    Raises:
        TargetConfigurationError: the schema is missing and the user may not create it, or
            the user may not use it (the message has the statements an owner runs).
        Exception: any other error of *run*, as it raised it.
    """
    if dialect == "postgresql":
        _ensure_pg(run, schema, database)
    elif dialect == "mysql":
        _ensure_my(run, schema)


def _ensure_pg(run: Run, schema: str, database: str) -> None:
    q = _pg_quoted(schema)
    found = run(f"SELECT has_schema_privilege(oid, 'USAGE') FROM pg_namespace WHERE nspname = {_literal(schema)}")
    if not found:
        try:
            run(f"CREATE SCHEMA IF NOT EXISTS {q}")
        except Exception as exc:
            if not denied(exc):
                if "23505" in str(getattr(getattr(exc, "orig", exc), "sqlstate", "")):
                    return  # created concurrently
                raise
            user = current_user(run, "postgresql")
            raise TargetConfigurationError(
                f"twopcSchema {schema} does not exist and the user {user} may not create it (it has no CREATE "
                f"privilege on database {database}): run as an owner: CREATE SCHEMA {q} AUTHORIZATION {user}; (or "
                f"GRANT CREATE ON DATABASE {_pg_quoted(database)} TO {user};) then write again. Validation stopped "
                f"before any task: nothing was written") from None
        return
    if not found[0][0]:
        user = current_user(run, "postgresql")
        raise TargetConfigurationError(
            f"the user {user} has no USAGE privilege on twopcSchema {schema}, where twopc keeps its tables: run as "
            f"the schema's owner: GRANT USAGE, CREATE ON SCHEMA {q} TO {user}; then write again. Validation "
            f"stopped before any task: nothing was written")


def _ensure_my(run: Run, schema: str) -> None:
    if run(f"SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = {_literal(schema)}"):
        return
    q = _my_quoted(schema)
    try:
        run(f"CREATE DATABASE IF NOT EXISTS {q}")
    except Exception as exc:
        if not denied(exc):
            raise
        user = current_user(run, "mysql")
        raise TargetConfigurationError(
            f"twopcSchema {schema} (a database) does not exist or is not visible to the user {user}, who may not "
            f"create it: run as an administrator: CREATE DATABASE IF NOT EXISTS {q}; GRANT SELECT, INSERT, UPDATE, "
            f"DELETE, CREATE, DROP, INDEX ON {q}.* TO {user}; then write again. Validation stopped before any task: "
            f"nothing was written") from None
