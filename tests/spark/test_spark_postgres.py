"""The PostgreSQL sink through Spark, in-process: batch and streaming writes, and bad
input that must fail with a clear error and nothing written."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa

from twopc import CommitLedger, sinks
from twopc.recovery import verify_postgres_ids
from twopc.recovery.demos.demo import INPUT_SCHEMA, create_table, write_input


@pytest.fixture(scope="module", autouse=True)
def _registered(spark) -> None:
    sinks.register_all(spark)


@pytest.fixture
def table(postgres_url) -> str:
    name = f"events_{uuid.uuid4().hex[:10]}"
    create_table(postgres_url, name)
    return name


def _rows(spark, lo: int, hi: int):
    return spark.range(lo, hi, numPartitions=3).selectExpr(
        "id", "concat('event-', id) as payload", "cast(id as double) * 0.5 as amount")


def _write(df, url: str, table: str, ck, version: int | None = 1, **extra: str) -> None:
    w = (df.write.format("twopc-postgres").mode("append").option("url", url).option("dbtable", table)
         .option("checkpointLocation", str(ck)))
    if version is not None:
        w = w.option("txnVersion", str(version))
    for k, v in extra.items():
        w = w.option(k, v)
    w.save()


def _check(pg_engine, table: str, ids, ck) -> None:
    result = verify_postgres_ids(pg_engine, table, ids, sink_id=CommitLedger(str(ck)).recorded_sink_id())
    assert result.ok, "\n" + result.render()


def test_batch_write_commits_every_row_once_and_a_rerun_writes_nothing(spark, postgres_url, pg_engine, table,
                                                                        tmp_path) -> None:
    _write(_rows(spark, 0, 500), postgres_url, table, tmp_path / "ck", version=7)
    _check(pg_engine, table, range(500), tmp_path / "ck")
    _write(_rows(spark, 0, 500), postgres_url, table, tmp_path / "ck", version=7)
    _check(pg_engine, table, range(500), tmp_path / "ck")
    _write(_rows(spark, 500, 600), postgres_url, table, tmp_path / "ck", version=8)
    _check(pg_engine, table, range(600), tmp_path / "ck")


def test_streaming_write_is_exactly_once(spark, postgres_url, pg_engine, table, tmp_path) -> None:
    ids = write_input(tmp_path / "in", files=3, rows_per_file=30)
    ck = tmp_path / "ck"
    q = (spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
         .writeStream.format("twopc-postgres").option("url", postgres_url).option("dbtable", table)
         .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
    q.awaitTermination()
    _check(pg_engine, table, ids, ck)
    assert CommitLedger(str(ck)).committed_batches() == [0, 1, 2]


def _count(pg_engine, table: str) -> int:
    with pg_engine.connect() as c:
        return c.execute(sa.text(f'SELECT count(*) FROM "{table}"')).scalar_one()


def _no_prepared(pg_engine) -> None:
    with pg_engine.connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'twopc:%' "
                                 "AND database = current_database()")).scalar_one() == 0


def test_missing_table_is_named_and_nothing_is_written(spark, postgres_url, pg_engine, tmp_path) -> None:
    with pytest.raises(Exception, match="no_such_table"):
        _write(_rows(spark, 0, 5), postgres_url, "no_such_table", tmp_path / "ck")
    _no_prepared(pg_engine)


def test_schema_mismatch_is_named_and_nothing_is_written(spark, postgres_url, pg_engine, table, tmp_path) -> None:
    df = spark.range(0, 5).selectExpr("id", "id as payload")  # payload: bigint vs text
    with pytest.raises(Exception, match="payload"):
        _write(df, postgres_url, table, tmp_path / "ck")
    assert _count(pg_engine, table) == 0
    _no_prepared(pg_engine)


def test_wrong_password_never_appears_in_the_error(spark, postgres_url, table, tmp_path) -> None:
    url = sa.make_url(postgres_url).set(password="s3cret-Wrong-pw")
    with pytest.raises(Exception) as info:
        _write(_rows(spark, 0, 5), url.render_as_string(hide_password=False), table, tmp_path / "ck")
    text = str(info.value)
    assert "s3cret-Wrong-pw" not in text
    assert "password" in text.lower() or "authentication" in text.lower()


def test_streaming_without_checkpoint_location_names_the_fix(spark, postgres_url, table, tmp_path) -> None:
    write_input(tmp_path / "in", files=1, rows_per_file=3)
    stream = spark.readStream.schema(INPUT_SCHEMA).json(str(tmp_path / "in"))
    with pytest.raises(Exception, match="checkpointLocation"):
        q = (stream.writeStream.format("twopc-postgres").option("url", postgres_url).option("dbtable", table)
             .trigger(availableNow=True).start())
        q.awaitTermination()


def test_checkpoint_and_ledger_hold_no_credentials(spark, postgres_url, table, tmp_path) -> None:
    password = sa.make_url(postgres_url).password
    assert password
    _write(_rows(spark, 0, 50), postgres_url, table, tmp_path / "ck", version=1)
    for path in (tmp_path / "ck").rglob("*"):
        if path.is_file():
            assert password not in path.read_text(errors="replace"), path


def test_a_failing_partition_aborts_the_whole_batch(spark, postgres_url, pg_engine, table, tmp_path) -> None:
    """Partitions 0 and 1 are fine, partition 2 has a NULL id (the column is NOT NULL): every
    attempt of that task fails, Spark aborts the job, and none of the good partitions' rows
    may become visible."""
    df = spark.range(0, 300, numPartitions=3).selectExpr(
        "case when id = 250 then null else id end as id", "concat('event-', id) as payload",
        "cast(id as double) as amount")
    with pytest.raises(Exception, match="id") as info:
        _write(df, postgres_url, table, tmp_path / "ck", version=1)
    assert "null" in str(info.value).lower()
    assert _count(pg_engine, table) == 0
    _no_prepared(pg_engine)
    assert CommitLedger(str(tmp_path / "ck")).latest_committed() is None
