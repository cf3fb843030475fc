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
    """Register twopc data sources (sinks, and sources such as ``twopc-redis-stream``) with *spark*
    so ``format(name)`` finds them.

    - A named streaming query without ``checkpointLocation`` keeps its ledger in
      ``<spark.sql.streaming.checkpointLocation>/<queryName>``, read when the query starts (on
      Spark Connect, now: register again after changing it).
    - Session defaults of writer options (``spark.twopc.<option>``, e.g. ``spark.twopc.twopcSchema``,
      :attr:`TwoPhaseCommitSink.__session_options__`) are read now, for writes that do not set them.
    - Streaming sources get the environment keys PySpark's source runner adds, so two queries
      over one source cannot corrupt each other's task binaries (:mod:`twopc.spark._source_env`).
    - On Spark Connect, one small task first checks that the server's Python imports twopc and
      the packages of *data_sources* (:mod:`twopc.spark._connect`).
    - An armed fault plan is handed to the session's Spark processes (:func:`export_fault_run`).
    - A streaming query listener aborts a micro-batch ``query.stop()`` left unaborted (:mod:`twopc.spark._stops`).
    - A session default on S3 that Spark cannot write (no ``hadoop-aws``,
      :func:`twopc.check_checkpoint_location`) is a WARNING naming what to add."""
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
    """A ``foreachBatch`` function writing each micro-batch exactly once: a twopc batch write with
    ``txnVersion = batch_id`` (a replay writes nothing). *checkpoint_location* holds these writes'
    ledger (a folder of this query's alone); *format_name* must be registered."""
    def write(df: DataFrame, batch_id: int) -> None:
        (df.write.format(format_name).mode("append").options(**options)
           .option("checkpointLocation", checkpoint_location).option("txnVersion", str(batch_id)).save())
    return write


def export_fault_run(spark: Any) -> None:
    """With a fault plan armed in this driver (``TWOPC_FAULTS=... python job.py``), make its run the session's:
    Spark's JVM becomes a root and ``SparkContext.environment`` carries the run to the workers of sources registered
    afterwards, so a worker's ``crash`` kills the whole job and ``times`` count once. Does nothing unarmed."""
    if not faultinject.export_run():  # unarmed: the common case, one environment look-up
        return
    try:
        sc = spark.sparkContext
        jvm_pid = int(sc._jvm.java.lang.ProcessHandle.current().pid())
    except Exception as exc:  # noqa: BLE001 - Spark Connect (no local JVM): only this process knows the run
        log.debug("twopc: the fault plan's run stays in the driver process: %s", exc)
        return
    faultinject.export_run(sc.environment, pids=[jvm_pid])
