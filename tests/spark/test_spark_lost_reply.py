"""A lost COMMIT PREPARED reply through Spark: faultinject.FaultProxy sits between Spark
(driver and executors) and PostgreSQL and swallows every reply to COMMIT PREPARED.

The write fails within its configured bound (socketTimeout, commitRetries) instead of
hanging, the exception the user catches carries twopc's message (which names the server,
the batch and the way out, not Spark's "Writing job failed" that a raising abort would
put in its place), and once the network heals the next start finishes the decided batch: each id
exactly once, no prepared transaction left."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from twopc import CommitLedger, sinks
from twopc.faultinject import FaultProxy
from twopc.recovery import verify_postgres_ids
from twopc.recovery.demos.demo import INPUT_SCHEMA, create_table, write_input
from twopc.spi.operations import BatchState

HANG = 300.0  # far above the configured bound: only a write that never returns reaches it
#: waits small enough for a test: a reply gets 2 s, a commit one retry after 0.1 s
FAST = {"socketTimeout": "2s", "lockTimeout": "1s", "connectTimeout": "2s", "commitRetries": "1",
        "commitRetryBackoff": "0.1"}
TWOPC_SAYS = ("is decided, but its commit to PostgreSQL", "twopc recover", "--format twopc-postgres",
              "next start of the query")


@pytest.fixture(scope="module", autouse=True)
def _registered(spark: Any) -> None:
    sinks.register_all(spark)


@pytest.fixture
def proxied(postgres_url: str) -> Iterator[tuple[FaultProxy, str]]:
    u = sa.make_url(postgres_url)
    with FaultProxy(u.host or "127.0.0.1", u.port or 5432) as proxy:
        yield proxy, u.set(host=proxy.listen_host, port=proxy.port).render_as_string(hide_password=False)


@pytest.fixture
def table(postgres_url: str) -> str:
    name = f"events_{uuid.uuid4().hex[:10]}"
    create_table(postgres_url, name)
    return name


def _error_of(spark: Any, fn: Callable[[], object]) -> BaseException | None:
    """The exception *fn* raised (None if it returned); fails when it hangs."""
    out: list[BaseException | None] = []

    def run() -> None:
        # Spark finds Python data sources through the JVM thread's active session, which a
        # new thread lacks ([DATA_SOURCE_NOT_FOUND] for a streaming start otherwise)
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        try:
            fn()
            out.append(None)
        except BaseException as exc:  # noqa: BLE001 - the test inspects what the user would catch
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(HANG)
    assert not t.is_alive(), "the write hung: a lost COMMIT PREPARED reply was never bounded"
    return out[0]


def _assert_twopc_message(exc: BaseException | None, password: str | None) -> None:
    assert exc is not None, "the write succeeded although every commit reply was lost"
    text = str(exc)
    for words in TWOPC_SAYS:
        assert words in text, f"twopc's message is missing from what the user caught:\n{text[:2000]}"
    assert "Writing job failed" not in text
    assert password is None or password not in text


def test_streaming_query_fails_with_twopcs_message_and_the_restart_finishes_the_batch(
        spark: Any, postgres_url: str, pg_engine: sa.Engine, proxied: tuple[FaultProxy, str], table: str,
        tmp_path: Path) -> None:
    proxy, url = proxied
    ids = write_input(tmp_path / "in", files=2, rows_per_file=20)
    ck = tmp_path / "ck"

    # No retry: a retry first asks the server which ids are still prepared (it does not send COMMIT
    # PREPARED again), finds this one-transaction batch committed and succeeds
    # (tests/chaos/test_lost_reply.py); here the first lost reply must fail the query.
    opts = {**FAST, "commitRetries": "0"}

    def run_query() -> None:
        q = (spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
             .writeStream.format("twopc-postgres").option("url", url).option("dbtable", table)
             .options(**opts).option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
        q.awaitTermination()

    proxy.swallow_reply(b"COMMIT PREPARED", times=None)
    _assert_twopc_message(_error_of(spark, run_query), sa.make_url(postgres_url).password)
    assert proxy.swallowed >= 1
    # decided, never rolled back: left for the next start, or already finished by the abort that
    # Spark runs after the failure (its recovery asks the server which ids are still prepared)
    assert CommitLedger(str(ck)).state(0) in (BatchState.DECIDED, BatchState.COMMITTED)

    proxy.heal()
    assert _error_of(spark, run_query) is None
    result = verify_postgres_ids(pg_engine, table, ids, sink_id=CommitLedger(str(ck)).recorded_sink_id())
    assert result.ok, "\n" + result.render()


def test_batch_write_fails_with_twopcs_message_and_a_rerun_finishes_it(
        spark: Any, postgres_url: str, pg_engine: sa.Engine, proxied: tuple[FaultProxy, str], table: str,
        tmp_path: Path) -> None:
    proxy, url = proxied
    ck = tmp_path / "ck"

    def write() -> None:
        (spark.range(0, 60, numPartitions=3).selectExpr("id", "concat('event-', id) as payload",
                                                         "cast(id as double) * 0.5 as amount")
         .write.format("twopc-postgres").mode("append").option("url", url).option("dbtable", table)
         .options(**FAST).option("checkpointLocation", str(ck)).option("txnVersion", "1").save())

    proxy.swallow_reply(b"COMMIT PREPARED", times=None)
    _assert_twopc_message(_error_of(spark, write), sa.make_url(postgres_url).password)
    proxy.heal()
    assert _error_of(spark, write) is None  # the rerun's plan-time recovery finishes version 1, then writes nothing
    result = verify_postgres_ids(pg_engine, table, range(60), sink_id=CommitLedger(str(ck)).recorded_sink_id())
    assert result.ok, "\n" + result.render()
