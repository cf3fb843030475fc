"""What a MariaDB/MySQL server says about itself and a table: XA support, a table's type, engine
and columns, and the xids ``XA RECOVER`` lists. The XA sink relies on (and the tests check): a
prepared XA transaction survives its session's disconnect (MariaDB >= 10.5, MySQL >= 5.7.7), InnoDB
replays prepared ones after a crash, and ``XA RECOVER`` is server-wide."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pymysql

from .._options import Duration
from ..sql._names import TableName
from ._dialect import lock_seconds
from ._errors import ACCESS_DENIED, errmsg, errno
from ._my_column import MyColumn

if TYPE_CHECKING:
    from pymysql.cursors import Cursor

__all__ = ["catalog_columns", "engine_problem", "exec_sql", "parse_recover", "probe_xa", "session_settings",
           "similar_tables", "table_columns", "table_info", "table_rollback_problem"]

#: formatID of the xids the sink makes (``XA START 'gtrid'`` uses 1)
FORMAT_ID = 1
_GTRID_CHARS = re.compile(r"^[A-Za-z0-9_.:~-]{1,64}$")


def exec_sql(cur: Cursor, query: str, params: Sequence[Any] = ()) -> int:
    """Execute with a parameter tuple, always: every statement is written for ``%`` formatting."""
    return cur.execute(query, tuple(params))


def server_kind(version: str) -> tuple[str, tuple[int, int, int]]:
    """("MariaDB" | "MySQL", (major, minor, patch)) from ``SELECT VERSION()``."""
    kind = "MariaDB" if "mariadb" in version.lower() else "MySQL"
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version.removeprefix("5.5.5-"))
    nums = (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else (0, 0, 0)
    return kind, nums


def probe_xa(cur: Cursor, where: str, redact: Any) -> tuple[bool, str]:
    """Whether the server can run the XA protocol (prepared transactions survive a disconnect, InnoDB
    with XA, ``XA RECOVER`` allowed): ``(ok, description or reason)``, no secret in either."""
    exec_sql(cur, "SELECT VERSION()")
    row = cur.fetchone()
    version = str(row[0]) if row else "?"
    kind, numbers = server_kind(version)
    fixed_in, fixed, upgrade = (((10, 5, 0), "MariaDB 10.5", "upgrade to MariaDB >= 10.5") if kind == "MariaDB"
                                else ((5, 7, 7), "MySQL 5.7.7", "upgrade MySQL"))
    if numbers < fixed_in:
        return False, (f"{kind} {version} rolls back a prepared XA transaction when its client disconnects "
                       f"(fixed in {fixed}): {upgrade}")
    exec_sql(cur, "SELECT SUPPORT, TRANSACTIONS, XA FROM information_schema.ENGINES WHERE ENGINE = 'InnoDB'")
    if (eng := cur.fetchone()) is None or str(eng[0]).upper() not in ("YES", "DEFAULT"):
        return False, f"{version} at {where} has no InnoDB engine, which XA needs"
    if str(eng[2]).upper() != "YES":
        return False, f"{version} at {where}: InnoDB reports no XA support"
    try:
        exec_sql(cur, "XA RECOVER")
        cur.fetchall()
    except pymysql.err.MySQLError as exc:
        if errno(exc) in ACCESS_DENIED:
            return False, (f"the user may not run XA RECOVER on {version} at {where}: "
                           f"GRANT XA_RECOVER_ADMIN ON *.* TO <user> ({redact(errmsg(exc))})")
        raise
    return True, (f"{kind} {version} at {where}: InnoDB with XA; prepared transactions survive "
                  f"client disconnects; XA RECOVER allowed")


@dataclass(frozen=True)
class TableInfo:
    """A table as ``information_schema.TABLES`` describes it (names as stored)."""

    schema: str
    name: str
    table_type: str
    engine: str | None


def table_info(cur: Cursor, table: TableName) -> TableInfo | None:
    """Type, engine and stored names of *table* (``None``: no such table); the name must match
    exactly where the server compares names case-sensitively (``lower_case_table_names = 0``)."""
    exec_sql(cur, "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE, ENGINE, DATABASE(), @@lower_case_table_names "
                  "FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(%s, DATABASE()) "
                  "AND TABLE_NAME = %s", (table.schema, table.name))
    rows = list(cur.fetchall())
    if not rows:
        return None
    want_db = table.schema if table.schema is not None else rows[0][4]
    exact = [r for r in rows if r[0] == want_db and r[1] == table.name]
    if not exact and int(rows[0][5] or 0) != 0:
        exact = rows[:1]
    if not exact:
        return None
    r = exact[0]
    return TableInfo(str(r[0]), str(r[1]), str(r[2]), None if r[3] is None else str(r[3]))


def engine_problem(cur: Cursor, info: TableInfo, display: str, *, role: str = "", xa: bool) -> str | None:
    """Why writes to the table *info* describes (*display*, called *role*) cannot roll back with their
    transaction, or ``None`` (:func:`twopc.sinks.sql.require_transactional`): a view, an engine that is
    not transactional (MyISAM, Aria, MEMORY, ...), or for XA (*xa*) one without XA support."""
    what = f"{role} {display}".strip()
    if info.table_type not in ("BASE TABLE", "SYSTEM VERSIONED"):
        return (f"{what} is a {info.table_type.lower()}, not a table: twopc writes to base tables only "
                f"(a view's underlying tables may not roll back). Write to the base table")
    exec_sql(cur, "SELECT TRANSACTIONS, XA FROM information_schema.ENGINES WHERE ENGINE = %s", (info.engine,))
    row = cur.fetchone()
    transactional = row is not None and str(row[0]).upper() == "YES"
    fix = f"Convert it: ALTER TABLE {display} ENGINE=InnoDB"
    if not transactional:
        return (f"{what} uses the {info.engine} engine, which is not transactional: rows written before a "
                f"failure would stay although the batch is rolled back, so twopc refuses it in every commit "
                f"mode{' (XA needs InnoDB)' if xa else ''}. {fix}")
    if xa and str(row[1]).upper() != "YES":  # type: ignore[index]  # row is not None when transactional
        return (f"{what} uses the {info.engine} engine, which cannot take part in XA transactions: XA needs "
                f"InnoDB. {fix}")
    return None


def table_rollback_problem(raw: Any, table: TableName, role: str) -> str | None:
    with raw.cursor() as cur:
        info = table_info(cur, table)
        return None if info is None else engine_problem(cur, info, table.display(), role=role, xa=False)


def catalog_columns(raw: Any, table: TableName) -> list[MyColumn] | None:
    with raw.cursor() as cur:
        info = table_info(cur, table)
        return None if info is None else table_columns(cur, info)


def similar_tables(cur: Cursor, table: TableName) -> list[TableName]:
    """Up to three tables of the database whose name differs only in case."""
    exec_sql(cur, "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                  "WHERE LOWER(TABLE_NAME) = LOWER(%s) AND TABLE_SCHEMA = COALESCE(%s, DATABASE()) LIMIT 3",
             (table.name, table.schema))
    return [TableName(str(s), str(n), "mysql") for s, n in cur.fetchall()]


def table_columns(cur: Cursor, info: TableInfo) -> list[MyColumn]:
    exec_sql(cur, "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, "
                  "COLUMN_DEFAULT, EXTRA FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                  "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (info.schema, info.name))
    out = []
    for sch, tab, col, dtype, ctype, nullable, default, extra in cur.fetchall():
        if sch != info.schema or tab != info.name:
            continue
        ext = str(extra or "").lower()
        generated = "generated" in ext or ext.strip() in ("virtual", "persistent", "stored")
        has_default = default is not None or "auto_increment" in ext or generated or nullable == "YES"
        out.append(MyColumn(str(col), str(dtype).lower(), str(ctype), nullable == "NO", has_default, generated))
    json_cols = _mariadb_json_columns(cur, info) if any(c.data_type == "longtext" for c in out) else set()
    return [dataclasses.replace(c, data_type="json", column_type="json") if c.name in json_cols else c for c in out]


_JSON_VALID = re.compile(r"^\s*json_valid\(`((?:[^`]|``)+)`\)\s*$", re.IGNORECASE)


def _mariadb_json_columns(cur: Cursor, info: TableInfo) -> set[str]:
    """The columns MariaDB declared ``JSON`` (stored as ``LONGTEXT`` checked by ``json_valid``)."""
    exec_sql(cur, "SELECT VERSION()")
    if (row := cur.fetchone()) is None or server_kind(str(row[0]))[0] != "MariaDB":
        return set()
    exec_sql(cur, "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = %s "
                  "AND TABLE_NAME = %s", (info.schema, info.name))
    return {m.group(1).replace("``", "`") for (clause,) in cur.fetchall()
            if (m := _JSON_VALID.match(str(clause))) is not None}


def parse_recover(rows: Iterable[Sequence[Any]]) -> list[str]:
    """Gtrids of ``XA RECOVER`` rows of the sink's shape (formatID 1, empty bqual, ASCII gtrid)."""
    out = []
    for row in rows:
        try:
            fmt, glen, blen, data = int(row[0]), int(row[1]), int(row[2]), row[3]
        except (TypeError, ValueError, IndexError):
            continue
        if fmt != FORMAT_ID or blen != 0:
            continue
        raw = data if isinstance(data, bytes | bytearray) else str(data).encode("utf-8", "surrogateescape")
        gid = bytes(raw[:glen]).decode("ascii", "replace")  # a replaced byte fails the match
        if _GTRID_CHARS.match(gid):
            out.append(gid)
    return out


def session_settings(lock_timeout: Duration, query_timeout: Duration) -> list[tuple[str, tuple[Any, ...]]]:
    """The statements (with parameters) that make a session write as twopc needs, in every
    MySQL/MariaDB commit mode: lock waits bounded by *lock_timeout* (whole seconds, at least 1),
    ``time_zone = '+00:00'``, ``STRICT_TRANS_TABLES`` when no strict mode is set (a bad value fails
    instead of being changed), and MariaDB's ``max_statement_time`` when *query_timeout* > 0."""
    lock = min(lock_seconds(lock_timeout), 1_073_741_824)
    out: list[tuple[str, tuple[Any, ...]]] = [(
        ("SET SESSION innodb_lock_wait_timeout = %s, lock_wait_timeout = %s, time_zone = '+00:00', "
        "sql_mode = IF(FIND_IN_SET('STRICT_TRANS_TABLES', @@SESSION.sql_mode) "
        "OR FIND_IN_SET('STRICT_ALL_TABLES', @@SESSION.sql_mode), @@SESSION.sql_mode, "
        "CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'STRICT_TRANS_TABLES'))"), (lock, lock))]
    if query_timeout.seconds > 0:
        out.append(("SET SESSION max_statement_time = %s", (query_timeout.seconds,)))
    return out
