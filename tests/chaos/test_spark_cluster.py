"""The crash matrix on a real multi-process Spark: a standalone master and two workers
(:class:`twopc.faultinject.LocalSparkCluster`, one core each), so every executor is a JVM of its
own and the sink is pickled to it. :func:`twopc.testing.cluster_crash_plan` SIGKILLs an
executor JVM (with its Python workers) while its task writes and right after its
transaction is prepared, kills the driver after its decision, and a Python worker after
its prepare; Spark runs the lost tasks again on another executor. Then every id is in the
target exactly once and nothing is left prepared (the kit's checks), and the workers
launched a replacement executor for each one killed.

Sinks: PostgreSQL prepared transactions and Redis. The cluster starts once for the module
(~30 s on two busy cores); each matrix is two applications.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from twopc.faultinject import LocalSparkCluster
from twopc.testing import DEFAULT_SPARK_CONF, EXECUTOR_POINTS, SinkHarness, cluster_crash_plan, run_crash_matrix

from tests._kit_harnesses import harness_for

pytestmark = [pytest.mark.chaos, pytest.mark.nightly]  # minutes of executor launches: make test-all

#: Executors as small as the workers allow; the C1 JIT and the serial GC start them faster.
CLUSTER_CONF = {**DEFAULT_SPARK_CONF, "spark.executor.memory": "512m", "spark.executor.cores": "1",
                "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


@pytest.fixture(scope="module")
def spark_cluster() -> Iterator[LocalSparkCluster]:
    with LocalSparkCluster(workers=2, cores=1, memory="640m") as cluster:
        yield cluster


@pytest.fixture(params=["postgres", "redis"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SinkHarness]:
    with harness_for(request.param, request, tmp_path, keyed=True) as h:
        yield h


def test_the_crash_matrix_on_a_standalone_cluster_survives_lost_executors(
        spark_cluster: LocalSparkCluster, harness: SinkHarness, tmp_path: Path) -> None:
    plan = cluster_crash_plan()
    before = spark_cluster.executors_launched()
    # run_timeout_s is the hang guard only: a run here starts a driver and up to four executor
    # JVMs one after the other (each kill launches a replacement), 300 s on two loaded cores
    result = run_crash_matrix(harness, tmp_path / "matrix", plan=plan, master=spark_cluster.master_url,
                              spark_conf=CLUSTER_CONF, partitions=(2, 3), run_timeout_s=480.0)
    print(result.summary())  # shown with -rP
    launched = spark_cluster.executors_launched() - before
    killed = sum(f.action == "crash" and f.point in EXECUTOR_POINTS for f in plan)
    # two executors per application (one per worker), plus one replacement per executor killed
    assert launched >= 2 * len(result.report.runs) + killed, (launched, result.summary())
    assert spark_cluster.wait_no_executors() == []  # every application ended; no executor outlived it
