"""Why one ``twopc-jdbc`` write needs both of its sinks after the driver settled its mode
(:mod:`twopc.sinks.sql._jdbc_modes`): a streaming query's commit process builds its sink without
asking the server, and a write's recovery settles what earlier writes left in the other
mode (the server's ``max_prepared_transactions`` changed in between).

JVM-less, against real PostgreSQL servers: the data source planned as Spark plans it, a
commit process's writer built from the pickled data source as Spark's streaming sink runner
builds it, task attempts run in this process."""

from __future__ import annotations

import json
import pickle
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
import sqlalchemy as sa
from pyspark.sql.types import LongType, StringType, StructField, StructType

from twopc.faultinject import LocalPostgres
from twopc.sinks import JdbcDataSource, JdbcSink, StagingSink
from twopc.sinks.sql._engines import dispose_engines

SCHEMA = StructType([StructField("id", LongType(), False), StructField("payload", StringType())])


def _rows(ids: list[int]) -> Iterator[pa.RecordBatch]:
    return iter([pa.RecordBatch.from_pydict({"id": ids, "payload": [f"p{i}" for i in ids]})])


def _table(engine: sa.Engine) -> str:
    name = f"jm_{uuid.uuid4().hex[:10]}"
    with engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {name} (id bigint NOT NULL, payload text)")
    return name


def _ids(engine: sa.Engine, table: str) -> list[int]:
    with engine.connect() as c:
        return [r[0] for r in c.exec_driver_sql(f"SELECT id FROM {table} ORDER BY id")]


def _left(engine: sa.Engine, table: str) -> tuple[int, int]:
    """(prepared transactions on the server, rows in *table*'s staging table)."""
    stage = StagingSink(engine.url, table).stage.name
    with engine.connect() as c:
        prepared = c.exec_driver_sql("SELECT count(*) FROM pg_prepared_xacts").scalar_one()
        staged = c.exec_driver_sql(f'SELECT count(*) FROM "{stage}"').scalar_one() \
            if sa.inspect(c).has_table(stage) else 0
    return int(prepared), int(staged)


def test_a_streaming_commit_process_commits_prepared_handles_without_settling_the_mode(
        postgres_url: str, pg_engine: sa.Engine, tmp_path: Path) -> None:
    """The plan settles the prepared mode; the commit process's writer, built again from the
    pickled data source, never asks the server (its mode stays open) and commits the
    batch's prepared transactions by their kind."""
    table = _table(pg_engine)
    options = {"url": postgres_url, "dbtable": table, "checkpointLocation": str(tmp_path / "ck")}
    source = JdbcDataSource(options)
    planned = source.streamWriter(SCHEMA, False)
    assert isinstance(planned.sink, JdbcSink) and planned.sink.mode == "prepared"
    messages = [pickle.loads(pickle.dumps(planned)).write_partition(_rows([p * 10, p * 10 + 1]), 0, p, 0)
                for p in range(3)]
    committer = pickle.loads(pickle.dumps(source)).streamWriter(SCHEMA, False)
    sink = committer.sink
    assert isinstance(sink, JdbcSink) and sink.mode is None  # not the plan: the mode is never settled here
    committer.commit(messages, 0)
    assert _ids(pg_engine, table) == [0, 1, 10, 11, 20, 21]
    assert _left(pg_engine, table)[1] == 0


@pytest.fixture
def no_slots_yet() -> Iterator[tuple[LocalPostgres, sa.Engine]]:
    """A PostgreSQL server as installed (``max_prepared_transactions = 0``); the test raises it."""
    server = LocalPostgres(max_prepared_transactions=0)
    server.start()
    engine = sa.create_engine(server.url)
    try:
        yield server, engine
    finally:
        engine.dispose()
        dispose_engines()
        server.stop()


def test_staged_attempts_of_a_write_before_the_server_allowed_prepared_transactions_are_recovered_after(
        no_slots_yet: tuple[LocalPostgres, sa.Engine], tmp_path: Path) -> None:
    """A checkpointed write stages (no slots) and its driver dies before its decision; the
    server is then given slots. The next write with the checkpoint settles the prepared mode,
    and its recovery still rolls the first write's staged attempts back; its own batch
    commits in the prepared mode."""
    server, engine = no_slots_yet
    table = _table(engine)
    options: dict[str, Any] = {"url": server.url, "dbtable": table, "checkpointLocation": str(tmp_path / "ck"),
                              "txnVersion": "1"}  # the second write is the rerun of the crashed job
    first = JdbcDataSource(options).writer(SCHEMA, False)
    assert isinstance(first.sink, JdbcSink) and first.sink.mode == "staging"
    for p in range(2):
        pickle.loads(pickle.dumps(first)).write_partition(_rows([p]), first.version, p, 0)
    assert _left(engine, table) == (0, 2)  # the driver died here: no decision, two staged attempts
    engine.dispose()
    dispose_engines()
    with psycopg.connect(server.admin_dsn, autocommit=True) as c:
        c.execute("ALTER SYSTEM SET max_prepared_transactions = 8")
    server.restart()

    second = JdbcDataSource(options).writer(SCHEMA, False)  # its plan runs the checkpoint's recovery
    assert isinstance(second.sink, JdbcSink) and second.sink.mode == "prepared"
    assert _left(engine, table) == (0, 0)
    messages = [pickle.loads(pickle.dumps(second)).write_partition(_rows([100 + p]), second.version, p, 0)
                for p in range(2)]
    assert all(json.loads(m.handle)["kind"] == "twopc.postgres" for m in messages), messages
    pickle.loads(pickle.dumps(second)).commit(messages)
    assert _ids(engine, table) == [100, 101]
    assert _left(engine, table) == (0, 0)
