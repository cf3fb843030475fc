"""The Spark data sources of the backends that need a database driver, defined without
importing it: :func:`twopc.sinks.register_all` works whatever extras are installed, and writing
to a format whose driver is missing fails at plan time with the extra to install."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource

from twopc import TwoPhaseCommitDataSource

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSourceStreamReader
    from pyspark.sql.types import StructType

__all__ = ["PostgresDataSource", "RedisDataSource", "RedisStreamDataSource"]


class _SinkClass:
    """A data source's ``sink_class``, imported from *module* when first read."""

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.name = name

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        return getattr(importlib.import_module(self.module), self.name)


class PostgresDataSource(TwoPhaseCommitDataSource):
    """Spark data source ``twopc-postgres`` (:class:`twopc.sinks.postgres.PostgresSink`)."""

    sink_class = _SinkClass("twopc.sinks.postgres", "PostgresSink")  # resolves to the class when read
    format_name = "twopc-postgres"


class RedisDataSource(TwoPhaseCommitDataSource):
    """Spark data source ``twopc-redis`` (:class:`twopc.sinks.redis.RedisSink`)."""

    sink_class = _SinkClass("twopc.sinks.redis", "RedisSink")  # resolves to the class when read
    format_name = "twopc-redis"


class RedisStreamDataSource(DataSource):
    """Spark data source ``twopc-redis-stream``: reads Redis Streams exactly once into a
    streaming query, acknowledging to a consumer group only after the sink committed
    (:mod:`twopc.sinks.redis_source`)."""

    @classmethod
    def name(cls) -> str:
        return "twopc-redis-stream"

    def schema(self) -> str:
        """``stream, id, timestamp, fields`` and the ``fieldsSchema`` columns (DDL)."""
        from .redis_source import StreamOptions, schema_ddl

        return schema_ddl(StreamOptions.read(self.options).fields_schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - PySpark's name
        """The reader (:class:`twopc.sinks.redis_source.RedisStreamReader`).

        Raises:
            ConfigurationError: an option is invalid, or PySpark is older than 4.2 (the
                reader needs ``latestOffset(start, limit)``).
        """
        from .redis_source import RedisStreamReader, StreamOptions, check_pyspark

        check_pyspark()
        return RedisStreamReader(StreamOptions.read(self.options), schema)
