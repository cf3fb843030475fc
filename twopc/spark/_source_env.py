"""A workaround for a race in PySpark's streaming Python data sources (PySpark 4.x).

Every Python function made from one data source registration shares one Java ``HashMap`` of
environment variables, serialized into each task. The driver-side
``PythonStreamingSourceRunner.init()`` adds four keys to it (``SPARK_LOCAL_DIRS``,
``SPARK_AUTH_SOCKET_TIMEOUT``, ``SPARK_BUFFER_SIZE``, ``SPARK_PYTHON_RUNTIME``) when a streaming
query over the source starts. With two such queries in one session, that insertion can race
another query's serialization of the map, leaving a task binary whose map holds another number
of entries than it says: every later task of both queries fails with
``java.io.OptionalDataException``. Replacing a value changes no structure, so
:func:`source_environment` registers streaming sources with the four keys already present.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource

__all__ = ["RUNNER_KEYS", "is_stream_source", "source_environment"]

log = logging.getLogger("twopc.spark")

#: The keys ``PythonStreamingSourceRunner.init()`` puts into the shared map (PySpark 4.1-4.3).
RUNNER_KEYS = ("SPARK_LOCAL_DIRS", "SPARK_AUTH_SOCKET_TIMEOUT", "SPARK_BUFFER_SIZE", "SPARK_PYTHON_RUNTIME")


def is_stream_source(ds: type[DataSource]) -> bool:
    """Whether *ds* overrides a streaming reader (Spark then runs a source runner for it)."""
    return (getattr(ds, "streamReader", None) is not DataSource.streamReader
            or getattr(ds, "simpleStreamReader", None) is not DataSource.simpleStreamReader)


def _runner_values(sc: Any) -> dict[str, str]:
    """Values for :data:`RUNNER_KEYS`. Only the keys' presence matters: every runner that
    starts a Python worker from this map puts its own values first (the source runner
    into the map, the task and planner runners into a copy), so these never reach a worker.
    They are what the runner would put where Python can tell without the JVM."""
    conf = sc.getConf()
    local = os.environ.get("SPARK_LOCAL_DIRS") or conf.get("spark.local.dir", None) or tempfile.gettempdir()
    timeout = conf.get("spark.python.authenticate.socketTimeout", "15s").strip().lower()
    return {"SPARK_LOCAL_DIRS": local,
            "SPARK_AUTH_SOCKET_TIMEOUT": timeout[:-1] if timeout.endswith("s") and timeout[:-1].isdigit() else "15",
            "SPARK_BUFFER_SIZE": str(int(conf.get("spark.buffer.size", "65536"))),
            "SPARK_PYTHON_RUNTIME": "PYTHON_WORKER"}


@contextlib.contextmanager
def source_environment(spark: Any) -> Iterator[None]:
    """Within it, data sources registered with *spark* get :data:`RUNNER_KEYS` in their
    environment map (see the module docstring); ``SparkContext.environment`` is restored
    afterwards, so nothing else sees the keys. A session without a local SparkContext
    (Spark Connect) is left as it is."""
    try:
        sc = spark.sparkContext
        values = _runner_values(sc)
    except Exception as exc:  # noqa: BLE001 - Spark Connect or another JVM: register as usual, say why
        log.debug("twopc: not pre-setting the streaming source runner's environment keys: %s", exc)
        yield
        return
    saved = dict(sc.environment)
    sc.environment.update(values)
    try:
        yield
    finally:
        sc.environment.clear()
        sc.environment.update(saved)
