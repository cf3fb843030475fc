"""Two writers with one sinkId (each with its own checkpoint): the second is refused before it
touches anything, because the first one's driver holds the sink id's lease on the server (SQL),
or because the target records the first one's checkpoint as the sink id's owner (Redis, files)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis
import sqlalchemy as sa

from twopc import TransactionContext, sinks
from twopc.sinks import FileSink, MySqlXaSink, PostgresSink
from twopc.sinks.redis import RedisSink, RPushOp, mapping_json
from twopc.sinks.sql import PreparedSqlSink
from twopc.spi.lease import checkpoint_label


@pytest.fixture(scope="module", autouse=True)
def _registered(spark) -> None:
    sinks.register_all(spark)


@pytest.mark.parametrize("server", ["postgres", "mariadb"])
def test_a_second_writer_with_the_same_sink_id_is_refused(server, request, spark, tmp_path) -> None:
    url = request.getfixturevalue(f"{server}_url")
    engine = sa.create_engine(url)
    table, sink_id = f"sl_{uuid.uuid4().hex[:10]}", f"orders-{uuid.uuid4().hex[:6]}"
    with engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint NOT NULL, payload text)"
                          + (" ENGINE=InnoDB" if server == "mariadb" else ""))
    # the first writer, mid-batch: its driver holds the lease, a task left a prepared transaction
    first: PreparedSqlSink[Any, Any] = (PostgresSink if server == "postgres" else MySqlXaSink)(url, table)
    first.validate(pa.schema([("id", pa.int64()), ("payload", pa.string())]))
    backend = first.target_ledger()
    lease = backend.acquire(sink_id)
    txn = first.begin_transaction(TransactionContext(sink_id, 0, 0, 1, 0))
    first.invoke(txn, {"id": 1, "payload": "first"})
    handle = first.pre_commit(txn)

    def second() -> None:
        (spark.range(100, 110, numPartitions=2).selectExpr("id", "concat('p', id) as payload")
           .write.format("twopc-jdbc").mode("append").option("url", url).option("dbtable", table)
           .option("checkpointLocation", str(tmp_path / "second")).option("sinkId", sink_id)
           .option("txnVersion", "1").save())

    with pytest.raises(Exception, match=rf"another writer with sink id '{sink_id}' is running.*own sinkId") as info:
        second()
    assert "ConcurrentWriterError" in str(info.value) or "ConcurrentWriterError" in repr(info.value)
    assert [h.txn_id for h in first.list_prepared(sink_id)] == [handle.txn_id]  # untouched
    with engine.connect() as c:
        assert c.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one() == 0

    first.commit(handle)  # the first writer finishes and goes away
    backend.release(lease)
    deadline = time.monotonic() + 30
    while backend.holds(lease) and time.monotonic() < deadline:
        time.sleep(0.1)
    second()  # now the sink id is free
    with engine.connect() as c:
        assert sorted(r[0] for r in c.exec_driver_sql(f"SELECT id FROM {table}")) == [1, *range(100, 110)]
    first.close()
    engine.dispose()


# -- sinks without a lease: the owner record ------------------------------------------------------
class _Writer:
    """A twopc-redis or twopc-file batch write of ids *lo*..*lo+9* with one sinkId, and what the
    target holds."""

    def __init__(self, kind: str, spark: Any, tmp_path: Any, redis_url: str) -> None:
        self.kind, self.spark, self.tmp = kind, spark, tmp_path
        self.sink_id, self.tag = f"orders-{uuid.uuid4().hex[:6]}", f"o{uuid.uuid4().hex[:8]}"
        self.url, self.out = redis_url, tmp_path / "out"
        self.sink: Any = (RedisSink(redis_url, [RPushOp("{{" + self.tag + "}}:ids", "{id}")], hash_tag=self.tag)
                          if kind == "redis" else FileSink(str(self.out)))

    def write(self, checkpoint: str, lo: int, version: int) -> None:
        w = (self.spark.range(lo, lo + 10, numPartitions=2).write.format(f"twopc-{self.kind}").mode("append")
             .option("checkpointLocation", str(self.tmp / checkpoint)).option("sinkId", self.sink_id)
             .option("txnVersion", str(version)))
        if self.kind == "redis":
            w.option("url", self.url).option("hashTag", self.tag).option(
                "mapping", mapping_json([RPushOp("{{" + self.tag + "}}:ids", "{id}")])).save()
        else:
            w.save(str(self.out))

    def ids(self) -> list[int]:
        if self.kind == "redis":
            with redis.Redis.from_url(self.url, decode_responses=True) as r:
                return sorted(int(x) for x in r.lrange("{" + self.tag + "}:ids", 0, -1))
        return sorted(pq.read_table(str(self.out), columns=["id"]).column("id").to_pylist())


@pytest.mark.parametrize("kind", ["redis", "file"])
def test_a_second_query_with_the_same_sink_id_is_refused_by_the_owner_record(
        kind: str, spark: Any, tmp_path: Any, redis_url: str) -> None:
    """twopc-redis and twopc-file hold no lease: the first query records its checkpoint as the
    sink id's owner in the target, and a query with another checkpoint is refused before its
    recovery could roll back the first one's prepared transaction as an orphan."""
    w = _Writer(kind, spark, tmp_path, redis_url)
    w.write("first", 0, 1)  # records "first" as the owner
    w.write("first", 10, 2)  # the owner itself goes on
    w.sink.validate(pa.schema([("id", pa.int64())]))
    txn = w.sink.begin_transaction(TransactionContext(w.sink_id, 7, 0, 1, 0))  # the first query, mid-batch
    w.sink.invoke_batch(txn, pa.record_batch({"id": pa.array([99], pa.int64())}))
    handle = w.sink.pre_commit(txn)

    with pytest.raises(Exception, match=rf"sink id '{w.sink_id}' on .* belongs to the query whose checkpoint is "
                                        rf"{tmp_path / 'first'}, and this write's checkpoint is "
                                        rf"{tmp_path / 'second'}.*own sinkId.*delete its record") as info:
        w.write("second", 100, 1)
    assert "ConcurrentWriterError" in str(info.value)
    assert [h.txn_id for h in w.sink.list_prepared(w.sink_id)] == [handle.txn_id]  # untouched
    assert w.ids() == list(range(20))  # the second query wrote nothing

    w.sink.commit(handle)  # the first query finishes its batch and is retired: its record goes, as the error says
    remove = str(info.value).split("delete its record: ", 1)[1].splitlines()[0].strip()
    if kind == "redis":
        with redis.Redis.from_url(redis_url) as r:
            assert r.delete(remove.split("DEL ", 1)[1].strip("'")) == 1
    else:
        assert remove.startswith("rm '")
        Path(remove[4:-1]).unlink()
    w.write("second", 100, 1)
    assert w.ids() == [*range(20), 99, *range(100, 110)]


def test_a_checkpoint_label_never_shows_user_info() -> None:
    assert checkpoint_label("s3a://AKIA:pa%2Fss@bucket/ck/") == "s3a://***@bucket/ck"
    assert checkpoint_label("/data/ck/") == "/data/ck"
