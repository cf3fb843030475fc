"""What every chaos job shares: a crashable Spark session, and a streaming query run to the
end of its input with progress lines the :class:`twopc.faultinject.ChaosRunner` shows."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ._bench_common import bench_session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

__all__ = ["crashable_spark", "follow", "run_stream_to_end"]

INPUT_SCHEMA = "id BIGINT, payload STRING, amount DOUBLE"


def crashable_spark(app_name: str, partitions: int) -> SparkSession:
    """A ``local[2,3]`` session whose driver, JVM and Python workers die together on a ``crash``;
    every twopc data source registered."""
    from twopc import faultinject
    faultinject.export_crash_group()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return bench_session(app_name, master="local[2,3]", sql_shuffle_partitions=str(partitions))


def run_stream_to_end(spark: SparkSession, input_dir: str, checkpoint: str, partitions: int,
                      write: Callable[[DataFrame], DataStreamWriter]) -> None:
    """Run *input_dir*'s JSON files one per micro-batch into the sink *write* configures, to the end
    (``availableNow``), printing progress."""
    from twopc import CommitLedger
    ledger = CommitLedger(checkpoint)
    pending = [d.batch_id for d in ledger.pending()]
    print(f"progress: job started; ledger: last committed batch {ledger.latest_committed()}, "
          f"decided but unfinished {pending or 'none'}", file=sys.stderr, flush=True)
    stream = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(input_dir)
    query = (write(stream.repartition(partitions)).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    follow({"": query}, "rows")
    spark.stop()


def follow(queries: Mapping[str, StreamingQuery], unit: str) -> None:
    """Wait for *queries* to end, printing a ``progress:`` line (with the query's name, if any) per batch committed."""
    seen = dict.fromkeys(queries, -1)
    def report() -> None:
        for name, q in queries.items():
            for p in q.recentProgress:
                if p["batchId"] > seen[name]:
                    seen[name] = p["batchId"]
                    print(f"progress: {f'{name} ' if name else ''}batch {seen[name]} committed "
                          f"({p['numInputRows']} {unit})", file=sys.stderr, flush=True)
    while active := [q for q in queries.values() if q.isActive]:
        report()
        active[0].awaitTermination(1)  # returns as soon as that query ends
    for q in queries.values():
        q.awaitTermination()
    report()
