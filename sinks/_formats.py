"""The built-in formats: the data sources :func:`register_all` registers with a Spark session,
and the ones ``twopc status|recover`` look a sink up in."""

from __future__ import annotations

from typing import TYPE_CHECKING

import twopc

from ._composite import CompositeDataSource
from ._file import FileDataSource
from ._sources import HttpDataSource, JdbcDataSource, PostgresDataSource, RedisDataSource, RedisStreamDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DATA_SOURCES", "SOURCES", "register_all"]

DATA_SOURCES = (JdbcDataSource, PostgresDataSource, RedisDataSource, FileDataSource, HttpDataSource,
                CompositeDataSource)
#: the sources (readers), registered by :func:`register_all` but not sinks (not in :data:`DATA_SOURCES`)
SOURCES = (RedisStreamDataSource,)


def register_all(spark: SparkSession) -> None:
    """Register every built-in format with *spark* (a backend whose driver is missing fails when
    first written to, naming the extra to install)."""
    twopc.register(spark, *DATA_SOURCES, *SOURCES)
