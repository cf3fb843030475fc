"""The Spark data sources of the backends that need a database driver, defined without
importing it: :func:`sinks.register_all` works whatever extras are installed, and writing
to a format whose driver is missing fails at plan time with the extra to install."""

from __future__ import annotations

import importlib
from typing import Any

from twopc import TwoPhaseCommitDataSource

__all__ = ["PostgresDataSource", "RedisDataSource"]


class _SinkClass:
    """A data source's ``sink_class``, imported from *module* when first read."""

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.name = name

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        return getattr(importlib.import_module(self.module), self.name)


class PostgresDataSource(TwoPhaseCommitDataSource):
    """Spark data source ``twopc-postgres`` (:class:`sinks.postgres.PostgresSink`)."""

    sink_class = _SinkClass("sinks.postgres", "PostgresSink")  # resolves to the class when read
    format_name = "twopc-postgres"


class RedisDataSource(TwoPhaseCommitDataSource):
    """Spark data source ``twopc-redis`` (:class:`sinks.redis.RedisSink`)."""

    sink_class = _SinkClass("sinks.redis", "RedisSink")  # resolves to the class when read
    format_name = "twopc-redis"
