"""What a composite write task costs a fresh Spark Python worker in imports: a composite of
PostgreSQL and files whose participants add the micro-batch id column (``batch_column``)
validates, writes, prepares and commits without importing pandas (about 0.4 s of CPU, once
per worker). The rows reach the task through Arrow IPC, as a Spark worker gets them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import sqlalchemy as sa

from tests._filesink_helpers import committed_ids
from tests._fresh_worker import task_in_fresh_worker
from tests._sql_helpers import uid


def test_a_composite_task_with_a_batch_column_does_not_import_pandas(
        postgres_url: str, pg_engine: sa.Engine, tmp_path: Path) -> None:
    table = f"composite_imports_{uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint, payload text, batch bigint NOT NULL)")
    rows = pa.record_batch({"id": pa.array([1, 2, 3], pa.int64()), "payload": pa.array(["a", None, "c"])})
    sink = ('CompositeSink([Participant("db", PostgresSink(url, table), batch_column="batch"), '
            'Participant("files", FileSink(out), columns=["id"], batch_column="batch")])')
    try:
        assert task_in_fresh_worker(sink, postgres_url, table, rows, tmp_path)["pandas"] is False
        with pg_engine.connect() as c:
            assert sorted(c.exec_driver_sql(f"SELECT id, batch FROM {table}").all()) == [(1, 7), (2, 7), (3, 7)]
        assert sorted(committed_ids(tmp_path / "out")) == [1, 2, 3]
    finally:
        with pg_engine.begin() as c:
            c.exec_driver_sql(f"DROP TABLE {table}")
