"""A checkpoint (and its sink id) serves one target: the first write records
what it writes to (``twopc/target.json``: ``twopc.spi.NamedTarget.target_identity``, never a
credential), and a write to another target with that checkpoint is refused before anything
runs, naming both targets and the fix (a batch job to table T2 with T1's checkpoint and
``txnVersion`` must never "succeed" having written nothing). Through Spark: PostgreSQL, Redis and the file
sink, batch and streaming; a checkpoint without a recorded target (older twopc) keeps working."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import redis
from sqlalchemy.engine import make_url

from twopc import CommitLedger, ConfigurationError, sinks
from twopc.sinks.redis import IncrByOp, mapping_json


@pytest.fixture(scope="module", autouse=True)
def _registered(spark) -> None:
    sinks.register_all(spark)


def _df(spark, n: int = 10):
    return spark.range(0, n, numPartitions=2).selectExpr("id", "concat('event-', id) AS payload")


def _refusal(recorded: str, asked: str) -> str:
    return rf"(?s)belongs to a write to \[{recorded}.*this write goes to \[{asked}.*own checkpointLocation"


def test_ledger_records_the_first_target_and_refuses_another(tmp_path) -> None:
    ledger = CommitLedger(str(tmp_path / "ck"))
    ledger.bind_target("sql a", "s1", record=False)  # checking only records nothing
    assert ledger.recorded_target() is None
    ledger.bind_target(None, "s1")  # a sink that cannot tell: nothing recorded or checked
    ledger.bind_target("sql a", "s1")
    ledger.bind_target("sql a", "s1")
    assert ledger.recorded_target() == "sql a"
    with pytest.raises(ConfigurationError, match=r"sink id 's1'.*\[sql a\].*\[sql b\]"):
        ledger.bind_target("sql b", "s1", record=False)
    assert json.loads((tmp_path / "ck" / "twopc" / "target.json").read_text())["target"] == "sql a"


def _pg_writer(df, url: str, table: str, ck: str, version: str = "1"):
    u = make_url(url)
    return (df.write.format("twopc-jdbc").mode("append")
            .option("url", f"jdbc:postgresql://{u.host}:{u.port}/{u.database}").option("dbtable", table)
            .option("user", u.username).option("password", u.password)
            .option("checkpointLocation", ck).option("txnVersion", version))


def test_postgres_batch_write_to_another_table_is_refused(spark, postgres_url, pg_engine, tmp_path) -> None:
    t1, t2 = (f"ct_{uuid.uuid4().hex[:10]}" for _ in range(2))
    with pg_engine.begin() as c:
        for t in (t1, t2):
            c.exec_driver_sql(f"CREATE TABLE {t} (id bigint, payload text)")
    ck = str(tmp_path / "ck")
    _pg_writer(_df(spark), postgres_url, t1, ck).save()
    with pytest.raises(Exception, match=_refusal(f"postgresql .*/{make_url(postgres_url).database} table {t1}",
                                                 f"postgresql .* table {t2}")) as err:
        _pg_writer(_df(spark), postgres_url, t2, ck).save()
    assert str(make_url(postgres_url).password) not in str(err.value)
    with pg_engine.connect() as c:
        counts = [c.exec_driver_sql(f"SELECT count(*) FROM {t}").scalar_one() for t in (t1, t2)]
    assert counts == [10, 0]
    _pg_writer(_df(spark), postgres_url, t1, ck, "2").save()  # the checkpoint's own target still works


def test_checkpoint_without_a_recorded_target_keeps_working(spark, postgres_url, pg_engine, tmp_path) -> None:
    table = f"ct_{uuid.uuid4().hex[:10]}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint, payload text)")
    ck = tmp_path / "ck"
    _pg_writer(_df(spark), postgres_url, table, str(ck)).save()
    (ck / "twopc" / "target.json").unlink()  # as an older twopc left it
    _pg_writer(_df(spark), postgres_url, table, str(ck), "2").save()
    assert f"table {table}" in CommitLedger(str(ck)).recorded_target()  # type: ignore[operator]  # recorded again
    with pg_engine.connect() as c:
        assert c.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one() == 20


def test_postgres_streaming_query_to_another_table_is_refused(spark, postgres_url, pg_engine, tmp_path) -> None:
    t1, t2 = (f"ct_{uuid.uuid4().hex[:10]}" for _ in range(2))
    with pg_engine.begin() as c:
        for t in (t1, t2):
            c.exec_driver_sql(f"CREATE TABLE {t} (id bigint, payload text)")
    inp = tmp_path / "in"
    inp.mkdir()
    spark.range(0, 6).selectExpr("id", "concat('event-', id) AS payload").write.json(str(inp / "a"))
    u = make_url(postgres_url)

    def run(table: str) -> None:
        q = (spark.readStream.schema("id long, payload string").json(str(inp / "a"))
             .writeStream.format("twopc-postgres")
             .option("url", f"jdbc:postgresql://{u.host}:{u.port}/{u.database}").option("dbtable", table)
             .option("user", u.username).option("password", u.password)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        q.awaitTermination()

    run(t1)
    spark.range(6, 9).selectExpr("id", "concat('event-', id) AS payload").write.mode("append").json(str(inp / "a"))
    with pytest.raises(Exception, match=_refusal(f"postgresql .* table {t1}", f"postgresql .* table {t2}")):
        run(t2)
    with pg_engine.connect() as c:
        counts = [c.exec_driver_sql(f"SELECT count(*) FROM {t}").scalar_one() for t in (t1, t2)]
    assert counts == [6, 0]


def test_redis_batch_write_to_other_keys_is_refused(spark, redis_url, tmp_path) -> None:
    tag = uuid.uuid4().hex[:8]
    r = redis.Redis.from_url(redis_url, decode_responses=True)

    def write(key: str) -> None:
        (_df(spark).write.format("twopc-redis").mode("append").option("url", redis_url)
         .option("mapping", mapping_json([IncrByOp("{{" + tag + "}}:" + key, 1)])).option("hashTag", tag)
         .option("checkpointLocation", str(tmp_path / "ck")).option("txnVersion", "1").save())

    try:
        write("a")
        with pytest.raises(Exception, match=_refusal(r"redis .* keys \{\{" + tag + r"\}\}:a",
                                                     r"redis .* keys \{\{" + tag + r"\}\}:b")):
            write("b")
        assert (r.get(f"{{{tag}}}:a"), r.get(f"{{{tag}}}:b")) == ("10", None)
    finally:
        r.delete(f"{{{tag}}}:a", f"{{{tag}}}:b")
        r.close()


def _rows_in(folder: Path) -> int:
    return sum(pq.read_metadata(p).num_rows for p in folder.glob("*.parquet")) if folder.exists() else 0


def test_file_batch_and_streaming_writes_to_another_folder_are_refused(spark, tmp_path) -> None:
    out1, out2 = tmp_path / "out1", tmp_path / "out2"
    ck = str(tmp_path / "ck")

    def batch(out: Path) -> None:
        _df(spark).write.format("twopc-file").mode("append").option("checkpointLocation", ck) \
            .option("txnVersion", "1").save(str(out))

    batch(out1)
    with pytest.raises(Exception, match=_refusal(f"files {out1}", f"files {out2}")):
        batch(out2)
    assert (_rows_in(out1), _rows_in(out2)) == (10, 0)

    inp = tmp_path / "in"
    spark.range(0, 5).selectExpr("id", "concat('event-', id) AS payload").write.json(str(inp))

    def stream(out: Path) -> None:
        (spark.readStream.schema("id long, payload string").json(str(inp)).writeStream.format("twopc-file")
         .option("checkpointLocation", str(tmp_path / "sck")).trigger(availableNow=True).start(str(out))
         .awaitTermination())

    stream(out1 / "s")
    spark.range(5, 8).selectExpr("id", "concat('event-', id) AS payload").write.mode("append").json(str(inp))
    with pytest.raises(Exception, match=_refusal(f"files {out1 / 's'}", f"files {out2 / 's'}")):
        stream(out2 / "s")
    assert (_rows_in(out1 / "s"), _rows_in(out2 / "s")) == (5, 0)


def test_no_credential_is_recorded(tmp_path, postgres_url) -> None:
    from twopc.sinks import PostgresSink

    sink = PostgresSink.from_options({"url": postgres_url, "dbtable": "t"})
    identity = sink.target_identity()
    u = make_url(postgres_url)
    assert u.password and str(u.password) not in identity
    assert identity == f"postgresql {u.host}:{u.port}/{u.database} table t"
