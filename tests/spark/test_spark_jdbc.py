"""``twopc-jdbc`` through Spark as a drop-in for ``format("jdbc")``: Spark's options, both
commit modes, the save modes, atomic overwrite, table creation, upsert, SQLite, and bad
input that must fail clearly with nothing written."""

from __future__ import annotations

import json
import logging
import urllib.parse
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from twopc import sinks
from twopc.recovery.demos.demo import write_input
from twopc.sinks import StagingSink, write_jdbc

from tests._sql_helpers import logged_markers


@pytest.fixture(scope="module", autouse=True)
def _registered(spark) -> None:
    sinks.register_all(spark)


def _jdbc_url(sa_url: str, *, password_in_url: bool = True) -> str:
    u = make_url(sa_url)
    q = f"?user={u.username}"
    if password_in_url:
        q += f"&password={urllib.parse.quote(u.password or '', safe='')}"
    return f"jdbc:postgresql://{u.host}:{u.port}/{u.database}{q}"


def _df(spark, lo: int, hi: int, parts: int = 3):
    return spark.range(lo, hi, numPartitions=parts).selectExpr(
        "id", "concat('event-', id) as payload", "cast(id as double) * 0.5 as amount",
        "timestamp_seconds(1767225600 + id) as ts")


def _name() -> str:
    return f"jd_{uuid.uuid4().hex[:10]}"


def _create(engine: sa.Engine, table: str, *, key: bool = False) -> None:
    with engine.begin() as c:
        c.exec_driver_sql(
            f'CREATE TABLE {table} (id bigint {"PRIMARY KEY" if key else "NOT NULL"}, payload text, '
            f"amount double precision, ts timestamptz)")


def _ids(engine: sa.Engine, table: str) -> list[int]:
    with engine.connect() as c:
        return [r[0] for r in c.exec_driver_sql(f"SELECT id FROM {table} ORDER BY id")]


def _leftovers(engine: sa.Engine, table: str) -> tuple[int, int]:
    """(prepared transactions of twopc on the server, rows in *table*'s staging table).
    Other tests' prepared transactions are resolved before they end; staging tables are
    per target, so only this test's counts."""
    stage = StagingSink(engine.url, table).stage.name
    with engine.connect() as c:
        prepared = c.execute(sa.text("SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'twopc:%'")).scalar_one()
        staged = c.execute(sa.text(f'SELECT count(*) FROM "{stage}"')).scalar_one() \
            if sa.inspect(c).has_table(stage) else 0
    return int(prepared), int(staged)


def _spark_jdbc_writer(df, url: str, table: str, mode: str = "append"):
    """What a user of Spark's writer has: format("jdbc") options, then the format swap."""
    u = make_url(url)
    return (df.write.format("twopc-jdbc").mode(mode)
            .option("url", f"jdbc:postgresql://{u.host}:{u.port}/{u.database}")
            .option("dbtable", table).option("user", u.username).option("password", u.password)
            .option("driver", "org.postgresql.Driver").option("batchsize", "10000")
            .option("isolationLevel", "READ_COMMITTED"))


def test_drop_in_batch_append_without_checkpoint_uses_prepared_mode_once(spark, postgres_url, pg_engine) -> None:
    table = _name()
    _create(pg_engine, table)
    log = logged_markers(pg_engine, f"mk_{table}")
    _spark_jdbc_writer(_df(spark, 0, 300), postgres_url, table).option("markerTable", f"mk_{table}").save()
    assert _ids(pg_engine, table) == list(range(300))
    assert _leftovers(pg_engine, table) == (0, 0)
    with pg_engine.connect() as c:
        # prepared, not staged: a marker row per prepared transaction, purged once the write settled
        assert c.exec_driver_sql(f"SELECT count(*) FROM {log}").scalar_one() == 3
        assert c.exec_driver_sql(f"SELECT count(*) FROM mk_{table}").scalar_one() == 0


def test_batch_append_with_checkpoint_uses_prepared_mode(spark, postgres_url, pg_engine, tmp_path) -> None:
    table = _name()
    _create(pg_engine, table)
    w = _spark_jdbc_writer(_df(spark, 0, 200), postgres_url, table).option(
        "checkpointLocation", str(tmp_path / "ck")).option("txnVersion", "1")
    w.save()
    w.save()  # the same txnVersion again: writes nothing
    assert _ids(pg_engine, table) == list(range(200))
    kinds = {h["kind"] for d in (tmp_path / "ck" / "twopc" / "decisions").glob("*.json")
             for h in json.loads(d.read_text())["handles"]}
    assert kinds == {"twopc.postgres"}  # PREPARE TRANSACTION, not the staging table
    assert _leftovers(pg_engine, table) == (0, 0)


def test_commit_mode_prepared_refuses_writes_that_need_staging(spark, postgres_url, pg_engine) -> None:
    table = _name()
    _create(pg_engine, table)
    with pytest.raises(Exception, match="commitMode=prepared cannot serve this write: save mode overwrite"):
        _spark_jdbc_writer(_df(spark, 0, 10), postgres_url, table, mode="overwrite").option(
            "commitMode", "prepared").save()
    assert _ids(pg_engine, table) == []


def test_overwrite_is_atomic_and_a_failed_overwrite_keeps_the_old_rows(spark, postgres_url, pg_engine) -> None:
    table = _name()
    _create(pg_engine, table)
    _spark_jdbc_writer(_df(spark, 0, 50), postgres_url, table).save()
    _spark_jdbc_writer(_df(spark, 1000, 1020), postgres_url, table, mode="overwrite").option("truncate", "true").save()
    assert _ids(pg_engine, table) == list(range(1000, 1020))
    # a NULL id violates NOT NULL: the overwrite must fail and keep the previous contents
    bad = _df(spark, 0, 30).selectExpr("CASE WHEN id = 17 THEN NULL ELSE id END AS id", "payload", "amount", "ts")
    with pytest.raises(Exception, match=r"(?i)not.null|null value"):
        _spark_jdbc_writer(bad, postgres_url, table, mode="overwrite").option("truncate", "true").save()
    assert _ids(pg_engine, table) == list(range(1000, 1020))
    assert _leftovers(pg_engine, table) == (0, 0)


def test_overwrite_without_truncate_recreates_the_table_from_the_dataframe(spark, postgres_url, pg_engine) -> None:
    table = _name()
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id int, old_column text)")
        c.exec_driver_sql(f"INSERT INTO {table} VALUES (1, 'x')")
    _spark_jdbc_writer(_df(spark, 5, 8), postgres_url, table, mode="overwrite").save()
    cols = [c["name"] for c in sa.inspect(pg_engine).get_columns(table)]
    assert cols == ["id", "payload", "amount", "ts"]
    assert _ids(pg_engine, table) == [5, 6, 7]


def test_missing_table_is_created_with_spark_type_options(spark, postgres_url, pg_engine) -> None:
    table = _name()
    (_spark_jdbc_writer(_df(spark, 0, 10), postgres_url, table)
     .option("createTableColumnTypes", "payload VARCHAR(64), amount NUMERIC(12,2)")
     .option("createTableOptions", "WITH (fillfactor = 90)").save())
    with pg_engine.connect() as c:
        types = dict(c.exec_driver_sql(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s", (table,)).all())
        options = c.exec_driver_sql("SELECT reloptions FROM pg_class WHERE relname = %s", (table,)).scalar_one()
    assert types == {"id": "bigint", "payload": "character varying", "amount": "numeric",
                     "ts": "timestamp with time zone"}
    assert options == ["fillfactor=90"]
    assert _ids(pg_engine, table) == list(range(10))


def test_write_jdbc_without_a_mode_behaves_like_sparks_default_errorifexists(spark, postgres_url, pg_engine) -> None:
    """What ``df.write.format(...)`` without ``.mode()`` cannot do for a Python data source
    (Spark refuses ErrorIfExists before the source runs), write_jdbc does: a missing table is
    created and written, an existing one is refused naming it and the fix, nothing written."""
    table, other = _name(), _name()
    u = make_url(postgres_url)
    assert u.username is not None and u.password is not None
    props = {"user": u.username, "password": u.password}
    url = _jdbc_url(postgres_url, password_in_url=False)
    write_jdbc(_df(spark, 0, 5), url, table, properties=props)  # default mode errorifexists: creates it
    with pytest.raises(Exception) as err:
        write_jdbc(_df(spark, 5, 10), url, table, properties=props)
    for words in (f"{table} already exists and the save mode is errorifexists", "nothing was written",
                  'twopc.write_jdbc(..., mode="append")'):
        assert words in str(err.value)
    assert _ids(pg_engine, table) == list(range(5)) and _leftovers(pg_engine, table) == (0, 0)
    write_jdbc(_df(spark, 5, 10), url, table, mode="ignore", properties=props)  # exists: writes nothing
    write_jdbc(_df(spark, 0, 3), url, other, mode="ignore", properties=props)  # missing: created and written
    write_jdbc(_df(spark, 5, 10), url, table, mode="append", properties=props)
    assert _ids(pg_engine, table) == list(range(10)) and _ids(pg_engine, other) == list(range(3))


def test_upsert_reprocessing_with_changed_values_stays_correct(spark, postgres_url, pg_engine) -> None:
    table = _name()
    _create(pg_engine, table, key=True)
    _spark_jdbc_writer(_df(spark, 0, 20), postgres_url, table).option("upsertKeys", "id").save()
    changed = _df(spark, 10, 30).selectExpr("id", "'changed' as payload", "amount", "ts")
    _spark_jdbc_writer(changed, postgres_url, table).option("upsertKeys", "id").save()
    with pg_engine.connect() as c:
        rows = dict(c.exec_driver_sql(f"SELECT id, payload FROM {table}").all())
    assert sorted(rows) == list(range(30))
    assert all(rows[i] == f"event-{i}" for i in range(10))
    assert all(rows[i] == "changed" for i in range(10, 30))


@pytest.mark.parametrize("mode", ["prepared", "staging"])
def test_unique_violation_aborts_the_whole_batch_and_names_the_constraint(spark, postgres_url, pg_engine,
                                                                          tmp_path, mode) -> None:
    table = _name()
    _create(pg_engine, table, key=True)
    # one partition holds the duplicate: across partitions, prepared mode would wait for the
    # sibling's lock until lockTimeout instead (the error then says so)
    dup = _df(spark, 0, 100, parts=1).union(_df(spark, 50, 51, parts=1)).coalesce(1)
    dup = dup.union(_df(spark, 200, 300)) if mode == "staging" else dup
    with pytest.raises(Exception, match=f"{table}_pkey"):
        (_spark_jdbc_writer(dup, postgres_url, table).option("commitMode", mode)
         .option("checkpointLocation", str(tmp_path / "ck")).option("txnVersion", "1").save())
    assert _ids(pg_engine, table) == []
    assert _leftovers(pg_engine, table) == (0, 0)


def test_type_mismatch_is_refused_before_any_task(spark, postgres_url, pg_engine) -> None:
    table = _name()
    _create(pg_engine, table)
    bad = _df(spark, 0, 5).selectExpr("id", "amount as payload", "payload as amount", "ts")
    with pytest.raises(Exception, match="DataFrame does not fit table"):
        _spark_jdbc_writer(bad, postgres_url, table).save()
    assert _ids(pg_engine, table) == []


def test_nul_bytes_are_refused_with_nothing_written(spark, postgres_url, pg_engine) -> None:
    table = _name()
    _create(pg_engine, table)
    bad = _df(spark, 0, 50).selectExpr("id", "CASE WHEN id = 33 THEN concat('a', char(0), 'b') ELSE payload END "
                                       "AS payload", "amount", "ts")
    with pytest.raises(Exception, match="NUL"):
        _spark_jdbc_writer(bad, postgres_url, table).save()
    assert _ids(pg_engine, table) == []
    assert _leftovers(pg_engine, table) == (0, 0)


def test_identifiers_are_quoted_never_injected(spark, postgres_url, pg_engine) -> None:
    victim = _name()
    _create(pg_engine, victim)
    for evil in (f"{victim}; DROP TABLE {victim}", f"x\" ; DROP TABLE {victim}; --"):
        with pytest.raises(Exception, match=r"(?i)dbtable|identifier|quote|not fit|does not exist"):
            _spark_jdbc_writer(_df(spark, 0, 3), postgres_url, evil).save()
    assert sa.inspect(pg_engine).has_table(victim)
    weird = f'Odd "Name" {uuid.uuid4().hex[:6]}'
    quoted = '"' + weird.replace('"', '""') + '"'
    df = _df(spark, 0, 7).selectExpr("id AS `Mixed Case Id`", "payload AS `pay;load`")
    _spark_jdbc_writer(df, postgres_url, quoted).save()
    with pg_engine.connect() as c:
        assert c.exec_driver_sql(f'SELECT count(DISTINCT "Mixed Case Id") FROM {quoted}').scalar_one() == 7


def test_very_wide_rows(spark, postgres_url, pg_engine) -> None:
    table = _name()
    cols = ["id"] + [f"concat('v', id, '_{i}') AS c{i}" for i in range(300)] + ["repeat('x', 2000000) AS big"]
    df = spark.range(0, 6, numPartitions=2).selectExpr(*cols)
    _spark_jdbc_writer(df, postgres_url, table).save()
    with pg_engine.connect() as c:
        assert c.exec_driver_sql(f"SELECT count(*), min(length(big)), max(c299) FROM {table}").one() == \
            (6, 2000000, "v5_299")


def test_unsupported_spark_option_is_a_clear_error(spark, postgres_url, pg_engine) -> None:
    table = _name()
    _create(pg_engine, table)
    with pytest.raises(Exception, match="numPartitions"):
        _spark_jdbc_writer(_df(spark, 0, 5), postgres_url, table).option("numPartitions", "2").save()
    assert _ids(pg_engine, table) == []


def test_password_never_reaches_logs_checkpoint_handles_or_errors(spark, postgres_url, pg_engine, tmp_path,
                                                                  caplog) -> None:
    table = _name()
    _create(pg_engine, table)
    password = make_url(postgres_url).password
    assert password
    url = _jdbc_url(postgres_url)
    ck = tmp_path / "ck"
    inp = tmp_path / "in"
    write_input(inp, files=2, rows_per_file=10)
    errors: list[str] = []
    with caplog.at_level(logging.DEBUG):
        q = (spark.readStream.schema("id long, payload string, amount double").json(str(inp))
             .writeStream.format("twopc-jdbc").option("url", url).option("dbtable", table)
             .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
        q.awaitTermination()
        try:  # an error after connecting: a column the table lacks
            (spark.range(1).selectExpr("id", "'x' AS nope").write.format("twopc-jdbc").mode("append")
             .option("url", url).option("dbtable", table).save())
        except Exception as exc:  # noqa: BLE001 - Spark wraps it; only the text is checked
            errors.append(str(exc))
        try:  # an error from the server: wrong password in the URL, right one in the option
            (spark.range(1).write.format("twopc-jdbc").mode("append")
             .option("url", url.replace(urllib.parse.quote(password, safe=""), "wrong" + password[:3]))
             .option("dbtable", table).save())
        except Exception as exc:  # noqa: BLE001 - Spark wraps it; only the text is checked
            errors.append(str(exc))
    assert len(errors) == 2
    assert len(_ids(pg_engine, table)) == 20
    texts = [p.read_text(errors="replace") for p in Path(ck).rglob("*") if p.is_file()]
    texts += [r.getMessage() for r in caplog.records if r.name.startswith("twopc")] + errors
    leaks = [t[:200] for t in texts if password in t or urllib.parse.quote(password, safe="") in t]
    assert leaks == []


def test_sqlite_file_batch_and_streaming(spark, tmp_path) -> None:
    db = tmp_path / "target.db"
    url = f"jdbc:sqlite:{db}"
    (_df(spark, 0, 40).write.format("twopc-jdbc").mode("append").option("url", url)
     .option("dbtable", "events").save())
    inp = tmp_path / "in"
    write_input(inp, files=3, rows_per_file=20)
    for _ in range(2):  # the second run has nothing new: a replay writes nothing
        q = (spark.readStream.schema("id long, payload string, amount double").json(str(inp))
             .selectExpr("id + 1000 AS id", "payload", "amount", "timestamp_seconds(id) AS ts")
             .writeStream.format("twopc-jdbc").option("url", url).option("dbtable", "events")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        q.awaitTermination()
    engine = sa.create_engine(f"sqlite:///{db}")
    try:
        ids = _ids(engine, "events")
        with engine.connect() as c:
            staged = [c.exec_driver_sql(f'SELECT count(*) FROM "{t}"').scalar_one()
                      for t in sa.inspect(c).get_table_names() if t.startswith("twopc_stage_")]
    finally:
        engine.dispose()
    assert ids[:40] == list(range(40))
    assert sorted(ids[40:]) == sorted(1000 + i for i in range(60)) and len(ids) == 100
    assert staged == [0]


def _mariadb_jdbc(sa_url: str) -> tuple[str, dict[str, str]]:
    u = make_url(sa_url)
    return f"jdbc:mariadb://{u.host}:{u.port}/{u.database}", {"user": u.username or "", "password": u.password or ""}


def test_mariadb_prepared_xa_and_staging(spark, mariadb_url, tmp_path) -> None:
    engine = sa.create_engine(mariadb_url)
    url, creds = _mariadb_jdbc(mariadb_url)
    prepared, created = _name(), _name()
    try:
        with engine.begin() as c:
            c.exec_driver_sql(f"CREATE TABLE {prepared} (id BIGINT PRIMARY KEY, payload TEXT, amount DOUBLE, "
                              f"ts DATETIME(6)) ENGINE=InnoDB")

        def write(df, table: str, **extra: str) -> None:
            w = (df.write.format("twopc-jdbc").mode("append").option("url", url).option("dbtable", table)
                 .option("driver", "org.mariadb.jdbc.Driver").options(**creds))
            for k, v in extra.items():
                w = w.option(k, v)
            w.save()

        # prepared (XA); commitMode=prepared makes "could not" an error
        write(_df(spark, 0, 120), prepared, commitMode="prepared", checkpointLocation=str(tmp_path / "ck"),
              txnVersion="1")
        write(_df(spark, 0, 120), prepared, commitMode="prepared", checkpointLocation=str(tmp_path / "ck"),
              txnVersion="1")  # a rerun of the same version writes nothing
        kinds = {h["kind"] for d in (tmp_path / "ck" / "twopc" / "decisions").glob("*.json")
                 for h in json.loads(d.read_text())["handles"]}
        assert kinds == {"twopc.mysql_xa"}
        # a duplicate key aborts the whole batch, naming the key; nothing written, nothing prepared
        with pytest.raises(Exception, match=r"(?i)duplicate"):
            write(_df(spark, 500, 600).union(_df(spark, 0, 1, parts=1)), prepared, commitMode="prepared",
                  checkpointLocation=str(tmp_path / "ck"), txnVersion="2")
        # prepared (XA) without a checkpoint: the decision in the server's twopc_ledger, nothing left there
        write(_df(spark, 200, 220), prepared)
        with engine.connect() as c:
            assert c.exec_driver_sql("SELECT count(*) FROM twopc_ledger WHERE sink_id LIKE 'eph-%%'").scalar_one() == 0
            assert c.exec_driver_sql(f"SELECT count(*) FROM {prepared} WHERE id >= 200").scalar_one() == 20
        # staging, no checkpoint, the table created from the DataFrame; then an upsert
        write(_df(spark, 0, 50), created, upsertKeys="id")  # creates the table with PRIMARY KEY (id)
        write(_df(spark, 40, 60).selectExpr("id", "'changed' AS payload", "amount", "ts"), created, upsertKeys="id")
        with engine.connect() as c:
            assert [r[0] for r in c.exec_driver_sql(f"SELECT id FROM {prepared} ORDER BY id")] == [*range(120),
                                                                                                   *range(200, 220)]
            rows: dict[int, str] = dict(c.exec_driver_sql(f"SELECT id, payload FROM {created}").all())
            xa = c.exec_driver_sql("XA RECOVER").all()
        assert sorted(rows) == list(range(60)) and rows[39] == "event-39" and rows[45] == "changed"
        assert [x for x in xa if b"twopc:" in (x[3] if isinstance(x[3], bytes) else str(x[3]).encode())] == []
    finally:
        engine.dispose()


def test_rerun_with_txn_app_id_and_version_writes_nothing_without_checkpoint(spark, postgres_url, pg_engine) -> None:
    table = _name()
    _create(pg_engine, table)
    for version in ("7", "7", "8"):
        (_spark_jdbc_writer(_df(spark, 0, 30), postgres_url, table)
         .option("txnAppId", f"nightly-{table}").option("txnVersion", version).save())
    assert _ids(pg_engine, table) == sorted(list(range(30)) * 2)  # versions 7 and 8, once each
    assert _leftovers(pg_engine, table) == (0, 0)


def test_streaming_complete_mode_replaces_the_table_each_micro_batch(spark, postgres_url, pg_engine, tmp_path) -> None:
    table = _name()
    inp = tmp_path / "in"
    write_input(inp, files=3, rows_per_file=20)
    u = make_url(postgres_url)
    q = (spark.readStream.schema("id long, payload string, amount double").option("maxFilesPerTrigger", 1)
         .json(str(inp)).selectExpr("id % 4 AS bucket").groupBy("bucket").count()
         .writeStream.outputMode("complete").format("twopc-jdbc")
         .option("url", f"jdbc:postgresql://{u.host}:{u.port}/{u.database}").option("dbtable", table)
         .option("user", u.username).option("password", u.password)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    with pg_engine.connect() as c:
        rows = dict(c.exec_driver_sql(f"SELECT bucket, count FROM {table}").all())
    assert rows == {0: 15, 1: 15, 2: 15, 3: 15}  # the last micro-batch's full result, once
    assert _leftovers(pg_engine, table) == (0, 0)


def test_rerun_of_a_version_that_created_the_table_writes_nothing_without_checkpoint(spark, postgres_url,
                                                                                      pg_engine) -> None:
    """The first run creates the table (a staging commit), the rerun finds it (a prepared
    commit) and a forced staging rerun follows: all three see one record of what
    (txnAppId, txnVersion) committed, so the version is written once."""
    table = _name()
    app = f"daily-{table}"
    for version, extra in (("7", {}), ("7", {}), ("7", {"commitMode": "staging"}), ("8", {}),
                           ("8", {"commitMode": "staging"})):
        w = _spark_jdbc_writer(_df(spark, 0, 30), postgres_url, table).option("txnAppId", app)
        w.options(**extra).option("txnVersion", version).save()
        assert _ids(pg_engine, table) == sorted(list(range(30)) * (1 if version == "7" else 2)), (version, extra)
    assert _leftovers(pg_engine, table) == (0, 0)
