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
from sqlalchemy.engine import URL, Engine

from twopc.spi import require

from .._registry import dialect_for
from ..options import NetTimeouts

__all__ = ["EngineCache", "dbapi_connect_params", "dispose_engines", "engine_for"]

#: application_name / client program name the servers show for twopc's sessions
APPLICATION_NAME = "twopc"


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
    """The process's pooled engine for *url* (credentials included) and this use, its
    connections bounded by *timeouts* (:mod:`twopc.sinks.sql.database._timeouts`) and set up
    by the dialect; with *autocommit* in ``AUTOCOMMIT`` mode, for sinks that manage
    transactions in SQL.

    Raises:
        ConfigurationError: the dialect refuses the URL, or its driver is not installed.
    """

    def make() -> Engine:
        backend = url.get_backend_name()
        dialect = dialect_for(backend)
        if dialect.dbapi is not None:  # a missing driver names twopc's extra, not just the module
            require(dialect.dbapi, dialect.extra, f"writing to {backend} (twopc-jdbc)")
        kwargs: dict[str, Any] = {"pool_pre_ping": True, "connect_args": dialect.connect_args(url, timeouts)}
        if autocommit:  # pool_size: the driver's commit uses up to 8 connections at once (a
            # PostgreSQL batch's pipelines); fewer kept idle would reconnect them every batch
            kwargs.update(isolation_level="AUTOCOMMIT", pool_size=8, max_overflow=16)
        engine = sa.create_engine(url, **kwargs)
        dialect.prepare_engine(engine, timeouts)
        return engine

    return _ENGINES.get((url.render_as_string(hide_password=False), timeouts, autocommit), make)


_PLAIN = (str, bytes, int, float, bool, dict, type(None))


def dbapi_connect_params(url: URL, timeouts: NetTimeouts) -> tuple[str, dict[str, Any]]:
    """The DB-API module and the keyword arguments :func:`engine_for`'s connections are
    opened with, plain values only (no cursor factory, no adapter map): for a process that
    opens one connection without importing SQLAlchemy (the driver agent,
    :mod:`twopc.ledger._agent`). Credentials included: never log them.

    Raises:
        ValueError: *url* is not a PostgreSQL or MySQL/MariaDB URL.
    """
    backend = url.get_backend_name()
    dbapi = dialect_for(backend).dbapi
    if dbapi is None:
        raise ValueError(f"no DB-API connect parameters for {backend}")
    dialect = engine_for(url, timeouts, autocommit=True).dialect
    cargs, cparams = dialect.create_connect_args(url)
    if cargs:
        raise ValueError(f"{backend}: positional connect arguments are not supported")
    params = {**cparams, **dialect_for(backend).connect_args(url, timeouts)}
    return dbapi, {k: v for k, v in params.items() if isinstance(v, _PLAIN)}


def dispose_engines() -> None:
    """Close every pooled connection of this process (prepared transactions are not
    affected: they no longer belong to a session)."""
    _ENGINES.dispose()
