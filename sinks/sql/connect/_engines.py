"""One pooled SQLAlchemy engine per process, URL and use, shared by every task a Python
worker runs (a worker process serves many tasks; a connection per task would cost a
login each).

Engines for the prepared modes run in ``AUTOCOMMIT`` (the sinks send ``BEGIN`` /
``PREPARE TRANSACTION`` and ``XA ...`` themselves); the staging mode's engine uses
SQLAlchemy's transactions. Both ping a pooled connection before use (a worker may sit
idle between tasks and its connection die meanwhile).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from twopc.spi import require

from .._registry import backend_for
from ..options._net_timeouts import NetTimeouts
from ._sqlite_file import check_sqlite_file

__all__ = ["EngineCache", "dbapi_connect_params", "dispose_engines", "engine_for"]

#: application_name / client program name the servers show for twopc's sessions
APPLICATION_NAME = "twopc"
#: the Python driver of each backend twopc translates URLs for, and the extra installing it
_DRIVERS = {"postgresql": ("psycopg", "postgres"), "mysql": ("pymysql", "mysql"), "mariadb": ("pymysql", "mysql")}


class EngineCache:
    """Engines by key, forgotten in forked children (the parent's connections are not
    theirs: psycopg and PyMySQL do not close them on garbage collection in another
    process, so they are dropped without closing)."""

    def __init__(self) -> None:
        self._engines: dict[Hashable, Engine] = {}
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def get(self, key: Hashable, factory: Callable[[], Engine]) -> Engine:
        """The engine for *key*, made by *factory* the first time in this process."""
        with self._lock:
            if self._pid != os.getpid():
                self._engines.clear()
                self._pid = os.getpid()
            engine = self._engines.get(key)
            if engine is None:
                engine = self._engines[key] = factory()
            return engine

    def dispose(self) -> None:
        """Close every pooled connection of this process (prepared transactions are not
        affected: they no longer belong to a session)."""
        with self._lock:
            engines = list(self._engines.values())
            self._engines.clear()
        for e in engines:
            e.dispose()


_ENGINES = EngineCache()


def engine_for(url: URL, timeouts: NetTimeouts, *, autocommit: bool) -> Engine:
    """The process's pooled engine for *url* (credentials included) and this use.

    Its connections wait as *timeouts* says (connect, reply, TCP keepalive: see
    :mod:`twopc.sinks.sql.connect._timeouts`). With *autocommit* the engine hands out connections in
    ``AUTOCOMMIT`` mode, for sinks that manage transactions in SQL.

    Raises:
        ConfigurationError: a SQLite path whose folder does not exist, or that is not a
            SQLite database (:func:`~twopc.sinks.sql.connect._sqlite_file.check_sqlite_file`).
    """

    def make() -> Engine:
        backend = url.get_backend_name()
        if backend == "sqlite":  # before sqlite3's own words for a missing folder or another kind of file
            check_sqlite_file(url.database)
        driver = _DRIVERS.get(backend)
        if driver is not None:  # a missing driver names twopc's extra, not just the module
            require(driver[0], driver[1], f"writing to {backend} (twopc-jdbc)")
        kwargs: dict[str, Any] = {"pool_pre_ping": True, "connect_args": _connect_args(url, timeouts)}
        if autocommit:  # pool_size: the driver's commit uses up to 8 connections at once (a
            # PostgreSQL batch's pipelines); fewer kept idle would reconnect them every batch
            kwargs.update(isolation_level="AUTOCOMMIT", pool_size=8, max_overflow=16)
        engine = sa.create_engine(url, **kwargs)
        if backend == "sqlite":
            _sqlite_begin_immediate(engine)
        elif backend in ("mysql", "mariadb"):
            _tune_pymysql_sockets(engine, timeouts)
        return engine

    return _ENGINES.get((url.render_as_string(hide_password=False), timeouts, autocommit), make)


def _dialect_connect_args(timeouts: NetTimeouts, backend: str) -> dict[str, Any]:
    """The registered dialect's driver arguments for *timeouts* (see :mod:`twopc.sinks.sql._registry`);
    a dialect none registers gets the connect timeout only."""
    if (registered := backend_for(backend)) is not None:
        return registered.connect_args(timeouts)
    return {"connect_timeout": timeouts.connect}


def _connect_args(url: URL, timeouts: NetTimeouts) -> dict[str, Any]:
    """The DB-API connect arguments twopc adds to what the URL says."""
    backend = url.get_backend_name()
    args: dict[str, Any] = {}
    if backend == "sqlite":
        args = {"timeout": max(60, timeouts.connect)}
    elif backend == "postgresql":
        args = _dialect_connect_args(timeouts, backend)
        if "application_name" not in url.query:
            args["application_name"] = APPLICATION_NAME
    elif backend in ("mysql", "mariadb"):
        args = _dialect_connect_args(timeouts, backend)
        if "charset" not in url.query:
            args["charset"] = "utf8mb4"
        if url.password:  # PyMySQL would send a str password as Latin-1 (and fail on other characters);
            # the JDBC drivers send UTF-8
            args["password"] = url.password.encode("utf-8")
    return args


_PLAIN = (str, bytes, int, float, bool, dict, type(None))


def dbapi_connect_params(url: URL, timeouts: NetTimeouts) -> tuple[str, dict[str, Any]]:
    """The DB-API module and the keyword arguments :func:`engine_for`'s connections are
    opened with, plain values only (no cursor factory, no adapter map): for a process that
    opens one connection without importing SQLAlchemy (the driver agent,
    :mod:`twopc._agent`). Credentials included: never log them.

    Raises:
        ValueError: *url* is not a PostgreSQL or MySQL/MariaDB URL.
    """
    backend = url.get_backend_name()
    if backend not in _DRIVERS:
        raise ValueError(f"no DB-API connect parameters for {backend}")
    dialect = engine_for(url, timeouts, autocommit=True).dialect
    cargs, cparams = dialect.create_connect_args(url)
    if cargs:
        raise ValueError(f"{backend}: positional connect arguments are not supported")
    params = {**cparams, **_connect_args(url, timeouts)}
    return _DRIVERS[backend][0], {k: v for k, v in params.items() if isinstance(v, _PLAIN)}


def dispose_engines() -> None:
    """Close every pooled connection of this process (prepared transactions are not
    affected: they no longer belong to a session)."""
    _ENGINES.dispose()


def _tune_pymysql_sockets(engine: Engine, timeouts: NetTimeouts) -> None:
    """PyMySQL turns keepalive on with the OS's timing (2 h): set twopc's on each new
    connection's socket."""

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        timeouts.tune_socket(getattr(dbapi_conn, "_sock", None))


def _sqlite_begin_immediate(engine: Engine) -> None:
    """pysqlite's own transaction handling skips BEGIN before DDL; take over (SQLAlchemy's
    documented recipe) and start every transaction with BEGIN IMMEDIATE (writers queue on
    the busy timeout instead of failing on a lock upgrade)."""

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")
