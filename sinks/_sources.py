"""The Spark data sources of the backends that need a driver or SQLAlchemy, defined without
importing their sinks (each imported when first read), so :func:`twopc.sinks.register_all`
works whatever extras are installed and a missing driver fails at plan time naming the extra."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource

from twopc import TwoPhaseCommitDataSource
from twopc.spi import option

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSourceStreamReader
    from pyspark.sql.types import StructType

__all__ = ["HttpDataSource", "JdbcDataSource", "PostgresDataSource", "RedisDataSource", "RedisStreamDataSource"]


@dataclass(frozen=True)
class _SinkClass:
    """A data source's ``sink_class``: class *name* of *module*, imported when first read; its ``session_options``
    are given here, so :func:`twopc.register` need not import it."""

    module: str
    name: str
    session_options: tuple[str, ...] = ()

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        return getattr(importlib.import_module(self.module), self.name)


class _LazySinkDataSource(TwoPhaseCommitDataSource):
    """A data source whose ``sink_class`` is a :class:`_SinkClass`."""

    @classmethod
    def session_option_names(cls) -> tuple[str, ...]:
        lazy = inspect.getattr_static(cls, "sink_class")
        assert isinstance(lazy, _SinkClass), f"{cls.__name__}.sink_class is not a _SinkClass"
        return lazy.session_options


class JdbcDataSource(_LazySinkDataSource):
    """Spark data source ``twopc-jdbc`` (:class:`twopc.sinks.sql.JdbcSink`)."""

    sink_class = _SinkClass("twopc.sinks.sql._jdbc", "JdbcSink", ("twopcSchema",))  # resolves to the class when read
    format_name = "twopc-jdbc"


class PostgresDataSource(_LazySinkDataSource):
    """Spark data source ``twopc-postgres`` (:class:`twopc.sinks.postgres.PostgresSink`)."""

    sink_class = _SinkClass("twopc.sinks.postgres", "PostgresSink", ("twopcSchema",))  # resolves when read
    format_name = "twopc-postgres"


class RedisDataSource(_LazySinkDataSource):
    """Spark data source ``twopc-redis`` (:class:`twopc.sinks.redis.RedisSink`)."""

    sink_class = _SinkClass("twopc.sinks.redis", "RedisSink")  # resolves to the class when read
    format_name = "twopc-redis"


class HttpDataSource(_LazySinkDataSource):
    """Spark data source ``twopc-http`` (:class:`twopc.sinks.http.HttpSink`): its outboxes live
    under the write's checkpoint unless option ``outbox`` names another folder."""

    sink_class = _SinkClass("twopc.sinks.http", "HttpSink")  # resolves to the class when read
    format_name = "twopc-http"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        outbox = default_outbox(self.options, self.session_root())
        if outbox is not None:
            self.options["outbox"] = outbox


def default_outbox(options: Mapping[str, str], session_root: str | None) -> str | None:
    """``<checkpoint>/twopc-http`` for a ``twopc-http`` write naming no outbox (the checkpoint
    given, or Spark's under *session_root*); ``None`` when one is named or none is known."""
    if option(options, "outbox") is not None:
        return None
    checkpoint = option(options, "checkpointLocation")
    name = option(options, "queryName")
    if not checkpoint and session_root and name:
        checkpoint = f"{session_root.rstrip('/')}/{name}"
    if not checkpoint:
        return None
    from .http import checkpoint_outbox
    return checkpoint_outbox(checkpoint)


class RedisStreamDataSource(DataSource):
    """Spark data source ``twopc-redis-stream`` (:mod:`twopc.sinks.redis_source`)."""

    @classmethod
    def name(cls) -> str:
        return "twopc-redis-stream"

    def schema(self) -> str:
        """``stream, id, timestamp, fields`` and the ``fieldsSchema`` columns (DDL)."""
        from .redis_source import StreamOptions, schema_ddl
        return schema_ddl(StreamOptions.read(self.options).fields_schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - PySpark's name
        """The reader (:class:`twopc.sinks.redis_source.RedisStreamReader`). Raises ``ConfigurationError``: an
        option is invalid, or PySpark is older than 4.2."""
        from .redis_source import RedisStreamReader, StreamOptions, check_pyspark
        check_pyspark()
        return RedisStreamReader(StreamOptions.read(self.options), schema)
