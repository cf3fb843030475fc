"""SQLite as the shared SQL layer sees it: sqlite3's connect arguments, the file checked
before the first connection, and transactions that start with ``BEGIN IMMEDIATE``."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from ..sql._registry import SqlDatabase
from ..sql.options._net_timeouts import NetTimeouts
from ._file import check_sqlite_file

__all__ = ["SqliteDialect"]


class SqliteDialect(SqlDatabase):
    """SQLite: a file, no server, no login, no prepared transactions."""

    name = "sqlite"
    product = "SQLite"
    label = "SQLite"
    no_prepare_reason = "SQLite has no prepared transactions"
    file_based = True

    @staticmethod
    def upsert_sql(into: str, select: str, source: str, q: Callable[[str], str], keys: Sequence[str],
                   others: Sequence[str], stage_keys: Sequence[str]) -> str | None:
        """``ON CONFLICT ... DO UPDATE``; of two staged rows with one key the later wins."""
        sets = ", ".join(f"{q(c)} = excluded.{q(c)}" for c in others)
        return (f"{into} SELECT {select} {source} ORDER BY rowid ON CONFLICT ({', '.join(q(k) for k in keys)}) "
                + (f"DO UPDATE SET {sets}" if others else "DO NOTHING"))

    @classmethod
    def identity_where(cls, url: URL) -> str:
        """The database file's absolute path."""
        db = url.database or ""
        return os.path.abspath(db) if db and db != ":memory:" else db

    @staticmethod
    def connect_args(url: URL, timeouts: NetTimeouts) -> dict[str, Any]:
        """sqlite3's busy timeout: writers queue at least a minute for the file's lock."""
        return {"timeout": max(60, timeouts.connect)}

    @staticmethod
    def prepare_engine(engine: Engine, timeouts: NetTimeouts) -> None:
        """Check the file (before sqlite3's own words for a missing folder or another kind of
        file: :func:`check_sqlite_file`), then take over pysqlite's transaction handling, which
        skips BEGIN before DDL (SQLAlchemy's documented recipe), and start every transaction
        with BEGIN IMMEDIATE (writers queue on the busy timeout instead of failing on a lock
        upgrade)."""
        check_sqlite_file(engine.url.database)

        @sa.event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None

        @sa.event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
