"""Two-phase-commit sinks for twopc.

- :class:`JdbcSink` (``format("twopc-jdbc")``): the drop-in for Spark's JDBC writer, with
  Spark's options; commits through prepared transactions (:class:`PostgresSink`,
  :class:`MySqlXaSink`) or, portably, a staging table (:class:`StagingSink`).
- :class:`PostgresSink` (``format("twopc-postgres")``): one ``PREPARE TRANSACTION`` per task
  attempt, bulk-loaded with COPY, committed by the driver.
- :class:`RedisSink` (``format("twopc-redis")``): writes staged under the sink's hash tag,
  applied by one atomic, idempotent server-side FUNCTION call per batch.
- :class:`RedisStreamDataSource` (``readStream.format("twopc-redis-stream")``): Redis Streams
  read exactly once, acknowledged after the sink committed.
- :class:`CompositeDataSource` (``format("twopc-composite")``): one batch to several targets
  under one decision (:func:`participant` builds a :class:`twopc.Participant` from a format).
- :class:`HttpSink` (``format("twopc-http")``): one HTTP request per row, kept in an outbox at
  prepare, sent with an idempotency key once the batch is decided.
- :class:`FileSink` (``format("twopc-file")``): Parquet files made visible by an atomic rename;
  the worked example of subclassing :class:`twopc.TwoPhaseCommitSink`.

``register_all(spark)`` registers every built-in data source. The SQL and Redis sinks load when
first used: ``import twopc.sinks`` imports no database driver and no SQLAlchemy, works with any
subset of the extras installed, and reads every built-in handle kind, so any ledger can be read."""

from __future__ import annotations

if __name__ != "twopc.sinks":  # this folder imported by its own name, from a checkout
    raise ImportError(f"this folder is the package twopc.sinks, imported here as {__name__!r}: "
                      "import twopc.sinks, or call twopc.register_all(spark)"
                      " (under two names, each class would exist twice)")

from typing import TYPE_CHECKING

from twopc.spi.runtime import lazy_exports as _lazy_exports

# the handles of the built-in sinks register their kinds with this package (see ._handles)
from ._handles import HttpHandle, MySqlXaHandle, PostgresHandle, RedisHandle

if TYPE_CHECKING:
    from ._composite import CompositeDataSource, OptionsCompositeSink, participant, sink_for_format
    from ._file import FileDataSource, FileHandle, FileSink
    from ._formats import DATA_SOURCES, SOURCES, register_all
    from ._sources import HttpDataSource, JdbcDataSource, PostgresDataSource, RedisDataSource, RedisStreamDataSource
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

__all__ = ["DATA_SOURCES", "SOURCES", "CompositeDataSource", "FileDataSource", "FileHandle", "FileSink", "HIncrByOp",
           "HSetOp", "HttpDataSource", "HttpHandle", "HttpSink", "IncrByOp", "JdbcDataSource", "JdbcOptions",
           "JdbcSink", "MySqlXaHandle", "MySqlXaSink", "OptionsCompositeSink", "PostgresDataSource", "PostgresHandle",
           "PostgresSink", "RPushOp", "RedisDataSource", "RedisHandle", "RedisSink", "RedisStreamDataSource",
           "RedisTargetError", "SetOp", "StagingHandle", "StagingSink", "XAddOp", "ZAddOp", "parse_mapping",
           "participant", "register_all", "sink_for_format", "write_jdbc"]

#: Every other name loads on first use: a worker loads only the modules of the sink it runs.
__getattr__, __dir__ = _lazy_exports(__name__, {
    **dict.fromkeys(("CompositeDataSource", "OptionsCompositeSink", "participant", "sink_for_format"), "._composite"),
    **dict.fromkeys(("FileDataSource", "FileHandle", "FileSink"), "._file"),
    **dict.fromkeys(("DATA_SOURCES", "SOURCES", "register_all"), "._formats"),
    **dict.fromkeys(("HttpDataSource", "JdbcDataSource", "PostgresDataSource", "RedisDataSource",
                     "RedisStreamDataSource"), "._sources"),
    **dict.fromkeys(("JdbcOptions", "JdbcSink", "StagingHandle", "StagingSink", "write_jdbc"), ".sql"),
    **dict.fromkeys(("HIncrByOp", "HSetOp", "IncrByOp", "RPushOp", "RedisSink", "RedisTargetError", "SetOp",
                     "XAddOp", "ZAddOp", "parse_mapping"), ".redis"),
    "HttpSink": ".http",
    "MySqlXaSink": ".mysql",
    "PostgresSink": ".postgres",
})
