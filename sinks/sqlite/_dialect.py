"""SQLite as the shared SQL layer sees it: sqlite3's connect arguments, the file checked
before the first connection, and transactions that start with ``BEGIN IMMEDIATE``."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from twopc import ConfigurationError

from ..sql._registry import SqlDatabase
from ..sql.options import NetTimeouts
from ..sql.options._driver_params import DriverParam, Translated, translate_sqlite
from ..sql.options._jdbc_url import JdbcParts, query_params
from ._file import check_sqlite_file

__all__ = ["SqliteDialect"]

log = logging.getLogger("twopc.sinks.sql")

_IN_MEMORY = ("an in-memory SQLite database cannot be used: twopc stages data and records commit markers that must "
              "survive the connection; give a file, e.g. jdbc:sqlite:/data/app.db")


def _split_sqlite(rest: str) -> JdbcParts:
    path, _, query_text = rest.partition("?")
    if path.lower().startswith("file:"):
        path = path[len("file:"):]
        if path.startswith("//"):
            host, slash, tail = path[2:].partition("/")
            if host not in ("", "localhost"):
                raise ConfigurationError("a file: SQLite URI with a host name is not supported: give a local path")
            path = slash + tail
    if not path or path == ":memory:" or path.startswith((":memory:", ":resource:")):
        if path.startswith(":resource:"):
            raise ConfigurationError("a SQLite database in a Java resource is read-only: give a file path, "
                                     "e.g. jdbc:sqlite:/data/app.db")
        raise ConfigurationError(_IN_MEMORY)
    return JdbcParts("sqlite", None, None, [], path, query_params(query_text))


class SqliteDialect(SqlDatabase):
    """SQLite: a file, no server, no login, no prepared transactions."""

    name = "sqlite"
    product = "SQLite"
    label = "SQLite"
    no_prepare_reason = "SQLite has no prepared transactions"
    file_based = True
    jdbc_subprotocols = frozenset({"sqlite"})
    split_jdbc = staticmethod(_split_sqlite)

    @staticmethod
    def jdbc_url(parts: JdbcParts) -> tuple[URL, dict[str, str | tuple[str, ...]]]:
        return URL.create("sqlite", database=parts.database), {}

    @staticmethod
    def sqlalchemy_url(url: URL, driver: str) -> URL:
        if driver not in ("", "pysqlite"):
            raise ConfigurationError(f"twopc uses Python's sqlite3 for SQLite, not {driver}: use a sqlite:/// URL")
        return url.set(drivername="sqlite")

    @staticmethod
    def translate_params(props: Sequence[DriverParam], base_query: Mapping[str, str | tuple[str, ...]], flavor: str,
                         supported: Sequence[str]) -> Translated:
        return translate_sqlite(list(props), supported)

    @staticmethod
    def login(url: URL, user: str | None, password: str | None) -> URL:
        """No login: the user and password are dropped; the database must be a file."""
        if user or password:
            log.info("twopc: SQLite has no login; ignoring user/password")
        url = url.set(username=None, password=None)
        db = (url.database or "").strip()
        mode = url.query.get("mode")
        if (not db or db == ":memory:" or db.startswith("file::memory:") or mode == "memory"
                or (isinstance(mode, tuple) and "memory" in mode)):
            raise ConfigurationError(_IN_MEMORY + " or sqlite:////data/app.db")
        return url

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
        """Check the file, then start every transaction with BEGIN IMMEDIATE (SQLAlchemy's recipe:
        pysqlite skips BEGIN before DDL; writers queue on the busy timeout, not fail on a lock upgrade)."""
        check_sqlite_file(engine.url.database)

        @sa.event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None

        @sa.event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
