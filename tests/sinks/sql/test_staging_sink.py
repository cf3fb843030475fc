"""StagingSink on a real PostgreSQL, a real MariaDB and a SQLite file: what only the staging
mode does (one local commit transaction per batch, DDL of the save modes, upsert, constraint
errors). The protocol contract (invisible until commit, idempotent replay, abort, lost
rows, list_prepared, coordinator) runs through the conformance kit in test_kit_sinks.py,
on all three databases."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa

from twopc import SinkError, TransactionContext, TransactionLostError
from twopc.sinks import StagingHandle, StagingSink
from twopc.spi import SchemaMismatchError, TargetConfigurationError

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()),
                    ("ts", pa.timestamp("us", tz="UTC"))])


def _batch(start: int, n: int, *, name: str = "n") -> pa.RecordBatch:
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    return pa.RecordBatch.from_pydict({
        "id": list(range(start, start + n)),
        "name": [f"{name}{i}" for i in range(start, start + n)],
        "score": [i / 2 for i in range(start, start + n)],
        "ts": [t0 + dt.timedelta(seconds=i) for i in range(start, start + n)],
    }, schema=SCHEMA)


_COUNTER = iter(range(10**6))


def _table(engine: sa.Engine, *, unique: bool = False) -> str:
    name = f"stg_{next(_COUNTER)}_{engine.dialect.name[:2]}"
    with engine.begin() as c:
        c.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")
        c.exec_driver_sql(f"CREATE TABLE {name} (id BIGINT {'PRIMARY KEY' if unique else 'NOT NULL'}, "
                          f"name TEXT, score DOUBLE PRECISION, ts TIMESTAMP)")
    return name


def _write(sink: StagingSink, sink_id: str, batch_id: int, parts: list[pa.RecordBatch],
           attempt: int = 0) -> list[StagingHandle]:
    out = []
    for p, b in enumerate(parts):
        txn = sink.begin_transaction(TransactionContext(sink_id, batch_id, p, attempt + p * 10, 0))
        sink.invoke_batch(txn, b)
        out.append(sink.pre_commit(txn))
    return out


def _rows(engine: sa.Engine, table: str) -> list[tuple[Any, ...]]:
    with engine.connect() as c:
        return [tuple(r) for r in c.exec_driver_sql(f"SELECT id, name FROM {table} ORDER BY id").all()]


def test_an_attempt_whose_staged_rows_are_gone_fails_the_whole_batch(db) -> None:
    """One local commit transaction: the batch's other attempt is not written either."""
    url, engine = db
    table = _table(engine)
    sink = StagingSink(url, table)
    sink.validate(SCHEMA)
    h1, h2 = _write(sink, "s2", 3, [_batch(0, 10), _batch(10, 10)])
    sink.abort(h2)
    with pytest.raises(TransactionLostError, match="missing"):
        sink.commit_all([h1, h2])
    assert _rows(engine, table) == []
    assert [h.txn_id for h in sink.list_prepared("s2")] == [h1.txn_id]
    sink.abort(h1)
    assert sink.list_prepared("s2") == []


def test_constraint_violation_aborts_the_whole_batch_and_names_it(db) -> None:
    url, engine = db
    table = _table(engine, unique=True)
    sink = StagingSink(url, table)
    sink.validate(SCHEMA)
    handles = _write(sink, "s3", 0, [_batch(0, 10), _batch(5, 10)])
    with pytest.raises(SinkError, match="constraint") as exc:
        sink.commit_all(handles)
    assert "nothing was written" in str(exc.value)
    assert _rows(engine, table) == []


@pytest.mark.parametrize("server", ["postgres", "mariadb"])
def test_a_value_its_column_cannot_hold_is_named_with_the_fix(server, request) -> None:
    """Numeric overflow in the staging mode: the column and the fix, as the prepared modes
    say it (one rule: sinks.sql._errors.bad_value), and nothing written."""
    url = request.getfixturevalue(f"{server}_url")
    engine = sa.create_engine(url)
    table = f"stg_{next(_COUNTER)}_ov"
    with engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id BIGINT NOT NULL, name TEXT, score NUMERIC(4,2), ts TIMESTAMP)")
    sink = StagingSink(url, table)
    sink.validate(SCHEMA)
    with pytest.raises(SinkError) as exc:  # score 150.0 > 99.99
        sink.commit_all(_write(sink, "s3v", 0, [_batch(300, 2)]))
    assert "column 'score'" in str(exc.value) and "widen the column" in str(exc.value), exc.value
    assert _rows(engine, table) == []
    engine.dispose()


def test_upsert_updates_existing_keys(db) -> None:
    url, engine = db
    table = _table(engine, unique=True)
    sink = StagingSink(url, table, upsert_keys=["id"])
    sink.validate(SCHEMA)
    sink.commit_all(_write(sink, "s4", 0, [_batch(0, 10, name="a")]))
    sink.commit_all(_write(sink, "s4", 1, [_batch(5, 10, name="b"), _batch(14, 2, name="c")]))
    rows = dict(_rows(engine, table))
    assert len(rows) == 16
    assert rows[0] == "a0" and rows[5] == "b5" and rows[15] == "c15"
    assert rows[14] in ("b14", "c14")  # two partitions of one batch: either row, exactly once


def test_upsert_needs_a_unique_constraint(db) -> None:
    url, engine = db
    table = _table(engine)
    with pytest.raises(SchemaMismatchError, match="unique"):
        StagingSink(url, table, upsert_keys=["id"]).validate(SCHEMA)


def test_overwrite_replaces_contents_atomically_and_creates_missing_tables(db) -> None:
    url, engine = db
    table = f"new_{next(_COUNTER)}"
    sink = StagingSink(url, table, mode="overwrite")
    sink.configure_write(SCHEMA, overwrite=True, streaming=False, checkpointed=False)
    sink.validate(SCHEMA)
    sink.commit_all(_write(sink, "eph-00000000aaaaaaaa", 0, [_batch(0, 5)]))
    assert len(_rows(engine, table)) == 5
    sink.validate(SCHEMA)
    handles = _write(sink, "eph-00000000bbbbbbbb", 0, [_batch(100, 3)])
    assert len(_rows(engine, table)) == 5  # old contents until the commit
    sink.commit_all(handles)
    assert [r[0] for r in _rows(engine, table)] == [100, 101, 102]


def test_errorifexists_refuses_an_existing_table(db) -> None:
    url, engine = db
    table = _table(engine)
    with pytest.raises(TargetConfigurationError, match="already exists"):
        StagingSink(url, table, mode="errorifexists").validate(SCHEMA)


def test_nul_bytes_are_refused(db) -> None:
    url, engine = db
    table = _table(engine)
    sink = StagingSink(url, table)
    sink.validate(SCHEMA)
    txn = sink.begin_transaction(TransactionContext("s5", 0, 0, 0, 0))
    bad = pa.RecordBatch.from_pydict({"id": [1], "name": ["a\x00b"], "score": [1.0],
                                      "ts": [dt.datetime(2026, 1, 1, tzinfo=dt.UTC)]}, schema=SCHEMA)
    with pytest.raises(Exception, match="NUL"):
        sink.invoke_batch(txn, bad)
    sink.rollback(txn)
    assert sink.list_prepared("s5") == []


def test_a_staging_table_of_other_types_is_recreated_not_reused(postgres_url) -> None:
    """A staging table left by a DataFrame whose column had another type (same name) would
    convert the staged values (1.5 into an integer column: 2) before the move: it is
    re-created with the new types. (PostgreSQL: overwrite re-creates the target there;
    MariaDB's overwrite keeps the table.)"""
    url = postgres_url
    engine = sa.create_engine(url)
    table = f"stg_retype_{next(_COUNTER)}"
    try:
        for typ, values in ((pa.int64(), [1, 2]), (pa.float64(), [1.5, 2.5])):
            batch = pa.RecordBatch.from_pydict({"id": [1, 2], "x": values},
                                               schema=pa.schema([("id", pa.int64()), ("x", typ)]))
            sink = StagingSink(url, table, mode="overwrite")
            sink.configure_write(batch.schema, overwrite=True, streaming=False, checkpointed=True)
            sink.validate(batch.schema)
            sink.commit_all(_write(sink, f"retype{next(_COUNTER)}", 1, [batch]))
            sink.close()
        with engine.connect() as c:
            assert [tuple(r) for r in c.exec_driver_sql(f"SELECT id, x FROM {table} ORDER BY id")] == [(1, 1.5),
                                                                                                       (2, 2.5)]
    finally:
        with engine.begin() as c:
            c.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        engine.dispose()
