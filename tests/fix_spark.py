"""Spark for the tests (a plug-in listed in conftest's ``pytest_plugins``).

``spark`` (session): one shared local[2,3] SparkSession, its JVM started on first use only.
``console``: what the driver, the JVM and the Python workers printed during the test.
A session that runs a test marked ``spark``, ``chaos`` or ``ops`` gives every Spark driver JVM
it starts the options of :mod:`tests._spark_jvm` (a class-data-sharing archive, made once per
Spark installation, and the JIT and GC of a short-lived driver) before its first test.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ._s3 import aws_config_path
from ._spark_jvm import long_lived_driver, use_fast_starts

#: the markers of the tests that start Spark, in the session or in processes of their own
_SPARK_MARKERS = ("spark", "chaos", "ops")


@pytest.fixture(scope="session", autouse=True)
def _fast_spark_starts(request: pytest.FixtureRequest) -> None:
    """Before the session's first test, when any of its tests may start Spark: every Spark
    driver JVM started from then on (here or in a child process) starts faster."""
    if any(item.get_closest_marker(m) for item in request.session.items for m in _SPARK_MARKERS):
        use_fast_starts()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One shared ``SparkSession`` (local[2,3]: 2 cores, tasks retried up to 3 times)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Spark's Python processes inherit the environment the JVM starts with: the S3 server of
    # tests/fix_s3.py, started later, writes its address into this file (boto3 reads it per client).
    os.environ.setdefault("AWS_CONFIG_FILE", aws_config_path())
    from pyspark.sql import SparkSession

    with long_lived_driver():
        session = (
            SparkSession.builder.master("local[2,3]")
            .appName("twopc-tests")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .getOrCreate()
        )
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def console(request: pytest.FixtureRequest) -> Callable[[], str]:
    """What the driver and the Python workers printed during the test: Spark's JVM (and
    its Python workers) inherited pytest's global capture file when it started, so the
    global capture holds their output too. Without capture (``-s``) the scan would read
    nothing, which the canary test reports."""
    capman = request.config.pluginmanager.getplugin("capturemanager")

    def read() -> str:
        out, err = capman.read_global_capture()
        return out + err

    read()  # what earlier tests left
    return read
