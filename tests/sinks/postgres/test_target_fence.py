"""The abort fence (:mod:`twopc._fence`) for writes whose ledger is in the target (a batch
write without ``checkpointLocation`` in prepared mode): a task still running when its job was
aborted, that prepares after the driver's abort record, rolls itself back, and the driver's
abort returns only once it has; a task that begins after the abort writes nothing.

JVM-less, against the real PostgreSQL: the drop-in's data source is planned as Spark plans
it (``writer()``: the lease, the ledger in the target), one task runs in a forked process
(the writer pickled to it, as Spark ships it) and holds before it prepares; the driver's
``abort`` runs meanwhile (its sibling failed for good) and the task is released once the
abort is recorded."""

from __future__ import annotations

import pickle
import threading
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from pyspark.sql.types import LongType, StringType, StructField, StructType

from twopc import faultinject
from twopc.sinks import JdbcDataSource
from twopc.spi import BatchAbortedError

SCHEMA = StructType([StructField("id", LongType(), False), StructField("payload", StringType())])


def _late_task(core: Any) -> Any:
    """Partition 1's task attempt: it holds at ``before_pre_commit`` until released."""
    rows = pa.RecordBatch.from_pydict({"id": list(range(20)), "payload": [f"p{i}" for i in range(20)]})
    return core.write_partition(iter([rows]), 0, 1, 7)


def _release_once_aborted(engine: sa.Engine, sink_id: str, state: Any) -> threading.Thread:
    """Release the held task once the driver's abort is recorded in the target's ledger."""
    def release() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with engine.connect() as c:
                if c.exec_driver_sql("SELECT count(*) FROM twopc_ledger WHERE sink_id = %s AND name LIKE %s",
                                     (sink_id, "aborted/%")).scalar_one():
                    break
            time.sleep(0.05)
        (state / faultinject.RELEASE_FILE).touch()

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    return thread


def _left(engine: sa.Engine, table: str, sink_id: str) -> tuple[list[str], int]:
    with engine.connect() as c:
        prepared = [r[0] for r in c.exec_driver_sql("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s",
                                                    (f"twopc:{sink_id}:%",))]
        rows = int(c.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one())
    return prepared, rows


@pytest.mark.parametrize("app_id", [False, True], ids=["eph", "txnAppId"])
def test_a_task_preparing_after_the_abort_of_a_checkpointless_write_rolls_back(
        postgres_url, pg_engine, tmp_path, app_id: bool) -> None:
    table = f"tf_{uuid.uuid4().hex[:10]}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint NOT NULL, payload text)")
    options = {"url": postgres_url, "dbtable": table}
    if app_id:  # its records stay after the write (an eph- write's are deleted)
        options |= {"txnAppId": f"fence-{uuid.uuid4().hex[:8]}", "txnVersion": "0"}
    writer = JdbcDataSource(options).writer(SCHEMA, False)  # plan time, as in Spark's planning worker
    core = pickle.loads(pickle.dumps(writer))
    assert core.runtime.in_target and core.sink.mode == "prepared"
    state = tmp_path / "faults"
    with faultinject.armed("before_pre_commit@partition=1:hold", state), \
            ProcessPoolExecutor(max_workers=1, mp_context=get_context("fork")) as pool:
        task = pool.submit(_late_task, core)
        deadline = time.monotonic() + 120
        while not faultinject.read_firings(state) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert faultinject.read_firings(state), "the late task did not reach its hold"
        releaser = _release_once_aborted(pg_engine, core.sink_id, state)
        writer.abort([None, None])  # partition 0 failed for good: the driver aborts, waits for the task, sweeps
        left = _left(pg_engine, table, core.sink_id)  # as the abort returned: the late task rolled back and ended
        releaser.join()
        with pytest.raises(BatchAbortedError, match="was aborted by the driver"):
            task.result(timeout=120)
    assert left == ([], 0)
    assert _left(pg_engine, table, core.sink_id) == ([], 0)
    if app_id:  # a txnAppId write keeps its records (which txnVersion it committed): not other tests' business
        core.sink.target_ledger().forget(core.sink_id)
        core.sink.close()


def _task(core: Any) -> Any:
    rows = pa.RecordBatch.from_pydict({"id": list(range(20)), "payload": [f"p{i}" for i in range(20)]})
    return core.write_partition(iter([rows]), 0, 1, 9)


@pytest.mark.parametrize("app_id", [False, True], ids=["eph", "txnAppId"])
def test_a_task_that_begins_after_the_abort_writes_nothing(postgres_url, pg_engine, app_id: bool) -> None:
    """A task Spark starts as the job is aborted (a slot freed by the failed task, a Python
    worker slow to start) begins after the abort record (or, for an eph- write, after its
    ledger is gone): it must not take that record for an earlier run's (the late-start
    window) and prepare a transaction nobody sweeps."""
    table = f"tf_{uuid.uuid4().hex[:10]}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint NOT NULL, payload text)")
    options = {"url": postgres_url, "dbtable": table}
    if app_id:
        options |= {"txnAppId": f"late-{uuid.uuid4().hex[:8]}", "txnVersion": "0"}
    writer = JdbcDataSource(options).writer(SCHEMA, False)  # plan time, as in Spark's planning worker
    core = pickle.loads(pickle.dumps(writer))
    try:
        writer.abort([None, None])  # partition 0 failed for good; partition 1 has not begun
        with ProcessPoolExecutor(max_workers=1, mp_context=get_context("fork")) as pool, \
                pytest.raises(BatchAbortedError, match="before this task"):
            pool.submit(_task, core).result(timeout=120)
        assert _left(pg_engine, table, core.sink_id) == ([], 0)
    finally:
        if app_id:
            core.sink.target_ledger().forget(core.sink_id)
        core.sink.close()
