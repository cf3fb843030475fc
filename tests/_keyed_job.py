"""``python -m tests._keyed_job SPEC [--fail-fast]``: several writes into keyed tables in one Spark driver, for
the test that crashes them all after their decision and restarts them
(``tests/chaos/test_keyed_replay.py``).

*SPEC* (JSON, mode 0600: the options hold passwords) names the input folder (one Parquet file per
micro-batch), a folder for the writes' checkpoints, the writes (``name``, ``sink`` as
``module:Class``, ``format``, ``options``, ``batch``: a batch write with ``txnVersion`` 1 instead
of a streaming query), optionally ``readme``, Python code run as the documentation tests run a
page's block (in a namespace of its own, its prints on stdout), and ``results``, the JSON file the
job writes at the end: each write's error (``null`` when it completed).

Every write runs at once: the streaming queries (``availableNow``, ``repartition(2)``) and the
batch write in a thread, once the code, started first in a thread of its own, has run a
micro-batch (a streaming source's Python worker has 10 s to connect back to the JVM: it starts
alone). A fault plan armed in the environment (``TWOPC_FAULTS``) reaches
the session's Spark processes through :func:`twopc.register`, so a ``crash`` fired anywhere kills
the whole job. ``--fail-fast``: the first write that fails ends the job (exit status 3).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twopc.testing import DEFAULT_SPARK_CONF

#: The schema of the input files.
SCHEMA = "id BIGINT, payload STRING, amount DOUBLE"
#: The ``txnVersion`` of the batch writes.
TXN_VERSION = 1


def _outcome(results: dict[str, str | None], name: str, run: Callable[[], object], fail_fast: bool) -> None:
    """Run *run*, recording its error (or None) under *name*; the error also goes to stderr at
    once, and with *fail_fast* ends the job there (exit status 3)."""
    try:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
        assert spark._jvm is not None
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)  # this thread's, in the JVM
        run()
        results[name] = None
    except Exception as exc:  # noqa: BLE001 - the test reads what failed
        results[name] = f"{type(exc).__name__}: {exc}"
        print(f"keyed job: {name} failed: {results[name]}".replace("\n", " | ")[:3000], file=sys.stderr, flush=True)
        if fail_fast:
            os._exit(3)


def _first_batch(spark: Any, thread: threading.Thread, timeout: float = 600.0) -> None:
    """Wait until a streaming query of *spark* has run a micro-batch, or *thread* has ended."""
    deadline = time.monotonic() + timeout
    while thread.is_alive() and time.monotonic() < deadline:
        if any(q.recentProgress for q in spark.streams.active):
            return
        time.sleep(0.2)


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as f:
        spec: dict[str, Any] = json.load(f)
    fail_fast = argv[1:] == ["--fail-fast"]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import twopc
    from twopc.testing._harness import _load, kit_data_source

    builder = (SparkSession.builder.master("local[2]").appName("twopc-keyed-replay")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC").config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1"))
    for key, value in DEFAULT_SPARK_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    sources = {w["name"]: kit_data_source(_load(w["sink"]), w["format"]) for w in spec["writes"]}
    twopc.register(spark, *dict.fromkeys(sources.values()))  # hands the fault plan's run to Spark
    checkpoints = Path(spec["checkpoints"])
    results: dict[str, str | None] = {}
    threads: list[threading.Thread] = []
    if spec.get("readme"):  # first, alone (see the module docstring)
        code = compile(spec["readme"], "README.md", "exec")
        threads.append(threading.Thread(target=_outcome, args=(
            results, "readme", lambda: exec(code, {"__name__": "__readme__"}), fail_fast)))
        threads[0].start()
        _first_batch(spark, threads[0])
    queries = {}
    for w in spec["writes"]:
        name, fmt, ck = w["name"], sources[w["name"]].name(), str(checkpoints / w["name"])
        if w["batch"]:
            writer = (spark.read.schema(SCHEMA).parquet(spec["input"]).repartition(2).write.format(fmt)
                      .mode("append").options(**w["options"]).option("checkpointLocation", ck)
                      .option("txnVersion", str(TXN_VERSION)))
            threads.append(threading.Thread(target=_outcome, args=(results, name, writer.save, fail_fast)))
        else:
            queries[name] = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(spec["input"])
                             .repartition(2).writeStream.format(fmt).options(**w["options"])
                             .option("checkpointLocation", ck).trigger(availableNow=True).start())
    for thread in threads:
        if thread.ident is None:  # not started yet
            thread.start()
    for name, query in queries.items():
        _outcome(results, name, query.awaitTermination, fail_fast)
    for thread in threads:
        thread.join()
    Path(spec["results"]).write_text(json.dumps(results), encoding="utf-8")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
