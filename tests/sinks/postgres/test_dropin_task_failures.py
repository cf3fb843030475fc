"""The drop-in's crash matrix without a checkpoint, the task side: a retried task
whose first attempt was killed after it prepared, and a failed job (a task failing for
good). Each id lands exactly once (none for the failed job), and nothing prepared or kept in
the target's ledger is left after the write, nor after ``twopc recover``.

JVM-less, against the real PostgreSQL, as in tests/sinks/postgres/test_target_fence.py: the data source
planned as Spark plans it, each task attempt in a forked process (the writer pickled to
it), the driver's ``commit`` / ``abort`` called with what Spark would hand it."""

from __future__ import annotations

import pickle
import uuid
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from pyspark.sql.types import LongType, StringType, StructField, StructType

from twopc import faultinject, recovery
from twopc.sinks import JdbcDataSource, JdbcSink

SCHEMA = StructType([StructField("id", LongType(), False), StructField("payload", StringType())])


def _attempt(core: Any, partition: int, attempt: int) -> Any:
    """One task attempt of batch 0: partition *p* writes ids ``p*20 .. p*20+19``."""
    ids = list(range(partition * 20, partition * 20 + 20))
    rows = pa.RecordBatch.from_pydict({"id": ids, "payload": [f"p{i}" for i in ids]})
    return core.write_partition(iter([rows]), 0, partition, attempt)


def _run(core: Any, partition: int, attempt: int) -> Any:
    """Run one attempt in a forked process; the exception it died of, or its message."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("fork")) as pool:
        try:
            return pool.submit(_attempt, core, partition, attempt).result(timeout=300)
        except (BrokenProcessPool, Exception) as exc:  # noqa: BLE001 - the test looks at what it died of
            return exc


def _plan(postgres_url: str, pg_engine: sa.Engine) -> tuple[str, Any]:
    table = f"tt_{uuid.uuid4().hex[:10]}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint NOT NULL, payload text)")
    writer = JdbcDataSource({"url": postgres_url, "dbtable": table}).writer(SCHEMA, False)
    sink = writer.sink
    assert writer.runtime.in_target and isinstance(sink, JdbcSink) and sink.mode == "prepared"
    return table, writer


def _state(pg_engine: sa.Engine, table: str, sink_id: str) -> tuple[list[int], list[str], list[str]]:
    """(ids in the table, the write's prepared transactions, its records in twopc_ledger)."""
    with pg_engine.connect() as c:
        ids = sorted(r[0] for r in c.exec_driver_sql(f"SELECT id FROM {table}"))
        prepared = [r[0] for r in c.exec_driver_sql("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s",
                                                    (f"twopc:{sink_id}:%",))]
        records = [r[0] for r in c.exec_driver_sql("SELECT name FROM twopc_ledger WHERE sink_id = %s", (sink_id,))]
    return ids, prepared, records


def _recover(postgres_url: str, table: str) -> int:
    return recovery.main(["recover", "--format", "twopc-jdbc", "--option", f"url={postgres_url}",
                          "--option", f"dbtable={table}"])


def test_a_retried_task_whose_first_attempt_died_prepared_lands_once(postgres_url, pg_engine, tmp_path) -> None:
    table, writer = _plan(postgres_url, pg_engine)
    core = pickle.loads(pickle.dumps(writer))
    with faultinject.armed("after_pre_commit@partition=0:kill", tmp_path / "faults"):
        first = _run(core, 0, 1)  # SIGKILLed with its transaction prepared
        assert isinstance(first, BrokenProcessPool), first
        dead = _state(pg_engine, table, core.sink_id)[1]
        assert len(dead) == 1  # the dead attempt's prepared transaction, left for the driver
        messages = [_run(core, 0, 2), _run(core, 1, 3)]  # the retry (the rule fired once), the sibling
    writer.commit(messages)
    assert _state(pg_engine, table, core.sink_id) == (list(range(40)), [], [])
    assert _recover(postgres_url, table) == 0
    assert _state(pg_engine, table, core.sink_id) == (list(range(40)), [], [])


def test_a_failed_job_leaves_nothing(postgres_url, pg_engine, tmp_path) -> None:
    table, writer = _plan(postgres_url, pg_engine)
    core = pickle.loads(pickle.dumps(writer))
    with faultinject.armed("before_pre_commit@partition=0:raise*4", tmp_path / "faults"):
        failures = [_run(core, 0, a) for a in (1, 2, 3)]  # partition 0 fails for good
        sibling = _run(core, 1, 4)  # prepared, then its job fails
    assert all(isinstance(f, faultinject.InjectedFault) for f in failures), failures
    assert len(_state(pg_engine, table, core.sink_id)[1]) == 1
    writer.abort([None, sibling])
    assert _state(pg_engine, table, core.sink_id) == ([], [], [])
    assert _recover(postgres_url, table) == 0
    assert _state(pg_engine, table, core.sink_id) == ([], [], [])

