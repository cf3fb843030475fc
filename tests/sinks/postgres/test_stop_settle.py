"""What twopc's query listener does for a micro-batch that ``query.stop()`` left unaborted
(:func:`twopc.spark._stops.settle_stopped`; the unaborted-stop window, see twopc.spark._stops).

JVM-less, against the real PostgreSQL: a ``twopc-postgres`` query's writer planned as Spark
plans it, batch 0's two tasks run as Spark runs them (the writer pickled to a forked
process), Spark's offset log holding batch 0 and its commit log not; then the stop is
settled as the listener settles it. An undecided batch is rolled back, a decided one
committed (never rolled back), and a checkpoint another driver took over is left alone."""

from __future__ import annotations

import pickle
import uuid
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from pyspark.sql.types import LongType, StringType, StructField, StructType

from twopc import CommitLedger, faultinject, recovery
from twopc._driver_identity import driver_identity
from twopc.sinks import PostgresDataSource
from twopc.spark._stops import settle_stopped

SCHEMA = StructType([StructField("id", LongType(), False), StructField("payload", StringType())])


def _task(core: Any, partition: int, attempt: int) -> Any:
    ids = list(range(partition * 10, partition * 10 + 10))
    return core.write_partition(iter([pa.RecordBatch.from_pydict({"id": ids, "payload": [f"p{i}" for i in ids]})]),
                                0, partition, attempt)


class _Query:
    """A stopped query's state: its options, checkpoint, and batch 0 prepared by two tasks."""

    def __init__(self, postgres_url: str, engine: sa.Engine, ck: Path) -> None:
        self.table = f"ss_{uuid.uuid4().hex[:10]}"
        with engine.begin() as c:
            c.exec_driver_sql(f"CREATE TABLE {self.table} (id bigint NOT NULL, payload text)")
        self.engine = engine
        self.options = {"url": postgres_url, "dbtable": self.table, "checkpointLocation": str(ck)}
        self.writer = PostgresDataSource(self.options).streamWriter(SCHEMA, False)  # plan time
        core = pickle.loads(pickle.dumps(self.writer))
        with ProcessPoolExecutor(max_workers=1, mp_context=get_context("fork")) as pool:
            self.messages = [pool.submit(_task, core, p, a).result(timeout=120) for p, a in ((0, 1), (1, 2))]
        self.sink_id = core.sink_id
        (ck / "offsets").mkdir(parents=True)
        (ck / "offsets" / "0").write_text("v1\n{}\n")  # Spark planned batch 0; commits/0 is missing

    def state(self) -> tuple[int, int]:
        """(prepared transactions of the query, rows in the table)."""
        with self.engine.connect() as c:
            prepared = c.execute(sa.text("SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE :p"),
                                 {"p": f"twopc:{self.sink_id}:%"}).scalar_one()
            rows = c.exec_driver_sql(f"SELECT count(*) FROM {self.table}").scalar_one()
        return int(prepared), int(rows)


def test_an_undecided_batch_is_rolled_back(postgres_url, pg_engine, tmp_path) -> None:
    q = _Query(postgres_url, pg_engine, tmp_path / "ck")
    assert q.state() == (2, 0)
    result = settle_stopped(PostgresDataSource(q.options), driver_identity())
    assert result is not None and (result.batch_id, result.action, len(result.swept)) == (0, "aborted", 2)
    assert q.state() == (0, 0)
    assert CommitLedger(str(tmp_path / "ck")).abort_marks(0)  # a task still running rolls itself back


def test_a_decided_batch_is_committed_not_rolled_back(postgres_url, pg_engine, tmp_path) -> None:
    q = _Query(postgres_url, pg_engine, tmp_path / "ck")
    with faultinject.armed("after_decision@batch=0:raise", tmp_path / "faults"), \
            pytest.raises(faultinject.InjectedFault):
        q.writer.commit(q.messages, 0)  # the decision is recorded, nothing committed: then the stop
    assert q.state() == (2, 0)
    result = settle_stopped(PostgresDataSource(q.options), driver_identity())
    assert result is not None and (result.batch_id, result.action, result.committed) == (0, "finished", 2)
    assert q.state() == (0, 20)
    assert CommitLedger(str(tmp_path / "ck")).committed_batches() == [0]


def test_a_checkpoint_another_driver_took_over_is_left_alone(postgres_url, pg_engine, tmp_path) -> None:
    q = _Query(postgres_url, pg_engine, tmp_path / "ck")
    CommitLedger(str(tmp_path / "ck")).claim({"host": "elsewhere", "pid": 1, "started": 1})
    assert settle_stopped(PostgresDataSource(q.options), driver_identity()) is None
    assert q.state() == (2, 0)  # the new owner's recovery settles it: here, twopc recover
    assert recovery.main(["recover", "--checkpoint", str(tmp_path / "ck"), "--format", "twopc-postgres",
                          "--option", f"url={postgres_url}", "--option", f"dbtable={q.table}"]) == 0
    assert q.state() == (0, 0)


def test_a_batch_spark_committed_is_left_alone(postgres_url, pg_engine, tmp_path) -> None:
    q = _Query(postgres_url, pg_engine, tmp_path / "ck")
    q.writer.commit(q.messages, 0)
    (tmp_path / "ck" / "commits").mkdir()
    (tmp_path / "ck" / "commits" / "0").write_text("v1\n{}\n")
    assert settle_stopped(PostgresDataSource(q.options), driver_identity()) is None
    assert q.state() == (0, 20)
