"""One pooled SQLAlchemy engine per process and key, shared by every task a Python
worker runs (a worker process serves many tasks; opening a connection per task would
cost a login each)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable

from sqlalchemy.engine import Engine

__all__ = ["EngineCache"]


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
