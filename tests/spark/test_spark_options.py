"""Spark's own options through Spark, into every twopc format: what Spark passes a Python
data source writer by itself (``queryName`` from ``.queryName()``, ``path`` from
``start(path)``/``save(path)``, ``checkpointLocation``), and the session's default
checkpoint folder (``spark.sql.streaming.checkpointLocation``) used as Spark uses it.

What Spark 4 passes was read off a probe data source: a named streaming query gets
``{"queryname": ...}`` (plus ``checkpointlocation`` only when the query was given one, and
``path`` from ``start(path)``); a batch ``save(path)`` gets ``{"path": ...}``; partitioning
columns are refused by Spark itself for Python data sources and never reach the writer.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import redis
import sqlalchemy as sa

from twopc import CommitLedger, sinks
from twopc.recovery.demos.demo import INPUT_SCHEMA, create_table, write_input
from twopc.sinks.redis import IncrByOp, mapping_json
from twopc.spark._checkpoint import SESSION_CHECKPOINT_CONF

FORMATS = ("twopc-file", "twopc-jdbc", "twopc-postgres", "twopc-redis")


@pytest.fixture(autouse=True)
def _registered(spark) -> None:
    sinks.register_all(spark)


def _stream(spark, folder: Path, files: int = 2):
    write_input(folder, files=files, rows_per_file=10)
    return spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(str(folder))


def _target(fmt: str, request, tmp_path: Path) -> tuple[dict[str, str], Any]:
    """The options of *fmt* and a function returning how many rows reached the target."""
    if fmt == "twopc-file":
        out = tmp_path / "out"
        return {}, lambda: sum(pq.read_table(p).num_rows for p in out.glob("*.parquet")) if out.exists() else 0
    if fmt in ("twopc-jdbc", "twopc-postgres"):
        url = request.getfixturevalue("postgres_url")
        table = f"opts_{uuid.uuid4().hex[:10]}"
        create_table(url, table)
        engine = sa.create_engine(url)
        request.addfinalizer(engine.dispose)

        def count() -> int:
            with engine.connect() as conn:
                return int(conn.execute(sa.text(f'SELECT count(*) FROM "{table}"')).scalar_one())
        return {"url": url, "dbtable": table}, count
    url = request.getfixturevalue("redis_url")
    tag = uuid.uuid4().hex[:8]
    r = redis.Redis.from_url(url, decode_responses=True)
    request.addfinalizer(r.close)
    return ({"url": url, "hashTag": tag, "mapping": mapping_json([IncrByOp("{{" + tag + "}}:n", 1)])},
            lambda: int(r.get("{" + tag + "}:n") or 0))


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_named_streaming_query_with_a_path_writes_through_every_format(spark, request, tmp_path, fmt: str) -> None:
    options, count = _target(fmt, request, tmp_path)
    ck = tmp_path / "ck"
    q = (_stream(spark, tmp_path / "in").writeStream.format(fmt).options(**options)
         .queryName(f"q_{uuid.uuid4().hex[:8]}").option("checkpointLocation", str(ck))
         .trigger(availableNow=True).start(str(tmp_path / "out")))
    q.awaitTermination()
    assert q.exception() is None
    assert count() == 20
    assert CommitLedger(str(ck)).committed_batches() == [0, 1]


def test_the_session_checkpoint_location_is_used_with_the_query_name(spark, tmp_path) -> None:
    """No checkpointLocation option: Spark keeps the query's checkpoint in
    ``<session default>/<queryName>``, and the ledger lands beside it."""
    default = tmp_path / "checkpoints"
    name = f"orders_{uuid.uuid4().hex[:8]}"
    spark.conf.set(SESSION_CHECKPOINT_CONF, str(default))
    try:
        sinks.register_all(spark)
        for files in (1, 2):  # a restart resumes from the same checkpoint and ledger
            q = (_stream(spark, tmp_path / "in", files=files).writeStream.format("twopc-file")
                 .option("path", str(tmp_path / "out")).queryName(name).trigger(availableNow=True).start())
            q.awaitTermination()
            assert q.exception() is None
    finally:
        spark.conf.unset(SESSION_CHECKPOINT_CONF)
        sinks.register_all(spark)
    assert (default / name / "offsets").is_dir()  # Spark's checkpoint
    assert CommitLedger(str(default / name)).committed_batches() == [0, 1]  # and twopc's ledger, beside it
    assert sum(pq.read_table(p).num_rows for p in (tmp_path / "out").glob("*.parquet")) == 20


def test_the_session_checkpoint_location_set_after_registering_is_read_when_the_query_starts(
        spark, tmp_path) -> None:
    """As Spark reads spark.sql.streaming.checkpointLocation when the query starts, so does
    twopc: setting it after register_all still puts the ledger beside Spark's checkpoint."""
    spark.conf.unset(SESSION_CHECKPOINT_CONF)
    sinks.register_all(spark)
    default = tmp_path / "checkpoints"
    name = f"late_{uuid.uuid4().hex[:8]}"
    spark.conf.set(SESSION_CHECKPOINT_CONF, str(default))
    try:
        q = (_stream(spark, tmp_path / "in").writeStream.format("twopc-file")
             .option("path", str(tmp_path / "out")).queryName(name).trigger(availableNow=True).start())
        q.awaitTermination()
        assert q.exception() is None
    finally:
        spark.conf.unset(SESSION_CHECKPOINT_CONF)
    assert (default / name / "offsets").is_dir()  # Spark's checkpoint
    assert CommitLedger(str(default / name)).committed_batches() == [0, 1]  # and twopc's ledger, beside it
    assert sum(pq.read_table(p).num_rows for p in (tmp_path / "out").glob("*.parquet")) == 20


def test_an_unnamed_query_with_only_the_session_checkpoint_names_the_fix(spark, tmp_path) -> None:
    """Spark puts an unnamed query's checkpoint in a new random folder it does not pass to
    the writer: twopc cannot keep its ledger there, and says what to do."""
    spark.conf.set(SESSION_CHECKPOINT_CONF, str(tmp_path / "checkpoints"))
    try:
        sinks.register_all(spark)
        q = (_stream(spark, tmp_path / "in", files=1).writeStream.format("twopc-file")
             .option("path", str(tmp_path / "out")).trigger(availableNow=True).start())
        with pytest.raises(Exception, match=r"\.queryName"):
            q.awaitTermination()
    finally:
        spark.conf.unset(SESSION_CHECKPOINT_CONF)
        sinks.register_all(spark)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.parquet"))


def test_a_batch_write_keeps_its_ledger_in_s3(spark, s3_server, tmp_path) -> None:
    """checkpointLocation s3a://...: the decisions are S3 objects created with If-None-Match,
    and a rerun of the same txnVersion writes nothing."""
    ck = f"s3a://ckpts/{uuid.uuid4().hex}/job"
    df = spark.range(0, 30, numPartitions=3).selectExpr("id", "concat('p', id) as payload")
    for _ in range(2):
        (df.write.format("twopc-file").mode("append").option("path", str(tmp_path / "out"))
           .option("checkpointLocation", ck).option("txnVersion", "5").save())
    assert sum(pq.read_table(p).num_rows for p in (tmp_path / "out").glob("*.parquet")) == 30
    assert CommitLedger(ck).committed_batches() == [5]


def test_a_scheme_checkpoint_is_refused_through_spark(spark, tmp_path) -> None:
    """A dbfs:/... checkpoint is refused, never taken for a folder named dbfs: in the driver's
    working directory."""
    df = spark.range(0, 3).selectExpr("id", "concat('p', id) as payload")
    with pytest.raises(Exception, match="dbfs: location is never taken for a local folder"):
        (df.write.format("twopc-file").mode("append").option("path", str(tmp_path / "out"))
           .option("checkpointLocation", "dbfs:/checkpoints/job").option("txnVersion", "1").save())
    assert not Path("dbfs:").exists()
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.parquet"))


def test_a_misspelled_dbtable_is_named_through_spark(spark, postgres_url: str, tmp_path) -> None:
    """``.option("dbtabel", ...)``: the error the user sees names the misspelling and the option
    meant, not only the missing ``dbtable``; nothing is written, the password is not shown."""
    table = f"opts_{uuid.uuid4().hex[:10]}"
    create_table(postgres_url, table)
    df = spark.range(0, 3).selectExpr("id", "concat('p', id) as payload")
    with pytest.raises(Exception) as err:  # Spark wraps the planning worker's error in its own
        (df.write.format("twopc-postgres").mode("append").option("url", postgres_url).option("dbtabel", table)
           .option("checkpointLocation", str(tmp_path / "ck")).save())
    text = str(err.value)
    assert "unknown option 'dbtabel': did you mean 'dbtable'?" in text, text[-3000:]
    password = sa.make_url(postgres_url).password
    assert password and password not in text
    engine = sa.create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text(f'SELECT count(*) FROM "{table}"')).scalar_one() == 0
    finally:
        engine.dispose()
