"""Throwaway servers from local binaries, for tests and demos: :class:`LocalPostgres`,
:class:`LocalRedis`, :class:`LocalRedisCluster`, :class:`LocalMariaDB` (all runnable as root).
Each raises :class:`ServerUnavailable` with a fix-it hint when it cannot start."""

from __future__ import annotations

from ._errors import ServerUnavailable
from ._mariadb import LocalMariaDB, find_mariadb_install_db, find_mariadbd
from ._postgres import LocalPostgres, find_pg_bindir
from ._redis import LocalRedis, find_redis_server
from ._redis_cluster import LocalRedisCluster, find_redis_cli

__all__ = ["LocalMariaDB", "LocalPostgres", "LocalRedis", "LocalRedisCluster", "ServerUnavailable",
           "find_mariadb_install_db", "find_mariadbd", "find_pg_bindir", "find_redis_cli", "find_redis_server"]
