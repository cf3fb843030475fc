"""``df.write.jdbc`` made exactly-once: :func:`write_jdbc`, on a job's driver (apart from
:class:`~twopc.sinks.sql.JdbcSink`, which every worker of the write loads)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from twopc import register

from .._sources import JdbcDataSource

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["write_jdbc"]


def write_jdbc(df: DataFrame, url: str, table: str, mode: str | None = None,
               properties: Mapping[str, str] | None = None, **options: str) -> None:
    """``df.write.jdbc(url, table, mode, properties)`` made exactly-once.

    The same arguments as :meth:`pyspark.sql.DataFrameWriter.jdbc`; *mode* defaults to
    ``errorifexists`` as there (an existing table is refused before anything is written;
    ``ignore`` writes nothing to it). Spark's Python data sources cannot take those two through
    ``.mode()``, so they travel as the ``saveMode`` option. Extra keyword *options* are twopc's
    (``checkpointLocation``, ``upsertKeys``, ``commitMode``...).

    Raises:
        pyspark.errors.AnalysisException: around twopc's error when an option is invalid or
            (``errorifexists``) the table exists, before anything is written.
    """
    register(df.sparkSession, JdbcDataSource)
    w = df.write.format(JdbcDataSource.format_name).option("url", url).option("dbtable", table)
    for k, v in {**(properties or {}), **options}.items():
        w = w.option(k, v)
    m = (mode or "errorifexists").lower()
    # Spark refuses errorifexists/ignore from a Python data source's .mode(): pass them as an option
    w = w.mode("append").option("saveMode", m) if m in ("error", "errorifexists", "default", "ignore") else w.mode(m)
    w.save()
