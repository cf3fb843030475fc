"""The zombie-prepare fence (:mod:`twopc._fence`) for writes whose ledger is in the target (a
batch write without ``checkpointLocation`` in prepared mode): a task still running when its
job was aborted, that prepares after the driver's abort and sweep, rolls itself back.

JVM-less, against the real PostgreSQL: the drop-in's data source is planned as Spark plans
it (``writer()``: the lease, the ledger in the target), one task runs in a forked process
(the writer pickled to it, as Spark ships it) and holds before it prepares; the driver's
``abort`` runs meanwhile (its sibling failed for good), then the task is released."""

from __future__ import annotations

import pickle
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from pyspark.sql.types import LongType, StringType, StructField, StructType

import faultinject
from sinks import JdbcDataSource
from twopc import BatchAbortedError

SCHEMA = StructType([StructField("id", LongType(), False), StructField("payload", StringType())])


def _late_task(core: Any) -> Any:
    """Partition 1's task attempt: it holds at ``before_pre_commit`` until released."""
    rows = pa.RecordBatch.from_pydict({"id": list(range(20)), "payload": [f"p{i}" for i in range(20)]})
    return core.write_partition(iter([rows]), 0, 1, 7)


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
    core = pickle.loads(pickle.dumps(writer.core))
    assert core.runtime.in_target and core.sink.mode == "prepared"
    state = tmp_path / "faults"
    with faultinject.armed("before_pre_commit@partition=1:hold", state), \
            ProcessPoolExecutor(max_workers=1, mp_context=get_context("fork")) as pool:
        task = pool.submit(_late_task, core)
        deadline = time.monotonic() + 120
        while not faultinject.read_firings(state) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert faultinject.read_firings(state), "the late task did not reach its hold"
        writer.abort([None, None])  # partition 0 failed for good: the driver aborts and sweeps
        (state / faultinject.RELEASE_FILE).touch()
        with pytest.raises(BatchAbortedError, match="was aborted by the driver"):
            task.result(timeout=120)
    assert _left(pg_engine, table, core.sink_id) == ([], 0)
    if app_id:  # a txnAppId write keeps its records (which txnVersion it committed): not other tests' business
        core.sink.target_ledger().forget(core.sink_id)
        core.sink.close()
