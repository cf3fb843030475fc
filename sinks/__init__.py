"""Two-phase-commit sinks for twopc.

- :class:`JdbcSink` (``format("twopc-jdbc")``): the drop-in for Spark's JDBC writer, with
  Spark's options; commits through prepared transactions (:class:`PostgresSink`,
  :class:`MySqlXaSink`) or, portably, a staging table (:class:`StagingSink`).
- :class:`PostgresSink` (``format("twopc-postgres")``): one ``PREPARE TRANSACTION`` per task
  attempt, bulk-loaded with COPY, committed by the driver.
- :class:`RedisSink` (``format("twopc-redis")``): writes staged under the sink's hash tag,
  applied by one atomic, idempotent server-side FUNCTION per transaction.
- :class:`FileSink` (``format("twopc-file")``): Parquet files made visible by an atomic
  rename; the worked example of subclassing :class:`twopc.TwoPhaseCommitSink`.

``register_all(spark)`` registers every built-in data source.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twopc import register

from ._file import FileDataSource, FileHandle, FileSink
from ._postgres import PostgresDataSource, PostgresHandle, PostgresSink
from ._jdbc import JdbcDataSource, JdbcSink, write_jdbc
from ._jdbc_options import JdbcOptions
from ._mysql_xa import MySqlXaHandle, MySqlXaSink
from ._staging import StagingHandle, StagingSink
from .redis import (
    HIncrByOp,
    HSetOp,
    IncrByOp,
    RedisDataSource,
    RedisHandle,
    RedisSink,
    RedisTargetError,
    RPushOp,
    SetOp,
    XAddOp,
    ZAddOp,
    parse_mapping,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DATA_SOURCES",
    "FileDataSource",
    "FileHandle",
    "FileSink",
    "PostgresDataSource",
    "PostgresHandle",
    "PostgresSink",
    "RedisDataSource",
    "RedisHandle",
    "RedisSink",
    "RedisTargetError",
    "HIncrByOp",
    "JdbcDataSource",
    "JdbcOptions",
    "JdbcSink",
    "MySqlXaHandle",
    "MySqlXaSink",
    "HSetOp",
    "IncrByOp",
    "RPushOp",
    "SetOp",
    "StagingHandle",
    "StagingSink",
    "XAddOp",
    "ZAddOp",
    "parse_mapping",
    "register_all",
    "write_jdbc",
]

DATA_SOURCES = (JdbcDataSource, PostgresDataSource, RedisDataSource, FileDataSource)


def register_all(spark: SparkSession) -> None:
    """Register ``twopc-jdbc``, ``twopc-postgres``, ``twopc-redis`` and ``twopc-file`` with *spark*."""
    register(spark, *DATA_SOURCES)
