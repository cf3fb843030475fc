"""A sink and its handle defined in ``__main__`` (a script run as ``python script.py``, as in a
notebook): Spark's Python workers get both classes by value from cloudpickle, which does not
run the hook that registers the handle's kind; twopc registers it when it unpickles the writer."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent('''
    import sys
    from dataclasses import dataclass

    from pyspark.sql import SparkSession

    import twopc
    from twopc.sinks import FileSink
    from twopc import TransactionHandle, TwoPhaseCommitDataSource


    @dataclass(frozen=True)
    class MainHandle(TransactionHandle, kind="example.main-file", version=1):
        rows: int = 0


    class MainSink(FileSink):
        __handle_type__ = MainHandle

        def pre_commit(self, txn):
            h = super().pre_commit(txn)
            return MainHandle(h.txn_id, h.sink_id, h.batch_id, h.partition_id, h.attempt_id, rows=h.rows)


    class MainDataSource(TwoPhaseCommitDataSource):
        sink_class = MainSink
        format_name = "main-file"


    out, ck, version = sys.argv[1], sys.argv[2], sys.argv[3]
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    twopc.register(spark, MainDataSource)
    (spark.range(0, 30, numPartitions=3).selectExpr("id", "cast(id as string) as payload").write
     .format("main-file").mode("append").option("path", out).option("checkpointLocation", ck)
     .option("txnVersion", version).save())
    print("ROWS", spark.read.parquet(out).count(), flush=True)
    spark.stop()
''')


def _run(script: Path, out: Path, ck: Path, version: int) -> str:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.run([sys.executable, str(script), str(out), str(ck), str(version)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=script.parent)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def test_a_sink_and_handle_defined_in_main_write_through_spark(tmp_path: Path) -> None:
    script = tmp_path / "main_sink.py"
    script.write_text(SCRIPT)
    out, ck = tmp_path / "out", tmp_path / "ck"
    assert "ROWS 30" in _run(script, out, ck, 1)
    # a rerun of the same txnVersion reads the ledger's handles back in a fresh driver: nothing new
    assert "ROWS 30" in _run(script, out, ck, 1)
