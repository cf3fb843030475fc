"""``python -m tests._ops_query SPEC.json``: a running streaming query for the operations
tests. Streams every Parquet file of ``spec["input"]`` (one per micro-batch) into
``twopc-file`` with the writer options of ``spec["options"]``, prints ``READY <batches>``
on stdout once all are committed, keeps the query running until stdin closes, then stops.
The driver's console (this process's stderr, where Spark's Python workers write too) is
what the test reads."""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from twopc import sinks

    spark = (SparkSession.builder.master("local[2]").appName("twopc-ops-query")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .getOrCreate())
    sinks.register_all(spark)
    stream = spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).parquet(spec["input"])
    writer = stream.repartition(2).writeStream.format("twopc-file").trigger(processingTime="200 milliseconds")
    for key, value in spec["options"].items():
        writer = writer.option(key, value)
    query = writer.option("checkpointLocation", spec["checkpoint"]).start()
    query.processAllAvailable()
    batches = len({p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0})
    print(f"READY {batches}", flush=True)
    sys.stdin.readline()
    query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
