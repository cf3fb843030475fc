"""One pooled SQLAlchemy engine per process, URL and use, shared by every task a Python worker
runs (a connection per task would cost a login each). The prepared modes' engines run in
``AUTOCOMMIT``; the staging mode's uses SQLAlchemy's transactions. A pooled connection is pinged
only after :data:`PING_AFTER_IDLE_S` in the pool, as HikariCP's ``aliveBypassWindowMs`` does (a
ping each was a round trip each on the commit's path); one that died within that moment fails
its first statement, as after a ping: the commit is retried, the task fails."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from twopc.spi import require

from ._registry import dialect_for
from .options import NetTimeouts

__all__ = ["EngineCache", "dbapi_connect_params", "dispose_engines", "engine_for"]

APPLICATION_NAME = "twopc"  #: application_name / client program name the servers show for twopc's sessions
#: a pooled connection given back to the pool this many seconds ago or longer is pinged before use
PING_AFTER_IDLE_S = 0.5
#: the key of ``ConnectionPoolEntry.info`` holding when the connection was given back (a new one has none)
_GIVEN_BACK = "twopc_given_back"


class EngineCache:
    """Engines by key, forgotten (not closed) in forked children: the parent's connections are not theirs."""

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
        """Close every pooled connection (prepared transactions stay)."""
        with self._lock:
            engines = list(self._engines.values())
            self._engines.clear()
        for e in engines:
            e.dispose()


_ENGINES = EngineCache()


def engine_for(url: URL, timeouts: NetTimeouts, *, autocommit: bool) -> Engine:
    """The process's pooled engine for *url* and this use, connections bounded by *timeouts*; with *autocommit* in
    ``AUTOCOMMIT`` mode. Raises ``ConfigurationError``: the dialect refuses the URL, or its driver is not installed."""

    def make() -> Engine:
        backend = url.get_backend_name()
        dialect = dialect_for(backend)
        if dialect.dbapi is not None:  # a missing driver names twopc's extra, not just the module
            require(dialect.dbapi, dialect.extra, f"writing to {backend} (twopc-jdbc)")
        kwargs: dict[str, Any] = {"connect_args": dialect.connect_args(url, timeouts)}
        if autocommit:  # pool_size: the driver's commit uses up to 8 connections at once (a
            # PostgreSQL batch's pipelines); fewer kept idle would reconnect them every batch
            kwargs.update(isolation_level="AUTOCOMMIT", pool_size=8, max_overflow=16)
        engine = sa.create_engine(url, **kwargs)
        _ping_when_idle(engine)
        dialect.prepare_engine(engine, timeouts)
        return engine

    return _ENGINES.get((url.render_as_string(hide_password=False), timeouts, autocommit), make)


def _ping_when_idle(engine: Engine) -> None:
    """SQLAlchemy's pre-ping, for connections that sat in the pool :data:`PING_AFTER_IDLE_S` or longer only."""
    dialect = engine.dialect

    @sa.event.listens_for(engine, "checkin")
    def given_back(dbapi: Any, entry: Any) -> None:
        if dbapi is not None:  # None: the connection was discarded
            entry.info[_GIVEN_BACK] = time.monotonic()

    @sa.event.listens_for(engine, "checkout")
    def ping(dbapi: Any, entry: Any, _proxy: Any) -> None:
        given_back = entry.info.get(_GIVEN_BACK)
        if given_back is None or time.monotonic() - given_back < PING_AFTER_IDLE_S:
            return
        try:
            dialect.do_ping(dbapi)
        except dialect.loaded_dbapi.Error as exc:
            if dialect.is_disconnect(exc, dbapi, None):
                raise sa.exc.InvalidatePoolError("a pooled connection failed its ping") from exc
            raise


_PLAIN = (str, bytes, int, float, bool, dict, type(None))


def dbapi_connect_params(url: URL, timeouts: NetTimeouts) -> tuple[str, dict[str, Any]]:
    """The DB-API module and plain keyword arguments :func:`engine_for`'s connections are opened with, for a
    process without SQLAlchemy (the driver agent). Credentials included: never log them. Raises
    ``ValueError``: *url* is not a PostgreSQL or MySQL/MariaDB URL."""
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
    """Close every pooled connection of this process (prepared transactions stay)."""
    _ENGINES.dispose()
