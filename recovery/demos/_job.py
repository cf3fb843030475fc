"""What every chaos job shares: a crashable Spark session, and a streaming query run to the
end of its input with progress lines the :class:`twopc.faultinject.ChaosRunner` shows."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

__all__ = ["crashable_spark", "run_stream_to_end"]

INPUT_SCHEMA = "id BIGINT, payload STRING, amount DOUBLE"


def crashable_spark(app_name: str, partitions: int) -> SparkSession:
    """A ``local[2,3]`` session whose driver, JVM and Python workers die together on a ``crash``;
    every twopc data source registered."""
    from twopc import faultinject
    faultinject.export_crash_group()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from twopc import sinks
    spark = (SparkSession.builder.master("local[2,3]").appName(app_name)
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", str(partitions))
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    sinks.register_all(spark)
    return spark


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
    seen = -1
    def report() -> None:
        nonlocal seen
        for p in query.recentProgress:
            if p["batchId"] > seen:
                seen = p["batchId"]
                print(f"progress: batch {seen} committed ({p['numInputRows']} rows)", file=sys.stderr, flush=True)
    while query.isActive:
        report()
        query.awaitTermination(1)  # returns as soon as the query ends
    query.awaitTermination()
    report()
    spark.stop()
