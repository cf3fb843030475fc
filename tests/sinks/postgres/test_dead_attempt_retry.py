"""A retried task on a table with a unique key, whose earlier attempt died right after its
PREPARE (its Python worker killed: Spark retries the task, and the dead attempt's transaction
stays prepared, holding its row locks).

JVM-less, against the real PostgreSQL: a ``twopc-postgres`` query's writer planned as Spark plans
it, each attempt in a forked process as Spark's Python worker runs it. The retry rolls back the
prepared transaction of the attempt whose process is gone (it never reported to Spark, so no
decision can name it) and writes at once, instead of waiting on every key until ``lockTimeout``
fails the write. An earlier attempt whose process still runs is never touched."""

from __future__ import annotations

import signal
import uuid
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from twopc import CommitLedger, LedgerError, SinkError, faultinject
from twopc._driver_identity import process_identity
from twopc.ledger._ledger_records import ledger_store, record_task
from twopc.sinks import PostgresDataSource

SCHEMA = StructType([StructField("id", LongType(), False), StructField("payload", StringType()),
                     StructField("amount", DoubleType())])


def _rows(partition: int) -> pa.RecordBatch:
    ids = list(range(partition * 10, partition * 10 + 10))
    return pa.RecordBatch.from_pydict({"id": ids, "payload": [f"p{i}" for i in ids], "amount": [i * 0.5 for i in ids]})


def _attempt(core: Any, partition: int, attempt: int, number: int) -> Any:
    return core.write_partition(iter([_rows(partition)]), 0, partition, attempt, number)


def _killed_after_prepare(core: Any, partition: int, attempt: int, faults: str) -> None:
    with faultinject.armed("after_pre_commit:kill", faults):
        _attempt(core, partition, attempt, 0)


class _Query:
    """A query's writer planned on a keyed table, and what is prepared of its batch 0."""

    def __init__(self, postgres_url: str, engine: sa.Engine, ck: Path) -> None:
        self.table = f"da_{uuid.uuid4().hex[:10]}"
        with engine.begin() as c:
            c.exec_driver_sql(f"CREATE TABLE {self.table} (id bigint PRIMARY KEY, payload text, "
                              f"amount double precision)")
        self.engine = engine
        self.ck = ck
        options = {"url": postgres_url, "dbtable": self.table, "checkpointLocation": str(ck), "lockTimeout": "2s"}
        self.writer = PostgresDataSource(options).streamWriter(SCHEMA, False)  # plan time

    def prepared(self) -> dict[int, int]:
        """Attempt id -> partition of every prepared transaction of the query."""
        sink = self.writer.sink
        try:
            return {h.attempt_id: h.partition_id for h in sink.list_prepared(self.writer.sink_id)}
        finally:
            sink.close()

    def ids(self) -> list[int]:
        with self.engine.connect() as c:
            return sorted(c.exec_driver_sql(f"SELECT id FROM {self.table}").scalars())


def test_a_retry_rolls_back_its_dead_attempt_and_writes_at_once(postgres_url: str, pg_engine: sa.Engine,
                                                                 tmp_path: Path) -> None:
    q = _Query(postgres_url, pg_engine, tmp_path / "ck")
    dead = get_context("fork").Process(target=_killed_after_prepare, args=(q.writer, 0, 1, str(tmp_path / "faults")))
    dead.start()
    dead.join(120)
    assert dead.exitcode == -signal.SIGKILL
    assert q.prepared() == {1: 0}  # the dead attempt's transaction holds ids 0..9
    retry = _attempt(q.writer, 0, 2, 1)  # before: waited 2 s on id 0, then failed on lockTimeout
    assert q.prepared() == {2: 0}
    q.writer.commit([retry], 0)
    assert q.ids() == list(range(10))
    assert CommitLedger(str(q.ck)).running_tasks(0) == {}


def test_an_earlier_attempt_whose_process_runs_is_left_alone(postgres_url: str, pg_engine: sa.Engine,
                                                             tmp_path: Path) -> None:
    """Its process may still hand its transaction to Spark (a speculative copy): the retry waits
    for it, and fails on ``lockTimeout`` as the write did before."""
    q = _Query(postgres_url, pg_engine, tmp_path / "ck")
    first = _attempt(q.writer, 0, 1, 0)
    record_task(ledger_store(str(q.ck)), 0, 0, 1, dict(process_identity()))  # still writing, as far as the ledger knows
    with pytest.raises(SinkError, match="lock"):
        _attempt(q.writer, 0, 2, 1)
    assert q.prepared() == {1: 0}
    q.writer.commit([first], 0)
    assert q.ids() == list(range(10))


def test_an_attempt_that_cannot_remove_its_record_does_not_report_its_transaction(
        postgres_url: str, pg_engine: sa.Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its record stays, so a retry would take its transaction for a dead attempt's once its
    process is gone: it rolls its own transaction back and fails (Spark retries it), rather
    than hand the driver a transaction a retry may roll back."""
    q = _Query(postgres_url, pg_engine, tmp_path / "ck")

    def cannot(*args: Any) -> None:
        raise LedgerError("the checkpoint's store refused a delete")

    with monkeypatch.context() as m:
        m.setattr("twopc._fence.forget_task", cannot)
        with pytest.raises(LedgerError, match="could not remove its running record"):
            _attempt(q.writer, 0, 1, 0)
    assert q.prepared() == {}
    retry = _attempt(q.writer, 0, 2, 1)
    q.writer.commit([retry], 0)
    assert q.ids() == list(range(10))
