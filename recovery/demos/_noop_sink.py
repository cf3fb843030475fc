"""A Python data source whose writers consume their rows and do nothing else: Spark's floor for
any Python sink, batch and streaming (Arrow writers, as twopc's), for the benchmarks to compare
with. Format name ``twopc-bench-noop``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

__all__ = ["NOOP_FORMAT", "NoopDataSource"]

NOOP_FORMAT = "twopc-bench-noop"


class _NoopWriter(DataSourceArrowWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        for _batch in iterator:
            pass
        return WriterCommitMessage()


class _NoopStreamWriter(DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        for _batch in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's parameter name
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's parameter name
        pass


class NoopDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NOOP_FORMAT

    def writer(self, schema: Any, overwrite: bool) -> _NoopWriter:
        return _NoopWriter()

    def streamWriter(self, schema: Any, overwrite: bool) -> _NoopStreamWriter:  # noqa: N802 - Spark's method name
        return _NoopStreamWriter()
