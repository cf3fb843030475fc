"""Throwaway database servers started from local binaries (for tests and demos).

* :class:`LocalPostgres` -- a private cluster with ``max_prepared_transactions`` set,
  runnable as root (binaries run as a system user ``twopc-pg``).
* :class:`LocalRedis` -- a redis-server with an fsync-always AOF.

Both raise :class:`ServerUnavailable` with a fix-it hint when they cannot start.
"""

from __future__ import annotations

from ._errors import ServerUnavailable
from ._postgres import LocalPostgres, find_pg_bindir
from ._redis import LocalRedis, find_redis_server

__all__ = [
    "LocalPostgres",
    "LocalRedis",
    "ServerUnavailable",
    "find_pg_bindir",
    "find_redis_server",
]
