"""``query.stop()`` at random moments of micro-batches into PostgreSQL leaves nothing prepared.

A streaming query (rate source, two partitions, back-to-back micro-batches) writes to
``twopc-postgres`` and to ``twopc-jdbc`` in prepared mode and is stopped at a random moment,
then started again from its checkpoint, many times. A stop lands before a batch, during its
tasks, between its tasks and its commit, or during the commit. After each stop, once twopc
has settled it (Spark's abort of the batch, or, where Spark could not call it, the query
listener :func:`twopc.register` installs: see twopc.spark._stops), none of the query's
transactions is prepared: no stop leaves one for the next start or an operator. At the end
(after a last run that commits a micro-batch before its stop) ``twopc status`` exits 0, and
every id the query committed is in the table exactly once."""

from __future__ import annotations

import logging
import random
import time
import uuid

import pytest
import sqlalchemy as sa
from pyspark.errors import StreamingQueryException
from sqlalchemy.engine import make_url

from twopc import sinks
from twopc.spark._stops import wait_settled
from twopc.spi.lease import default_sink_id

from tests._ops_helpers import twopc_cli

log = logging.getLogger(__name__)


@pytest.fixture(scope="module", autouse=True)
def _registered(spark) -> None:
    sinks.register_all(spark)


def _options(fmt: str, postgres_url: str, table: str) -> dict[str, str]:
    if fmt == "twopc-postgres":
        return {"url": postgres_url, "dbtable": table}
    u = make_url(postgres_url)
    return {"url": f"jdbc:postgresql://{u.host}:{u.port}/{u.database}", "dbtable": table, "user": str(u.username),
            "password": str(u.password), "commitMode": "prepared"}


def _run_until_a_batch_commits(query) -> None:
    """Let *query* run until a micro-batch with rows commits, then stop it."""
    try:
        deadline = time.monotonic() + 300
        while not any(p["numInputRows"] > 0 for p in query.recentProgress):
            assert query.isActive and time.monotonic() < deadline, query.exception() or "no micro-batch committed"
            query.awaitTermination(1)
    finally:
        query.stop()


@pytest.mark.chaos  # minutes: a query start and stop per round
@pytest.mark.parametrize(("fmt", "stops"), [("twopc-postgres", 50), ("twopc-jdbc", 15)])
def test_random_stops_leave_nothing_prepared(spark, postgres_url, pg_engine, tmp_path, fmt: str, stops: int) -> None:
    table = f"stop_{uuid.uuid4().hex[:10]}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint NOT NULL, payload text)")
    options = _options(fmt, postgres_url, table)
    ck = str(tmp_path / "ck")
    rng = random.Random(f"{fmt}-stops")

    def prepared() -> list[str]:
        with pg_engine.connect() as c:
            return list(c.execute(sa.text("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE :p"),
                                  {"p": f"twopc:{default_sink_id(ck)}:%"}).scalars())

    left: list[tuple[int, list[str]]] = []
    at_return = 0
    for i in range(stops):
        stream = (spark.readStream.format("rate").option("rowsPerSecond", 200).option("numPartitions", 2).load()
                  .selectExpr("value AS id", "concat('e-', value) AS payload"))
        query = (stream.writeStream.format(fmt).options(**options).option("checkpointLocation", ck)
                 .trigger(processingTime="0 seconds").start())
        time.sleep(rng.uniform(0.2, 3.0))
        query.stop()
        at_return += bool(prepared())  # what Spark's abort settled already; the listener does the rest
        assert wait_settled(spark, str(query.runId), timeout=300), f"stop {i}: twopc did not settle the stop"
        if still := prepared():
            left.append((i, still))
    log.info("%s: %s of %s stops left a prepared transaction when stop() returned, for the listener", fmt,
             at_return, stops)
    assert left == [], f"{len(left)} of {stops} stops left prepared transactions: {left}"

    # A last run commits a micro-batch before it stops. On a loaded machine every random stop may
    # come before the first micro-batch of its start commits; twopc status then rightly calls the
    # query stuck (a batch whose runs keep ending without a commit), and exits 1 for that alone.
    query = (stream.writeStream.format(fmt).options(**options).option("checkpointLocation", ck)
             .trigger(processingTime="0 seconds").start())
    _run_until_a_batch_commits(query)
    assert wait_settled(spark, str(query.runId), timeout=300)
    assert prepared() == []

    status = twopc_cli("status", "--checkpoint", ck, "--format", fmt, options=options)
    assert status.returncode == 0, status.stdout + status.stderr
    with pg_engine.connect() as c:
        count, distinct, top = c.exec_driver_sql(f"SELECT count(*), count(DISTINCT id), max(id) FROM {table}").one()
    assert count == distinct and (top is None or top + 1 == count), (count, distinct, top)


def _interrupted_first_write(ck) -> list:
    """What a stop during a query's first offset write leaves: Spark's temporary files, no batch."""
    left = []
    for log_name in ("offsets", "commits"):
        (folder := ck / log_name).mkdir(parents=True)
        temp = f".0.{uuid.uuid4()}.tmp"
        (folder / temp).write_text("v1\n")
        (folder / f".{temp}.crc").write_bytes(b"")
        left += [folder / temp, folder / f".{temp}.crc"]
    return left


def test_a_stop_during_the_first_offset_write_does_not_keep_the_query_from_starting(
        spark, postgres_url, pg_engine, tmp_path) -> None:
    table = f"stop_{uuid.uuid4().hex[:10]}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint NOT NULL, payload text)")
    ck = tmp_path / "ck"
    left = _interrupted_first_write(ck)
    stream = (spark.readStream.format("rate").option("rowsPerSecond", 100).load()
              .selectExpr("value AS id", "concat('e-', value) AS payload"))
    query = (stream.writeStream.format("twopc-postgres").options(url=postgres_url, dbtable=table)
             .option("checkpointLocation", str(ck)).trigger(processingTime="0 seconds").start())
    _run_until_a_batch_commits(query)
    assert not any(p.exists() for p in left)


def test_a_file_of_another_kind_in_an_empty_offset_log_is_left_for_spark_to_refuse(spark, postgres_url,
                                                                                     tmp_path) -> None:
    ck = tmp_path / "ck"
    (ck / "offsets").mkdir(parents=True)
    (ck / "offsets" / "notes.txt").write_text("someone else's\n")
    query = (spark.readStream.format("rate").load().writeStream.format("twopc-postgres")
             .options(url=postgres_url, dbtable="never_written").option("checkpointLocation", str(ck)).start())
    try:
        with pytest.raises(StreamingQueryException, match="STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY"):
            query.awaitTermination(300)
    finally:
        query.stop()
    assert (ck / "offsets" / "notes.txt").exists()
