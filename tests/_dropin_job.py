"""``python -m tests._dropin_job TABLE [START [PARTITIONS]]``: one drop-in write (``twopc-jdbc``, no
checkpoint) of ids START..START+29 (START defaults to 0) in PARTITIONS partitions (default 3)
into TABLE, in a Spark driver of its
own, for the tests that kill it half-way (arm a ``crash`` fault through ``TWOPC_FAULTS``). The
database URL comes in the environment (``TWOPC_DROPIN_URL``), never on the command line.
Prints ``jvm <pid>`` once Spark runs.
"""

from __future__ import annotations

import os
import sys

from twopc import faultinject


def main(table: str, start: int = 0, partitions: int = 3) -> None:
    faultinject.export_crash_group()  # a crash fired in any of the job's processes kills them all
    from pyspark.sql import SparkSession

    from twopc import sinks

    spark = (SparkSession.builder.master("local[2]").appName("twopc-dropin-job")
             .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    print("jvm", spark.sparkContext._jvm.ProcessHandle.current().pid(), flush=True)  # type: ignore[union-attr]  # py4j
    sinks.register_all(spark)
    (spark.range(start, start + 30, numPartitions=partitions).selectExpr("id", "concat('p', id) as payload")
       .write.format("twopc-jdbc").mode("append").option("url", os.environ["TWOPC_DROPIN_URL"])
       .option("dbtable", table).save())
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0, int(sys.argv[3]) if len(sys.argv) > 3 else 3)
