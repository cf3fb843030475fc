"""Crash drills through Spark: a fault plan armed in the driver's environment
(``TWOPC_FAULTS=... python job.py``) is handed to the session's Spark processes, so that a
``crash`` fired in a Spark Python worker kills the whole job, as one fired in the driver
does, and ``times`` count once for the run (see :mod:`twopc.faultinject`)."""

from __future__ import annotations

import logging
from typing import Any

from twopc import faultinject

__all__ = ["export_fault_run"]

log = logging.getLogger("twopc.spark")


def export_fault_run(spark: Any) -> None:
    """When a fault plan is armed in this driver, make its run the session's: Spark's JVM
    becomes one of the run's roots, and ``SparkContext.environment`` carries the run to the
    Python workers of the data sources registered afterwards (the JVM may have started
    before the plan was armed, so its own environment may not). Does nothing unarmed."""
    if not faultinject.export_run():  # unarmed: the common case, one environment look-up
        return
    try:
        sc = spark.sparkContext
        jvm_pid = int(sc._jvm.java.lang.ProcessHandle.current().pid())
    except Exception as exc:  # noqa: BLE001 - Spark Connect (no local JVM): only this process knows the run
        log.debug("twopc: the fault plan's run stays in the driver process: %s", exc)
        return
    faultinject.export_run(sc.environment, pids=[jvm_pid])
