"""One run of :mod:`twopc.recovery.demos.bench_first_write` as a script importing nothing a writer does not need:
``python _first_write_child.py {noop|spark-jdbc|twopc} < params.json`` starts a session, writes 100 rows, stops, and
prints one JSON line of its times. The parameters come on stdin, keeping the password off the command line."""

from __future__ import annotations

import json
import runpy
import sys
import time
from pathlib import Path
from typing import Any

STARTED = time.perf_counter()


def main(variant: str, params: dict[str, Any]) -> None:
    from pyspark.sql import SparkSession
    conf = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", "spark.sql.session.timeZone": "UTC",
            **({"spark.jars": params["jar"]} if params.get("jar") else {})}
    spark = (SparkSession.builder.master("local[2]").appName(f"twopc-first-write-{variant}").config(map=conf)
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    ready = time.perf_counter()
    df = spark.range(params["rows"]).selectExpr(*params["exprs"])
    jdbc = {**params["jdbc"], "dbtable": params["table"]}
    if variant == "noop":
        # The no-op source's classes run as this script's own (shipped by value, like a
        # notebook's), so the floor imports nothing of the project.
        source = runpy.run_path(str(Path(__file__).with_name("_noop.py")), run_name="__main__")
        spark.dataSource.register(source["NoopDataSource"])
        df.write.format(source["NOOP_FORMAT"]).mode("append").save()
    elif variant == "spark-jdbc":
        df.write.format("jdbc").mode("append").options(**jdbc).option("driver", "org.postgresql.Driver").save()
    elif variant == "twopc":
        from twopc import sinks
        sinks.register_all(spark)
        df.write.format("twopc-jdbc").mode("append").options(**jdbc).option("driver", "org.postgresql.Driver").save()
    else:
        raise SystemExit(f"unknown variant {variant!r}")
    written = time.perf_counter()
    spark.stop()
    print(json.dumps({"ready": ready - STARTED, "write": written - ready, "stop": time.perf_counter() - written}),
          flush=True)


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.stdin.read()))
