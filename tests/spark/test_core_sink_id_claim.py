"""One writer per sink id holds for every way of writing, not only through Spark: a writer driven
through the core API (``CommitLedger`` + a sink + ``CommitCoordinator``) claims its sink id when
its coordinator is built (a SQL sink's lease on the server, or the owner record of a sink
without one), so a second writer with the same sink id and another checkpoint (a Spark query,
or the core API) is refused before its recovery could roll the first one's prepared transaction
back as an orphan, and the first writer's commit succeeds. Against the real PostgreSQL and Redis."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pyarrow as pa
import pytest
import redis
import sqlalchemy as sa

from twopc import CommitCoordinator, CommitLedger, RecoveryCoordinator, TransactionContext, TransactionHandle, sinks
from twopc.sinks import MySqlXaSink, PostgresSink
from twopc.sinks.redis import RedisSink, RPushOp
from twopc.spi import ConcurrentWriterError

SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string())])


def _table(engine: sa.Engine) -> str:
    table = f"cc_{uuid.uuid4().hex[:10]}"
    with engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint NOT NULL, payload text)")
    return table


def _prepare(sink: Any, sink_id: str, batch: int, ids: list[int]) -> TransactionHandle:
    """One task attempt of the core-API writer: begin, load, prepare."""
    txn = sink.begin_transaction(TransactionContext(sink_id, batch, 0, 1, 0))
    sink.invoke_batch(txn, pa.record_batch({"id": pa.array(ids, pa.int64()),
                                            "payload": pa.array([f"p{i}" for i in ids], pa.string())}))
    return sink.pre_commit(txn)


def _wait_free(sink: PostgresSink, sink_id: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with sink.target_ledger().take(sink_id) as free:
            if free:
                return
        time.sleep(0.05)
    raise AssertionError(f"the lease of {sink_id} was not released")


def test_a_spark_query_is_refused_while_a_core_api_writer_holds_the_sink_id(
        spark, postgres_url, pg_engine, tmp_path) -> None:
    sinks.register_all(spark)
    table, sink_id = _table(pg_engine), f"orders-{uuid.uuid4().hex[:6]}"
    sink = PostgresSink(postgres_url, table)
    sink.validate(SCHEMA)
    first = CommitCoordinator(sink, CommitLedger(str(tmp_path / "first")), sink_id)  # claims the sink id
    handle = _prepare(sink, sink_id, 0, [1, 2])

    def second() -> None:
        (spark.range(100, 104, numPartitions=2).selectExpr("id", "concat('p', id) AS payload")
         .write.format("twopc-postgres").mode("append").option("url", postgres_url).option("dbtable", table)
         .option("checkpointLocation", str(tmp_path / "second")).option("sinkId", sink_id)
         .option("txnVersion", "1").save())

    with pytest.raises(Exception, match=rf"another writer with sink id '{sink_id}' is running") as info:
        second()
    assert "ConcurrentWriterError" in str(info.value)
    assert [h.txn_id for h in sink.list_prepared(sink_id)] == [handle.txn_id]  # untouched
    assert first.commit_batch(0, [handle]).action == "committed"
    first.close()  # the first writer is done: its lease goes (its holder's session ends)
    _wait_free(sink, sink_id)
    second()
    with pg_engine.connect() as c:
        assert sorted(r[0] for r in c.exec_driver_sql(f"SELECT id FROM {table}")) == [1, 2, 100, 101, 102, 103]
    sink.close()


@pytest.mark.parametrize("kind", ["postgres", "redis"])
def test_a_second_core_api_writer_with_another_checkpoint_is_refused(
        kind, request, tmp_path) -> None:
    """PostgreSQL: the lease (held by this process for the first writer's checkpoint); Redis: the
    owner record naming the first writer's checkpoint."""
    sink_id = f"orders-{uuid.uuid4().hex[:6]}"
    if kind == "postgres":
        engine = request.getfixturevalue("pg_engine")
        table = _table(engine)
        url = request.getfixturevalue("postgres_url")

        def new_sink() -> Any:
            return PostgresSink(url, table)

        def ids() -> list[int]:
            with engine.connect() as c:
                return sorted(r[0] for r in c.exec_driver_sql(f"SELECT id FROM {table}"))
    else:
        url, tag = request.getfixturevalue("redis_url"), f"o{uuid.uuid4().hex[:8]}"

        def new_sink() -> Any:
            return RedisSink(url, [RPushOp("{{" + tag + "}}:ids", "{id}")], hash_tag=tag)

        def ids() -> list[int]:
            with redis.Redis.from_url(url, decode_responses=True) as r:
                return sorted(int(x) for x in r.lrange("{" + tag + "}:ids", 0, -1))

    sink = new_sink()
    sink.validate(SCHEMA)
    first = CommitCoordinator(sink, CommitLedger(str(tmp_path / "first")), sink_id)
    handle = _prepare(sink, sink_id, 0, [1, 2])

    other = new_sink()
    with pytest.raises(ConcurrentWriterError, match=rf"sink id '{sink_id}'.*{tmp_path / 'first'}"):
        RecoveryCoordinator(other, CommitLedger(str(tmp_path / "second")), sink_id=sink_id).run()
    with pytest.raises(ConcurrentWriterError, match=rf"sink id '{sink_id}'"):
        CommitCoordinator(other, CommitLedger(str(tmp_path / "second")), sink_id)
    assert [h.txn_id for h in sink.list_prepared(sink_id)] == [handle.txn_id]  # untouched

    again = CommitCoordinator(new_sink(), CommitLedger(str(tmp_path / "first")), sink_id)  # the same checkpoint
    assert first.commit_batch(0, [handle]).action == "committed"
    assert ids() == [1, 2]
    for coordinator in (first, again):
        coordinator.close()
    sink.close()
    other.close()


@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
def test_a_core_api_writer_that_prepared_before_building_its_coordinator_is_not_swept(
        kind, spark, request, tmp_path) -> None:
    """The first writer prepares before it builds its coordinator: its first prepare took the sink
    id's lease for the process, so the Spark write with the same sink id is refused before its
    recovery could roll the prepared transaction back, and the first writer's coordinator (built
    after) adopts the lease and commits. PostgreSQL (twopc-postgres) and MariaDB (XA, twopc-jdbc)."""
    sinks.register_all(spark)
    sink_id = f"orders-{uuid.uuid4().hex[:6]}"
    if kind == "postgres":
        url = request.getfixturevalue("postgres_url")
        engine = request.getfixturevalue("pg_engine")
        table = _table(engine)
        sink: Any = PostgresSink(url, table)
        fmt, spark_options = "twopc-postgres", {"url": url}
    else:
        url = request.getfixturevalue("mariadb_url")
        engine = sa.create_engine(url)
        table = f"cc_{uuid.uuid4().hex[:10]}"
        with engine.begin() as c:
            c.exec_driver_sql(f"CREATE TABLE {table} (id BIGINT NOT NULL, payload TEXT) ENGINE=InnoDB")
        sink = MySqlXaSink(url, table)
        u = sa.engine.make_url(url)
        fmt, spark_options = "twopc-jdbc", {"url": f"jdbc:mariadb://{u.host}:{u.port}/{u.database}",
                                            "user": u.username or "", "password": u.password or "",
                                            "commitMode": "prepared"}
    ledger = CommitLedger(str(tmp_path / "first"))
    sink.validate(SCHEMA)
    handle = _prepare(sink, sink_id, 0, [1, 2])  # no coordinator yet

    with pytest.raises(Exception, match=rf"another writer with sink id '{sink_id}' is running"):
        (spark.range(100, 104, numPartitions=2).selectExpr("id", "concat('p', id) AS payload")
         .write.format(fmt).mode("append").options(**spark_options).option("dbtable", table)
         .option("checkpointLocation", str(tmp_path / "second")).option("sinkId", sink_id)
         .option("txnVersion", "1").save())
    assert [h.txn_id for h in sink.list_prepared(sink_id)] == [handle.txn_id]  # untouched

    first = CommitCoordinator(sink, ledger, sink_id)  # adopts the lease its prepare took
    assert first.commit_batch(0, [handle]).action == "committed"
    with engine.connect() as c:
        assert sorted(r[0] for r in c.exec_driver_sql(f"SELECT id FROM {table}")) == [1, 2]
    first.close()
    sink.close()
