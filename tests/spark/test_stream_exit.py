"""A streaming job that ends normally prints no ERROR and no stack trace.

Run as Spark runs a job (``spark-submit job.py``: the JVM is the parent, the Python driver its
child), a script usually returns right after ``awaitTermination()``, without ``spark.stop()``.
Spark tells streaming query listeners of a run's last progress and of its end asynchronously,
so those events may still be on their way when the Python driver is gone; the JVM, which lives
on for its shutdown, must not find twopc's listener still registered for them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pyspark

from tests._filesink_helpers import committed_ids

JOB = textwrap.dedent('''
    import sys

    from pyspark.sql import SparkSession

    import twopc

    folder = sys.argv[1]
    spark = SparkSession.builder.getOrCreate()
    twopc.register_all(spark)
    spark.range(0, 20, numPartitions=2).write.json(folder + "/in")
    query = (spark.readStream.schema("id long").json(folder + "/in")
             .writeStream.format("twopc-file").option("path", folder + "/out")
             .option("checkpointLocation", folder + "/ck").trigger(availableNow=True).start())
    query.awaitTermination()
    print("ENDED", query.lastProgress["numInputRows"], flush=True)
''')

#: a log line at ERROR (log4j's layout: ``26/11/29 09:01:39 ERROR StreamingQueryListenerBus: ...``,
#: Python logging's: ``2026-11-29 09:01:39,123 ERROR twopc...``)
_ERROR_LINE = re.compile(r"^.*\b(?:ERROR|FATAL|CRITICAL)\b.*$", re.MULTILINE)
#: a Java stack frame or a Python traceback
_STACK = re.compile(r"^(?:\tat |Traceback \(most recent call last\)|Caused by: ).*$", re.MULTILINE)


def test_a_streaming_job_that_ends_normally_prints_no_error(tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text(JOB)
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.run([str(submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
                           "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
                           str(job), str(tmp_path / "data")],
                          env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    printed = proc.stdout + proc.stderr
    assert proc.returncode == 0, printed[-4000:]
    assert "ENDED 20" in proc.stdout, printed[-4000:]  # the query ran and ended
    assert committed_ids(tmp_path / "data" / "out") == list(range(20))
    errors = _ERROR_LINE.findall(printed)
    assert not errors, "\n".join(errors[:5])
    stack = _STACK.findall(printed)
    assert not stack, "\n".join(stack[:5])
