"""``python -m twopc.testing.job SPEC``: one run of the crash matrix's streaming query. *SPEC* is the
0600 JSON file :func:`twopc.testing.run_crash_matrix` writes and deletes (the sink as
``module:Class``, its options with secrets, schema, folders, partition counts). Each run appends
``<run> <partitions>`` to the runs file, so each restart repartitions the replay, then streams one
Parquet file per micro-batch (``availableNow``) into the sink and stops.

A ``crash`` in the driver or any Python worker kills the whole job
(:func:`twopc.faultinject.export_crash_group`); :class:`twopc.faultinject.ChaosRunner` restarts it.
With a ``master`` (``spark://...``, e.g. :class:`twopc.faultinject.LocalSparkCluster`) executors get
the plan through ``spark.executorEnv.*`` but form their own crash group: a ``crash`` there kills
that executor and Spark reruns its task elsewhere."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from twopc import faultinject

__all__ = ["main"]


def _record_run(runs_file: str, partitions: Sequence[int]) -> tuple[int, int]:
    done = Path(runs_file).read_text(encoding="utf-8").splitlines() if os.path.exists(runs_file) else []
    run = sum(1 for line in done if line.strip())
    chosen = int(partitions[run % len(partitions)])
    append_line(runs_file, f"{run + 1} {chosen}")
    return run + 1, chosen


def progress(text: str) -> None:
    """A ``progress:`` line on stderr, for the runner's report of the run."""
    print(f"progress: {text}", file=sys.stderr, flush=True)


def append_line(path: str | os.PathLike[str], line: str) -> None:
    """Append *line* to *path*, durably (a crash right after must not lose it)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{line}\n")
        f.flush()
        os.fsync(f.fileno())


def read_spec(argv: Sequence[str] | None, module: str) -> dict[str, Any] | None:
    """The job's spec from its one argument (None after printing the usage); this process's group
    becomes the job's crash group."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print(f"usage: python -m {module} SPEC.json", file=sys.stderr)
        return None
    with open(args[0], encoding="utf-8") as f:
        spec: dict[str, Any] = json.load(f)
    faultinject.export_crash_group()
    return spec


def main(argv: Sequence[str] | None = None) -> int:
    if (spec := read_spec(argv, "twopc.testing.job")) is None:
        return 2
    run, partitions = _record_run(spec["runs_file"], spec["partitions"])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from twopc import CommitLedger
    master = spec.get("master") or "local[2,3]"
    builder = (SparkSession.builder.master(master).appName("twopc-kit-crash-matrix")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", str(partitions))
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1"))
    if not master.startswith("local"):  # executors in JVMs of their own: hand them the fault plan
        for name in (faultinject.ENV_SPEC, faultinject.ENV_PLAN, faultinject.ENV_STATE, "PYTHONPATH"):
            if os.environ.get(name):
                builder = builder.config(f"spark.executorEnv.{name}", os.environ[name])
    for key, value in spec.get("spark_conf", {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from ._harness import _load, kit_data_source
    source = kit_data_source(_load(spec["sink"]), spec.get("format"))
    spark.dataSource.register(source)
    ledger = CommitLedger(spec["checkpoint"])
    progress(f"run {run}, {partitions} partitions, last committed batch {ledger.latest_committed()}")
    stream = (spark.readStream.schema(StructType.fromJson(spec["schema"]))
              .option("maxFilesPerTrigger", 1).parquet(spec["input"]))
    writer = stream.repartition(partitions).writeStream.format(source.name())
    for key, value in spec["options"].items():
        writer = writer.option(key, value)
    query = writer.option("checkpointLocation", spec["checkpoint"]).trigger(availableNow=True).start()
    seen = -1
    while query.isActive:
        for p in query.recentProgress:
            if p["batchId"] > seen:
                seen = p["batchId"]
                progress(f"batch {seen} committed ({p['numInputRows']} rows)")
        query.awaitTermination(1)  # returns as soon as the query ends
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
