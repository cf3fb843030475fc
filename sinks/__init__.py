"""Two-phase-commit sinks for twopc.

- :class:`JdbcSink` (``format("twopc-jdbc")``): the drop-in for Spark's JDBC writer, with
  Spark's options; commits through prepared transactions (:class:`PostgresSink`,
  :class:`MySqlXaSink`) or, portably, a staging table (:class:`StagingSink`).
- :class:`PostgresSink` (``format("twopc-postgres")``): one ``PREPARE TRANSACTION`` per task
  attempt, bulk-loaded with COPY, committed by the driver.
- :class:`RedisSink` (``format("twopc-redis")``): writes staged under the sink's hash tag,
  applied by one atomic, idempotent server-side FUNCTION call per batch (split only across
  hash tags, or above 512 transactions per call).
- :class:`RedisStreamDataSource` (``readStream.format("twopc-redis-stream")``): the
  source side, Redis Streams read exactly once, acknowledged after the sink committed.
- :class:`CompositeDataSource` (``format("twopc-composite")``): one batch to several of
  these targets under one decision (``targets`` option; :func:`participant` builds a
  :class:`twopc.Participant` from a format name and its options).
- :class:`FileSink` (``format("twopc-file")``): Parquet files made visible by an atomic
  rename; the worked example of subclassing :class:`twopc.TwoPhaseCommitSink`.

``register_all(spark)`` registers every built-in data source.

Layout: a folder per backend (:mod:`twopc.sinks.sql` — what every SQL sink shares, the options
reader, the URL translator, the prepared-transaction base, the staging mode and the
``twopc-jdbc`` drop-in; :mod:`twopc.sinks.postgres`; :mod:`twopc.sinks.mysql`; :mod:`twopc.sinks.redis`),
and the file sink in ``sinks/_file.py``. Backends that need a database driver load when
first used, so ``import sinks`` works with any subset of the extras installed
(``pyspark-twopc[postgres]``, ``pyspark-twopc[mysql]``, ``pyspark-twopc[redis]``); every built-in handle kind is
registered either way, so any ledger can be read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import twopc as _twopc

from ._composite import CompositeDataSource, OptionsCompositeSink, participant, sink_for_format
from ._file import FileDataSource, FileHandle, FileSink
from ._handles import MySqlXaHandle, PostgresHandle, RedisHandle
from ._sources import PostgresDataSource, RedisDataSource, RedisStreamDataSource
from .sql import JdbcDataSource, JdbcOptions, JdbcSink, StagingHandle, StagingSink, write_jdbc

if TYPE_CHECKING:
    from typing import Any

    from pyspark.sql import SparkSession

    from .mysql import MySqlXaSink
    from .postgres import PostgresSink
    from .redis import (
        HIncrByOp,
        HSetOp,
        IncrByOp,
        RedisSink,
        RedisTargetError,
        RPushOp,
        SetOp,
        XAddOp,
        ZAddOp,
        parse_mapping,
    )

__all__ = [
    "DATA_SOURCES",
    "SOURCES",
    "CompositeDataSource",
    "FileDataSource",
    "FileHandle",
    "FileSink",
    "HIncrByOp",
    "HSetOp",
    "IncrByOp",
    "JdbcDataSource",
    "JdbcOptions",
    "JdbcSink",
    "MySqlXaHandle",
    "MySqlXaSink",
    "OptionsCompositeSink",
    "PostgresDataSource",
    "PostgresHandle",
    "PostgresSink",
    "RPushOp",
    "RedisDataSource",
    "RedisHandle",
    "RedisSink",
    "RedisStreamDataSource",
    "RedisTargetError",
    "SetOp",
    "StagingHandle",
    "StagingSink",
    "XAddOp",
    "ZAddOp",
    "parse_mapping",
    "participant",
    "register_all",
    "sink_for_format",
    "write_jdbc",
]

#: names that live in a backend needing a driver: imported on first use
_LAZY = {
    "PostgresSink": "postgres",
    "MySqlXaSink": "mysql",
    **{name: "redis" for name in ("HIncrByOp", "HSetOp", "IncrByOp", "RPushOp", "RedisSink",
                                   "RedisTargetError", "SetOp", "XAddOp", "ZAddOp", "parse_mapping")},
}

DATA_SOURCES = (JdbcDataSource, PostgresDataSource, RedisDataSource, FileDataSource, CompositeDataSource)
#: the sources (readers): registered by :func:`register_all` too, but they are not sinks
#: (``python -m recovery`` looks sinks up in :data:`DATA_SOURCES`)
SOURCES = (RedisStreamDataSource,)


def __getattr__(name: str) -> Any:
    backend = _LAZY.get(name)
    if backend is None:
        raise AttributeError(f"module 'twopc.sinks' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{backend}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def register_all(spark: SparkSession) -> None:
    """Register ``twopc-jdbc``, ``twopc-postgres``, ``twopc-redis``, ``twopc-file``,
    ``twopc-composite`` and ``twopc-redis-stream`` with
    *spark* (a backend whose driver is missing fails when first written to, naming the
    extra to install)."""
    _twopc.register(spark, *DATA_SOURCES, *SOURCES)
