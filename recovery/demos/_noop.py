"""A Python data source (``twopc-bench-noop``) that does only what Spark asks of every Python source and sink: its Arrow
writers consume their rows (Spark's floor for a Python sink); its stream reader offers one row once (the floor for a
Python streaming source's start). The benchmarks load it by value (``runpy``), so it imports nothing of the project."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql import datasource as ds
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

__all__ = ["NOOP_FORMAT", "NoopDataSource"]

NOOP_FORMAT = "twopc-bench-noop"


class _NoopWriter(ds.DataSourceArrowWriter):
    def write(self, iterator: Iterator[Any]) -> ds.WriterCommitMessage:
        for _batch in iterator:
            pass
        return ds.WriterCommitMessage()


class _NoopStreamWriter(ds.DataSourceStreamArrowWriter):  # commit and abort: the base class's, doing nothing
    write = _NoopWriter.write


class _OneRowStreamReader(ds.DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{"n": 0}`` then ``{"n": 1}``: one micro-batch holding the row ``n = 1``."""

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 - Spark's method name
        return {"n": 0}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:  # noqa: N802 - Spark's method name
        return {"n": 1}

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's method name
        pass

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[ds.InputPartition]:
        return [ds.InputPartition(end["n"])] if end["n"] > start["n"] else []

    def read(self, partition: ds.InputPartition) -> Iterator[tuple[int]]:
        yield (partition.value,)


class NoopDataSource(ds.DataSource):
    @classmethod
    def name(cls) -> str:
        return NOOP_FORMAT

    def schema(self) -> str:
        return "n BIGINT"

    def streamReader(self, schema: Any) -> _OneRowStreamReader:  # noqa: N802 - Spark's method name
        return _OneRowStreamReader()

    def writer(self, schema: Any, overwrite: bool) -> _NoopWriter:
        return _NoopWriter()

    def streamWriter(self, schema: Any, overwrite: bool) -> _NoopStreamWriter:  # noqa: N802 - Spark's method name
        return _NoopStreamWriter()
