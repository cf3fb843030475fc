"""Two writers with one sinkId (each with its own checkpoint): the second is refused before it
touches anything, because the first one's driver holds the sink id's lease on the server."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa

import sinks
from sinks import MySqlXaSink, PostgresSink
from sinks.sql import PreparedSqlSink
from twopc import TransactionContext


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
