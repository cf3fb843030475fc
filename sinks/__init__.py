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
- :class:`HttpSink` (``format("twopc-http")``): one HTTP request per row, stored in an outbox
  under the checkpoint at prepare, sent with an idempotency key once the batch is decided.
- :class:`FileSink` (``format("twopc-file")``): Parquet files made visible by an atomic
  rename; the worked example of subclassing :class:`twopc.TwoPhaseCommitSink`.

``register_all(spark)`` registers every built-in data source.

Layout: a folder per backend (:mod:`twopc.sinks.sql` — what every SQL sink shares, the options
reader, the URL translator, the prepared-transaction base, the staging mode and the
``twopc-jdbc`` drop-in; :mod:`twopc.sinks.postgres`; :mod:`twopc.sinks.mysql`; :mod:`twopc.sinks.redis` and
:mod:`twopc.sinks.redis_source`, which share ``twopc.sinks._redis``),
and the file sink in ``sinks/_file.py``. The SQL and Redis sinks load when first used:
``import twopc.sinks`` and :func:`register_all` import no database driver and no SQLAlchemy
(a job's driver pays for none of them), and work with any subset of the extras installed
(``pyspark-twopc[postgres]``, ``pyspark-twopc[mysql]``, ``pyspark-twopc[redis]``); every
built-in handle kind is found either way, so any ledger can be read.
"""

from __future__ import annotations

if __name__ != "twopc.sinks":  # this folder imported by its own name, from a checkout
    raise ImportError(f"this folder is the package twopc.sinks, imported here as {__name__!r}: "
                      "import twopc.sinks, or call twopc.register_all(spark)"
                      " (under two names, each class would exist twice)")

from typing import TYPE_CHECKING

import twopc as _twopc

from ._composite import CompositeDataSource, OptionsCompositeSink, participant, sink_for_format
from ._file import FileDataSource, FileHandle, FileSink
from ._handles import HttpHandle, MySqlXaHandle, PostgresHandle, RedisHandle
from ._sources import HttpDataSource, JdbcDataSource, PostgresDataSource, RedisDataSource, RedisStreamDataSource

if TYPE_CHECKING:
    from typing import Any

    from pyspark.sql import SparkSession

    from .http import HttpSink
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
    from .sql import JdbcOptions, JdbcSink, StagingHandle, StagingSink, write_jdbc

__all__ = [
    "DATA_SOURCES",
    "SOURCES",
    "CompositeDataSource",
    "FileDataSource",
    "FileHandle",
    "FileSink",
    "HIncrByOp",
    "HSetOp",
    "HttpDataSource",
    "HttpHandle",
    "HttpSink",
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

#: names that live in a backend needing a driver or SQLAlchemy: imported on first use (a job's
#: driver that only registers the data sources loads none of them)
_LAZY = {
    **{name: "sql" for name in ("JdbcOptions", "JdbcSink", "StagingHandle", "StagingSink", "write_jdbc")},
    "PostgresSink": "postgres",
    "MySqlXaSink": "mysql",
    "HttpSink": "http",
    **{name: "redis" for name in ("HIncrByOp", "HSetOp", "IncrByOp", "RPushOp", "RedisSink",
                                   "RedisTargetError", "SetOp", "XAddOp", "ZAddOp", "parse_mapping")},
}

DATA_SOURCES = (JdbcDataSource, PostgresDataSource, RedisDataSource, FileDataSource, HttpDataSource,
                CompositeDataSource)
#: the sources (readers): registered by :func:`register_all` too, but they are not sinks
#: (``twopc status|recover`` look sinks up in :data:`DATA_SOURCES`)
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
    """Register ``twopc-jdbc``, ``twopc-postgres``, ``twopc-redis``, ``twopc-file``, ``twopc-http``,
    ``twopc-composite`` and ``twopc-redis-stream`` with
    *spark* (a backend whose driver is missing fails when first written to, naming the
    extra to install)."""
    _twopc.register(spark, *DATA_SOURCES, *SOURCES)
