"""A workaround for a race in PySpark 4.x's streaming Python data sources. The Python functions of
one registration share one Java ``HashMap`` of environment variables, serialized into each task;
``PythonStreamingSourceRunner.init()`` adds :data:`RUNNER_KEYS` when a query starts, which can
race another query's serialization and leave a corrupt task binary (every later task fails with
``java.io.OptionalDataException``). Replacing a value changes no structure, so
:func:`source_environment` registers streaming sources with the keys already present."""

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
    """Whether *ds* overrides a streaming reader."""
    return (getattr(ds, "streamReader", None) is not DataSource.streamReader
            or getattr(ds, "simpleStreamReader", None) is not DataSource.simpleStreamReader)


def _runner_values(sc: Any) -> dict[str, str]:
    """Values for :data:`RUNNER_KEYS`, as the runner would set them. Only presence matters: every
    runner puts its own values first, so these never reach a worker."""
    conf = sc.getConf()
    local = os.environ.get("SPARK_LOCAL_DIRS") or conf.get("spark.local.dir", None) or tempfile.gettempdir()
    timeout = conf.get("spark.python.authenticate.socketTimeout", "15s").strip().lower()
    return {"SPARK_LOCAL_DIRS": local,
            "SPARK_AUTH_SOCKET_TIMEOUT": timeout[:-1] if timeout.endswith("s") and timeout[:-1].isdigit() else "15",
            "SPARK_BUFFER_SIZE": str(int(conf.get("spark.buffer.size", "65536"))),
            "SPARK_PYTHON_RUNTIME": "PYTHON_WORKER"}


@contextlib.contextmanager
def source_environment(spark: Any) -> Iterator[None]:
    """Within it, data sources registered with *spark* get :data:`RUNNER_KEYS`;
    ``SparkContext.environment`` is restored after. Spark Connect is left as it is."""
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
