"""Spark's overwrite flag on SQL tables. ``outputMode("complete")`` replaces a table's rows in
each micro-batch's commit transaction and keeps the table itself (key, indexes, NOT NULL,
comment), on PostgreSQL, MariaDB and SQLite alike; ``twopc-postgres`` refuses it, naming
``twopc-jdbc``; a batch ``mode("overwrite")`` that drops and re-creates a table (Spark's
meaning without ``truncate``) names what the table will lose before anything is written."""

from __future__ import annotations

import collections
import logging
import uuid
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from twopc import CommitLedger, ConfigurationError, TransactionContext, sinks
from twopc.recovery import main as twopc_cli
from twopc.recovery.demos.demo import write_input
from twopc.sinks import JdbcSink, PostgresSink, StagingSink
from twopc.spi import SchemaMismatchError
from twopc.spi.operations import Decision


@pytest.fixture(scope="module", autouse=True)
def _registered(spark) -> None:
    sinks.register_all(spark)


def _name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def _pg_table_shape(engine: sa.Engine, table: str) -> dict[str, Any]:
    """What a DROP + CREATE would change: the table's oid, key, indexes, NOT NULL columns
    and comment."""
    with engine.connect() as c:
        oid = c.execute(sa.text("SELECT to_regclass(:t)::oid"), {"t": table}).scalar_one()
        return {
            "oid": oid,
            "primary key": c.execute(sa.text(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = :o AND contype = 'p'"),
                {"o": oid}).scalars().all(),
            "indexes": sorted(c.execute(sa.text("SELECT indexname FROM pg_indexes WHERE tablename = :t"),
                                        {"t": table}).scalars().all()),
            "not null": sorted(c.execute(sa.text(
                "SELECT attname FROM pg_attribute WHERE attrelid = :o AND attnum > 0 AND attnotnull "
                "AND NOT attisdropped"), {"o": oid}).scalars().all()),
            "comment": c.execute(sa.text("SELECT obj_description(:o, 'pg_class')"), {"o": oid}).scalar_one(),
        }


def test_complete_mode_keeps_the_table_and_holds_each_micro_batch_aggregate(spark, postgres_url, pg_engine,
                                                                            tmp_path) -> None:
    """A streaming aggregation in complete mode into an existing table with a primary key,
    an index, a NOT NULL column and a comment: after every micro-batch the table holds
    exactly that batch's aggregate rows (the stale row written before the query is gone
    after the first), and it is still the same table with all four."""
    table = _name("agg")
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (bucket bigint PRIMARY KEY, n bigint NOT NULL)")
        c.exec_driver_sql(f"CREATE INDEX {table}_n ON {table} (n)")
        c.exec_driver_sql(f"COMMENT ON TABLE {table} IS 'events per bucket'")
        c.exec_driver_sql(f"INSERT INTO {table} VALUES (99, 1)")
    shape = _pg_table_shape(pg_engine, table)
    assert shape["primary key"] == ["PRIMARY KEY (bucket)"] and f"{table}_n" in shape["indexes"]
    u = make_url(postgres_url)
    inp = tmp_path / "in"
    inp.mkdir()
    q = (spark.readStream.schema("id long, payload string, amount double").option("maxFilesPerTrigger", 1)
         .json(str(inp)).selectExpr("id % 4 AS bucket").groupBy("bucket").count()
         .withColumnRenamed("count", "n")
         .writeStream.outputMode("complete").format("twopc-jdbc")
         .option("url", f"jdbc:postgresql://{u.host}:{u.port}/{u.database}").option("dbtable", table)
         .option("user", u.username).option("password", u.password)
         .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        ids: list[int] = []
        for k, rows in enumerate((3, 6, 1)):
            ids += write_input(inp, files=1, rows_per_file=rows, first_file=k)
            q.processAllAvailable()
            with pg_engine.connect() as c:
                got = dict(c.exec_driver_sql(f"SELECT bucket, n FROM {table}").all())
            assert got == dict(collections.Counter(i % 4 for i in ids)), f"after micro-batch {k}"
            assert _pg_table_shape(pg_engine, table) == shape, f"after micro-batch {k}"
    finally:
        q.stop()


AGG = pa.schema([("bucket", pa.int64()), ("n", pa.int64())])


def _aggregate(counts: dict[int, int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"bucket": list(counts), "n": list(counts.values())}, schema=AGG)


def _shape(engine: sa.Engine, table: str) -> tuple[object, ...]:
    insp = sa.inspect(engine)
    comment = None if engine.dialect.name == "sqlite" else insp.get_table_comment(table)["text"]
    return (insp.get_pk_constraint(table)["constrained_columns"],
            sorted(str(ix["name"]) for ix in insp.get_indexes(table)),
            [c["nullable"] for c in insp.get_columns(table)], comment)


def test_complete_mode_replaces_rows_in_the_commit_and_keeps_the_table_on_every_database(db) -> None:
    """What ``outputMode("complete")`` asks of the staging mode (overwrite while streaming),
    on each database: each batch's commit leaves exactly its rows, the table keeps its key,
    index, NOT NULL and comment, and a replayed commit of an older batch changes nothing."""
    url, engine = db
    table = _name("cm")
    comment = "" if engine.dialect.name == "sqlite" else " COMMENT 'per bucket'"
    with engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (bucket BIGINT PRIMARY KEY, n BIGINT NOT NULL)"
                          + (comment if engine.dialect.name == "mysql" else ""))
        c.exec_driver_sql(f"CREATE INDEX {table}_n ON {table} (n)")
        if engine.dialect.name == "postgresql":
            c.exec_driver_sql(f"COMMENT ON TABLE {table} IS 'per bucket'")
        c.exec_driver_sql(f"INSERT INTO {table} VALUES (99, 1)")
    shape = _shape(engine, table)
    sink = StagingSink(url, table)
    sink.configure_write(AGG, overwrite=True, streaming=True, checkpointed=True)
    committed = []
    for batch_id, counts in enumerate(({0: 1, 1: 2}, {0: 3, 1: 2, 2: 1})):
        sink.validate(AGG)
        txn = sink.begin_transaction(TransactionContext("complete", batch_id, 0, batch_id, 0))
        sink.invoke_batch(txn, _aggregate(counts))
        committed.append([sink.pre_commit(txn)])
        sink.commit_all(committed[-1])
        with engine.connect() as c:
            assert dict(c.exec_driver_sql(f"SELECT bucket, n FROM {table}").all()) == counts
        assert _shape(engine, table) == shape
    sink.commit_all(committed[0])  # a replay of batch 0's commit: already committed, nothing changes
    with engine.connect() as c:
        assert dict(c.exec_driver_sql(f"SELECT bucket, n FROM {table}").all()) == {0: 3, 1: 2, 2: 1}
    sink.close()


def test_twopc_postgres_refuses_complete_and_overwrite_naming_twopc_jdbc(postgres_url) -> None:
    sink = PostgresSink(postgres_url, "any_table")
    with pytest.raises(ConfigurationError, match=r'outputMode\("complete"\).*use format twopc-jdbc.*keeps the table'):
        sink.configure_write(AGG, overwrite=True, streaming=True, checkpointed=True)
    with pytest.raises(ConfigurationError, match=r'mode\("overwrite"\).*twopc-jdbc.*truncate", "true"'):
        sink.configure_write(AGG, overwrite=True, streaming=False, checkpointed=True)
    sink.configure_write(AGG, overwrite=False, streaming=True, checkpointed=True)  # appends are its job


def test_batch_overwrite_that_recreates_the_table_names_its_losses_first(postgres_url, pg_engine, caplog) -> None:
    """``mode("overwrite")`` without ``truncate`` drops and re-creates the table (Spark's
    meaning): validation, before any task, warns what the table will lose and how to keep
    it. With ``truncate=true`` nothing is lost, and nothing is said."""
    table = _name("ow")
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (bucket bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0, "
                          f"label varchar(20) UNIQUE, extra text)")
        c.exec_driver_sql(f"CREATE INDEX {table}_n ON {table} (n)")
        c.exec_driver_sql(f"COMMENT ON TABLE {table} IS 'per bucket'")
        c.exec_driver_sql(f"GRANT SELECT ON {table} TO PUBLIC")
        c.exec_driver_sql(f"INSERT INTO {table} VALUES (99, 1, 'x', 'y')")
    schema = pa.schema([("bucket", pa.int64()), ("n", pa.int64()), ("label", pa.string())])
    shape = _pg_table_shape(pg_engine, table)
    sink = StagingSink(postgres_url, table, mode="overwrite")
    sink.configure_write(schema, overwrite=True, streaming=False, checkpointed=False)
    with caplog.at_level(logging.WARNING, logger="twopc.sinks.staging"):
        sink.validate(schema)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1, warned
    for lost in (f"drops {table}", "column extra (not in the DataFrame)", "primary key (bucket)",
                 f"unique constraint {table}_label_key (label)", f"index {table}_n", "NOT NULL on bucket, n",
                 "default of n", "column type of label (varchar(20) -> text)", "comment", "grants to PUBLIC",
                 '.option("truncate", "true")'):
        assert lost in warned[0], (lost, warned[0])
    assert _pg_table_shape(pg_engine, table) == shape  # told before anything changed
    caplog.clear()
    keep = StagingSink(postgres_url, table, mode="overwrite", truncate=True)
    keep.configure_write(schema, overwrite=True, streaming=False, checkpointed=False)
    with caplog.at_level(logging.WARNING, logger="twopc.sinks.staging"):
        keep.validate(schema)
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
    sink.close()
    keep.close()


def test_twopc_recover_commits_a_decided_complete_mode_batch_as_the_query_would(postgres_url, pg_engine,
                                                                                 tmp_path) -> None:
    """``twopc recover`` builds the sink from the options alone, without Spark's overwrite
    flag: a complete-mode batch decided before its driver died still replaces the rows
    (its handles say what its commit does), and the table keeps its key and index."""
    table = _name("rc")
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (bucket bigint PRIMARY KEY, n bigint NOT NULL)")
        c.exec_driver_sql(f"CREATE INDEX {table}_n ON {table} (n)")
        c.exec_driver_sql(f"INSERT INTO {table} VALUES (0, 5), (7, 1)")  # the previous micro-batch's result
    shape = _pg_table_shape(pg_engine, table)
    options = {"url": postgres_url, "dbtable": table}
    query = JdbcSink.from_options(options)
    query.configure_write(AGG, overwrite=True, streaming=True, checkpointed=True)
    query.validate(AGG)
    sink_id = f"rc{uuid.uuid4().hex[:8]}"
    handles = []
    for p, counts in enumerate(({0: 6}, {1: 2})):
        txn = query.begin_transaction(TransactionContext(sink_id, 3, p, 10 + p, 0))
        query.invoke_batch(txn, _aggregate(counts))
        handles.append(query.pre_commit(txn))
    query.close()
    ledger = CommitLedger(str(tmp_path / "ck"))
    ledger.bind_sink_id(sink_id, sink_id)
    ledger.record_decision(Decision(sink_id, 3, tuple(handles)))  # the driver died here
    assert twopc_cli(["recover", "--checkpoint", str(tmp_path / "ck"), "--format", "twopc-jdbc",
                      *(a for k, v in options.items() for a in ("--option", f"{k}={v}"))]) == 0
    with pg_engine.connect() as c:
        assert dict(c.exec_driver_sql(f"SELECT bucket, n FROM {table}").all()) == {0: 6, 1: 2}
    assert _pg_table_shape(pg_engine, table) == shape


def test_mariadb_overwrite_checks_the_dataframe_against_the_table_it_keeps(mariadb_url) -> None:
    """MariaDB's overwrite keeps the table (its DDL cannot join the commit), so a DataFrame
    that does not fit it is refused at validation, before any task stages rows."""
    engine = sa.create_engine(mariadb_url)
    table = _name("mo")
    try:
        with engine.begin() as c:
            c.exec_driver_sql(f"CREATE TABLE {table} (bucket BIGINT PRIMARY KEY, n BIGINT NOT NULL)")
        wider = pa.schema([*AGG, ("label", pa.string())])
        for streaming in (False, True):
            sink = StagingSink(mariadb_url, table, mode="overwrite")
            sink.configure_write(wider, overwrite=True, streaming=streaming, checkpointed=True)
            with pytest.raises(SchemaMismatchError, match=f"column label: not in table {table}"):
                sink.validate(wider)
            sink.close()
    finally:
        with engine.begin() as c:
            c.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        engine.dispose()


def test_recovery_without_the_dataframe_refuses_to_re_create_an_overwritten_table(postgres_url, pg_engine) -> None:
    """A batch overwrite without truncate re-creates the table from the DataFrame: a process
    that does not know it (recovery from the options alone) refuses, naming the way, and
    leaves the table as it was (it never appends the rows to the old ones)."""
    table = _name("rd")
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (bucket bigint, n bigint)")
        c.exec_driver_sql(f"INSERT INTO {table} VALUES (7, 1)")
    writer = StagingSink(postgres_url, table, mode="overwrite")
    writer.configure_write(AGG, overwrite=True, streaming=False, checkpointed=True)
    writer.validate(AGG)
    txn = writer.begin_transaction(TransactionContext("rd", 0, 0, 0, 0))
    writer.invoke_batch(txn, _aggregate({0: 1}))
    handle = writer.pre_commit(txn)
    recovering = StagingSink(postgres_url, table)
    with pytest.raises(SchemaMismatchError, match=r"re-creating it from the DataFrame.*rerun the write"):
        recovering.commit_all([handle])
    with pg_engine.connect() as c:
        assert c.exec_driver_sql(f"SELECT bucket, n FROM {table}").all() == [(7, 1)]
    assert writer.commit_all([handle])  # the write itself (it knows the DataFrame) finishes it
    with pg_engine.connect() as c:
        assert c.exec_driver_sql(f"SELECT bucket, n FROM {table}").all() == [(0, 1)]
    writer.close()
    recovering.close()
