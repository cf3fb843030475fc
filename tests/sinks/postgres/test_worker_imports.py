"""What the PostgreSQL sink costs a fresh Spark Python worker in imports: loading it, and a
task that loads rows of the common column types (with nulls) and prepares them, never import
pandas (about 0.4 s of CPU in a worker; the workers that plan and commit a write import none
otherwise); the worker that commits a prepared ``twopc-jdbc`` write imports no pyarrow either.

The rows reach the task as a Spark worker gets them, through Arrow IPC: a batch built from
Python lists would import pandas in the test itself."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import sqlalchemy as sa

from tests._fresh_worker import commit_in_fresh_worker, jdbc_modules_in_fresh_workers, task_in_fresh_worker
from tests._sql_helpers import uid


def _rows() -> pa.RecordBatch:
    n = 6
    ts = dt.datetime(2026, 11, 27, 3, 4, 5, tzinfo=dt.UTC)
    return pa.record_batch({
        "id": pa.array(range(n), pa.int64()),
        "small": pa.array([1, None, 3, 4, 5, 6], pa.int32()),
        "name": pa.array(["a", None, "c", "dé", "", "f"], pa.string()),
        "doc": pa.array(['{"k": 1}', None, "[]", "{}", "1", '"s"'], pa.string()),
        "amount": pa.array([0.5, 1.5, None, 3.5, 4.5, 5.5], pa.float64()),
        "flag": pa.array([True, False, None, True, False, True], pa.bool_()),
        "day": pa.array([dt.date(2026, 1, i + 1) for i in range(n)], pa.date32()),
        "at": pa.array([ts, None, ts, ts, ts, ts], pa.timestamp("us", "UTC")),
        "raw": pa.array([b"\x00", b"x", None, b"", b"yz", b"\xff"], pa.binary()),
    })


def test_a_postgres_task_does_not_import_pandas(postgres_url: str, pg_engine: sa.Engine, tmp_path: Path) -> None:
    table = f"worker_imports_{uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint, small int, name text, doc jsonb, amount float8, "
                          f"flag boolean, day date, at timestamptz, raw bytea)")
    try:
        # binary COPY: the sink refuses a column it would send as CSV
        loaded = task_in_fresh_worker('PostgresSink(url, table, copy_format="binary")', postgres_url, table, _rows(),
                                      tmp_path)
        assert loaded["pandas"] is False
        with pg_engine.connect() as c:
            assert c.exec_driver_sql(f"SELECT count(*), count(small), count(doc), count(at) FROM {table}").one() \
                == (6, 5, 5, 5)
    finally:
        with pg_engine.begin() as c:
            c.exec_driver_sql(f"DROP TABLE {table}")


def test_the_worker_that_commits_a_prepared_jdbc_write_does_not_import_pyarrow(
        postgres_url: str, pg_engine: sa.Engine, tmp_path: Path) -> None:
    """Committing prepared transactions needs no Arrow (pyarrow is about 0.15 s of that
    worker's start, on the write's critical path)."""
    assert commit_in_fresh_worker(postgres_url, pg_engine, tmp_path) == {"pyarrow": False, "pandas": False}


#: The twopc modules a fresh worker holds after a prepared twopc-jdbc task on PostgreSQL, and
#: after committing it: 59 and 60 on 2026-11-30, one of them twopc._worker_heap (71 and 74 on
#: 2026-11-29, before sinks/sql lost its sub-packages, whose __init__s were modules of their own,
#: and the modules of error paths, twopc status and checkpoint folders were loaded where they run;
#: the core's folders twopc.ledger and twopc.spark count as modules of their own). A worker loads
#: the modules whose code it runs. A change that makes a worker load more fails here.
MODULES_AT_MOST = {"task": 59, "commit": 60}


def test_the_twopc_modules_a_jdbc_task_and_its_commit_load(postgres_url: str, pg_engine: sa.Engine,
                                                             tmp_path: Path) -> None:
    held = jdbc_modules_in_fresh_workers(postgres_url, pg_engine, tmp_path)
    counts = {k: len(v) for k, v in held.items()}
    assert all(counts[k] <= MODULES_AT_MOST[k] for k in counts), (counts, held)
    assert "twopc.sinks.postgres" in held["task"] and "twopc.testing" not in held["task"]
