"""Rows PostgreSQL refuses (a type or constraint error on one entry), at the sink against a
real PostgreSQL: without ``deadLetterTable`` the task fails naming the entry; with it the
refused rows go to the dead-letter table inside the same prepared transaction (committed
with the batch, rolled back with it). No Spark: ``twopc-postgres`` and ``twopc-jdbc``
prepared mode run this same sink code in their tasks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa

from twopc import CommitOutcome, ConfigurationError, SinkError
from twopc.sinks import JdbcSink, PostgresSink
from twopc.sinks.sql import JdbcOptions

from tests._sql_helpers import ctx, prepare, uid

SCHEMA = pa.schema([("stream", pa.string()), ("id", pa.string()), ("n", pa.int64()), ("s", pa.string())])


def _batch(rows: list[tuple[str, int, str]]) -> pa.RecordBatch:
    """Entries of stream ``orders``: (entry id, n, s)."""
    return pa.record_batch([pa.array(["orders"] * len(rows)), pa.array([r[0] for r in rows]),
                            pa.array([r[1] for r in rows], pa.int64()), pa.array([r[2] for r in rows])], schema=SCHEMA)


def _rows(engine: sa.Engine, text: str) -> list[tuple[Any, ...]]:
    with engine.connect() as c:
        return [tuple(r) for r in c.exec_driver_sql(text).fetchall()]


@pytest.fixture
def target(pg_engine: sa.Engine) -> Iterator[tuple[str, str, str]]:
    """(table, dead-letter table name, sink id): ``n`` must be >= 0, ``s`` at most 5 characters."""
    u = uid()
    table, dead, sink_id = f"dl_{u}", f"dead_{u}", f"s_{u}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (stream text, id text PRIMARY KEY, n bigint CHECK (n >= 0), "
                          f"s varchar(5))")
    yield table, dead, sink_id
    with pg_engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        prepared = c.exec_driver_sql(f"SELECT gid FROM pg_prepared_xacts WHERE starts_with(gid, 'twopc:{sink_id}:')")
        for (gid,) in prepared.fetchall():
            c.exec_driver_sql(f"ROLLBACK PREPARED '{gid}'")
        c.exec_driver_sql(f"DROP TABLE IF EXISTS {table}, {dead}")


GOOD = [("1-0", 1, "a"), ("2-0", 2, "b")]
BAD = [("3-0", -3, "c"), ("4-0", 4, "toolong"), ("5-0", 5, "e"), ("6-0", -6, "f"), ("7-0", 7, "g")]


@pytest.mark.parametrize("fmt", ["binary", "csv"])
def test_without_dead_letter_a_refused_row_fails_the_task_naming_its_entry(postgres_url, pg_engine, target, fmt):
    table, _, sink_id = target
    sink = PostgresSink(postgres_url, table, copy_format=fmt)
    sink.validate(SCHEMA)
    with pytest.raises(SinkError, match=r"could not write entry orders 3-0 to .*check constraint"):
        prepare(sink, ctx(sink_id), _batch(GOOD), _batch(BAD))
    prepared = f"SELECT count(*) FROM pg_prepared_xacts WHERE starts_with(gid, 'twopc:{sink_id}:')"
    assert _rows(pg_engine, prepared) == [(0,)]
    sink.close()


@pytest.mark.parametrize("fmt", ["binary", "csv"])
def test_dead_letter_routes_refused_rows_inside_the_transaction(postgres_url, pg_engine, target, fmt):
    table, dead, sink_id = target
    sink = PostgresSink(postgres_url, table, copy_format=fmt, dead_letter_table=dead)
    sink.validate(SCHEMA)
    h = prepare(sink, ctx(sink_id, batch=4, partition=1), _batch(GOOD), _batch(BAD))
    assert h.rows == 4
    assert _rows(pg_engine, f"SELECT count(*) FROM {dead}") == [(0,)]  # prepared: invisible, like the rows
    assert sink.commit(h) is CommitOutcome.COMMITTED
    assert _rows(pg_engine, f"SELECT id FROM {table} ORDER BY id") == [("1-0",), ("2-0",), ("5-0",), ("7-0",)]
    dl = _rows(pg_engine, f"SELECT sink_id, batch_id, partition_id, stream, entry_id, left(reason, 5), row->>'n' "
                          f"FROM {dead} ORDER BY entry_id")
    assert dl == [(sink_id, 4, 1, "orders", "3-0", "23514", "-3"), (sink_id, 4, 1, "orders", "4-0", "22001", "4"),
                  (sink_id, 4, 1, "orders", "6-0", "23514", "-6")]
    assert _rows(pg_engine, f"SELECT rows FROM twopc_markers WHERE gid = '{h.txn_id}'") == [(4,)]
    sink.close()


def test_dead_letters_roll_back_with_their_transaction(postgres_url, pg_engine, target):
    table, dead, sink_id = target
    sink = PostgresSink(postgres_url, table, dead_letter_table=dead)
    sink.validate(SCHEMA)
    h = prepare(sink, ctx(sink_id), _batch(BAD))
    sink.abort(h)
    assert _rows(pg_engine, f"SELECT count(*) FROM {dead}") == [(0,)]
    assert _rows(pg_engine, f"SELECT count(*) FROM {table}") == [(0,)]
    sink.close()


def test_a_duplicate_within_the_transaction_is_dead_lettered_once(postgres_url, pg_engine, target):
    table, dead, sink_id = target
    sink = PostgresSink(postgres_url, table, dead_letter_table=dead)
    sink.validate(SCHEMA)
    sink.commit(prepare(sink, ctx(sink_id), _batch([*GOOD, ("1-0", 9, "dup")])))
    assert _rows(pg_engine, f"SELECT id, n FROM {table} ORDER BY id") == [("1-0", 1), ("2-0", 2)]
    assert _rows(pg_engine, f"SELECT entry_id, left(reason, 5) FROM {dead}") == [("1-0", "23505")]
    sink.close()


def test_dead_letter_is_refused_where_it_cannot_be_kept_in_the_transaction():
    with pytest.raises(ConfigurationError, match="deadLetterTable is supported on PostgreSQL in the prepared"):
        JdbcOptions.parse({"url": "mysql://h/db", "dbtable": "t", "deadLetterTable": "dead"})
    with pytest.raises(ConfigurationError, match="deadLetterTable is supported on PostgreSQL in the prepared"):
        JdbcOptions.parse({"url": "postgresql://h/db", "dbtable": "t", "deadLetterTable": "dead",
                           "commitMode": "staging"})


def test_twopc_jdbc_dead_letters_in_prepared_mode_and_refuses_the_option_when_it_stages(
        postgres_url, pg_engine, target):
    table, dead, sink_id = target
    options = {"url": postgres_url, "dbtable": table, "deadLetterTable": dead}
    sink = JdbcSink.from_options(options)
    sink.configure_write(SCHEMA, overwrite=False, streaming=True, checkpointed=True)
    sink.validate(SCHEMA)
    assert sink.mode == "prepared"
    assert sink.commit(prepare(sink, ctx(sink_id), _batch([*GOOD, *BAD]))) is CommitOutcome.COMMITTED
    assert _rows(pg_engine, f"SELECT entry_id FROM {dead} ORDER BY entry_id") == [("3-0",), ("4-0",), ("6-0",)]
    overwrite = JdbcSink.from_options(options)
    overwrite.configure_write(SCHEMA, overwrite=True, streaming=False, checkpointed=True)
    with pytest.raises(ConfigurationError, match="deadLetterTable needs the prepared commit mode, but this write "
                                                 "uses staging"):
        overwrite.validate(SCHEMA)
    sink.close()


def test_a_long_partition_is_not_held_in_memory_while_it_streams(postgres_url, pg_engine, target, monkeypatch):
    """What naming a refused row keeps (the batches' entry columns) is dropped each time the
    COPY's batches reach SETTLE_BYTES: the Arrow memory of a task stays bounded however many
    rows it writes."""
    from twopc.sinks.postgres import _dead_letter

    monkeypatch.setattr(_dead_letter, "SETTLE_BYTES", 1 << 20)
    table, _, sink_id = target
    sink = PostgresSink(postgres_url, table)
    sink.validate(SCHEMA)
    rows = 10_000
    txn = sink.begin_transaction(ctx(sink_id, 0, 0))
    before = pa.total_allocated_bytes()
    for b in range(100):  # 1M rows, about 30 MB of Arrow batches
        ids = pa.array(range(b * rows, (b + 1) * rows), pa.int64())
        batch = pa.record_batch([pa.array(["orders"] * rows), ids.cast(pa.string()), ids, pa.array(["x"] * rows)],
                                schema=SCHEMA)
        sink.invoke_batch(txn, batch)
        del batch, ids
    held = pa.total_allocated_bytes() - before
    handle = sink.pre_commit(txn)
    assert sink.commit(handle) is CommitOutcome.COMMITTED
    assert _rows(pg_engine, f"SELECT count(*) FROM {table}") == [(100 * rows,)]
    assert held < 4 << 20, f"{held / 2**20:.1f} MiB of Arrow batches still held after 1M rows"
