"""Registering twopc's data sources with a Spark session, and the ``foreachBatch`` adapter."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twopc import faultinject

from ._checkpoint import bind_session_checkpoint, session_checkpoint_root
from ._connect import check_server, is_connect
from ._session_options import bind_session_options, session_option_defaults
from ._source_env import is_stream_source, source_environment
from ._spark import TwoPhaseCommitDataSource
from ._spark_fs import spark_checkpoint_problem
from ._stops import install, start_notes

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.datasource import DataSource

__all__ = ["foreach_batch_writer", "register"]

log = logging.getLogger("twopc.spark")


def register(spark: SparkSession, *data_sources: type[DataSource]) -> None:
    """Register twopc data sources (sinks, and sources such as ``twopc-redis-stream``) with
    *spark* so ``format(name)`` finds them.

    A named streaming query without a ``checkpointLocation`` option keeps its ledger where
    Spark keeps its checkpoint: ``<spark.sql.streaming.checkpointLocation>/<queryName>``, the
    session's setting read when the query starts, as Spark reads it (by the query listener
    below; on Spark Connect, which has none, the setting is read now: register again after
    changing it). The session's defaults of writer options (``spark.twopc.<option>``, such as
    ``spark.twopc.twopcSchema``) for the sinks that take them
    (:attr:`TwoPhaseCommitSink.__session_options__`) are read now: a write that does not set the
    option itself gets the session's value. Register again after changing them.

    Streaming sources are registered with the environment keys PySpark's source runner
    adds, so two streaming queries over one source in one session cannot corrupt each
    other's task binaries (see :mod:`twopc.spark._source_env`).

    On a Spark Connect session it first checks, with one small task, that the server's Python
    imports twopc and the packages of *data_sources* (see :mod:`twopc.spark._connect`): registration is
    per session, and the formats run on the server, not in the client.

    With a fault plan armed in the driver's environment (a crash drill), its run is handed
    to the session's Spark processes first (:func:`export_fault_run`).

    The first call also adds a streaming query listener to the session: when
    ``query.stop()`` ended a query writing to one of these sinks in a micro-batch that Spark
    could not abort, it aborts that batch (see :mod:`twopc.spark._stops`).

    A session default on S3 that Spark itself cannot write (no ``hadoop-aws``: see
    :func:`twopc.check_checkpoint_location`) is a WARNING naming what to add.
    """
    if is_connect(spark):  # the data sources run on the server: it must import them
        check_server(spark, {"twopc", *(ds.__module__.split(".")[0] for ds in data_sources)})
    export_fault_run(spark)  # a crash drill armed in the driver reaches the workers of these sources
    root = session_checkpoint_root(spark)
    if root is not None and (problem := spark_checkpoint_problem(spark, root)) is not None:
        log.warning("twopc: spark.sql.streaming.checkpointLocation: %s", problem)
    notes = start_notes(spark) if any(issubclass(ds, TwoPhaseCommitDataSource) for ds in data_sources) else None
    sinks: dict[str, type[TwoPhaseCommitDataSource]] = {}
    for ds in data_sources:
        bound = bind_session_checkpoint(ds, root, notes if issubclass(ds, TwoPhaseCommitDataSource) else None)
        if issubclass(ds, TwoPhaseCommitDataSource):
            bound = bind_session_options(bound, session_option_defaults(spark, ds.session_option_names()))
        with source_environment(spark) if is_stream_source(ds) else contextlib.nullcontext():
            spark.dataSource.register(bound)
        if issubclass(bound, TwoPhaseCommitDataSource):
            sinks[bound.name()] = bound
    install(spark, sinks)  # settles a micro-batch that query.stop() left unaborted: see twopc.spark._stops


def foreach_batch_writer(format_name: str, checkpoint_location: str,
                         **options: str) -> Callable[[DataFrame, int], None]:
    """Return a ``foreachBatch`` function that writes each micro-batch exactly once.

    Each call becomes a twopc batch write with ``txnVersion = batch_id``, so a replayed
    micro-batch (same id) writes nothing. *checkpoint_location* holds the ledger of these
    writes: a folder of this query's alone (the examples use a sub-folder of its checkpoint).
    The data source named *format_name* must be registered.
    """
    def write(df: DataFrame, batch_id: int) -> None:
        (df.write.format(format_name).mode("append")
           .options(**options)
           .option("checkpointLocation", checkpoint_location)
           .option("txnVersion", str(batch_id))
           .save())
    return write


def export_fault_run(spark: Any) -> None:
    """A crash drill (``TWOPC_FAULTS=... python job.py``): when a fault plan is armed in this
    driver, make its run the session's, so that a ``crash`` in a Spark Python worker kills the
    whole job and ``times`` count once for the run. Spark's JVM becomes one of the run's roots,
    and ``SparkContext.environment`` carries the run to the Python workers of the data sources
    registered afterwards (the JVM may have started before the plan was armed). Does nothing
    unarmed."""
    if not faultinject.export_run():  # unarmed: the common case, one environment look-up
        return
    try:
        sc = spark.sparkContext
        jvm_pid = int(sc._jvm.java.lang.ProcessHandle.current().pid())
    except Exception as exc:  # noqa: BLE001 - Spark Connect (no local JVM): only this process knows the run
        log.debug("twopc: the fault plan's run stays in the driver process: %s", exc)
        return
    faultinject.export_run(sc.environment, pids=[jvm_pid])
