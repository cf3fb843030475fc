"""Throwaway database servers started from local binaries (for tests and demos).

* :class:`LocalPostgres` -- a private cluster with ``max_prepared_transactions`` set,
  runnable as root (binaries run as a system user ``twopc-pg``).
* :class:`LocalRedis` -- a redis-server with an fsync-always AOF.
* :class:`LocalRedisCluster` -- three masters and three replicas of those, joined by
  ``redis-cli --cluster create``, with slot migration, failover and replication cuts.
* :class:`LocalMariaDB` -- a private ``mariadbd`` (InnoDB, XA) with a password-checked
  user ``twopc``; runnable as root (``--user=root``).

All raise :class:`ServerUnavailable` with a fix-it hint when they cannot start.
"""

from __future__ import annotations

from ._errors import ServerUnavailable
from ._mariadb import LocalMariaDB, find_mariadb_install_db, find_mariadbd
from ._postgres import LocalPostgres, find_pg_bindir
from ._redis import LocalRedis, find_redis_server
from ._redis_cluster import LocalRedisCluster, find_redis_cli

__all__ = [
    "LocalMariaDB",
    "LocalPostgres",
    "LocalRedis",
    "LocalRedisCluster",
    "ServerUnavailable",
    "find_mariadb_install_db",
    "find_mariadbd",
    "find_pg_bindir",
    "find_redis_cli",
    "find_redis_server",
]
