"""The session default ``spark.twopc.twopcSchema``, through Spark: a day's worth of writes to
a fresh database (twopc-postgres and twopc-jdbc, prepared, staging and auto, with and without
a checkpoint, batch and streaming; PostgreSQL and MariaDB) leaves none of twopc's tables in the
user's schema, all of them in the twopc schema, no markers of finished writes without a
checkpoint, and a checkpoint that records where its tables are."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from twopc import sinks

CONF = "spark.twopc.twopcSchema"


def _uid() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture
def session_schema(spark: Any) -> Iterator[str]:
    """A twopc schema of this test's own, set for the session (and registered); the session's
    value before is restored (and registered) after."""
    name = f"twopc_m{_uid()}"  # MariaDB: the test user may create databases named twopc_...
    before = spark.conf.get(CONF, None)
    spark.conf.set(CONF, name)
    sinks.register_all(spark)
    try:
        yield name
    finally:
        if before is None:
            spark.conf.unset(CONF)
        else:
            spark.conf.set(CONF, before)
        sinks.register_all(spark)


@pytest.fixture
def pg_fresh(postgres_url: str, postgres_server: Any) -> Iterator[str]:
    """The URL of a fresh database owned by the test user (its public schema is the user's)."""
    if postgres_server is None:
        pytest.fail("a fresh database needs the PostgreSQL server the tests start (unset TWOPC_TEST_POSTGRES_URL)",
                    pytrace=False)
    u = make_url(postgres_url)
    host = postgres_server.admin_dsn.split()[0][5:]
    admin = sa.create_engine(f"postgresql+psycopg://postgres@/postgres?host={host}&port={u.port}",
                             isolation_level="AUTOCOMMIT")
    db = f"fresh_{_uid()}"
    with admin.connect() as c:
        c.exec_driver_sql(f"CREATE DATABASE {db} OWNER {u.username}")
    try:
        yield u.set(database=db).render_as_string(hide_password=False)
    finally:
        sa.create_engine(u.set(database=db)).dispose()
        with admin.connect() as c:
            c.exec_driver_sql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        admin.dispose()


@pytest.fixture
def maria_fresh(mariadb_url: str) -> Iterator[str]:
    u = make_url(mariadb_url)
    db = f"{u.database}_fresh{_uid()}"
    engine = sa.create_engine(u, isolation_level="AUTOCOMMIT")
    with engine.connect() as c:
        c.exec_driver_sql(f"CREATE DATABASE {db}")
    try:
        yield u.set(database=db).render_as_string(hide_password=False)
    finally:
        with engine.connect() as c:
            c.exec_driver_sql(f"DROP DATABASE IF EXISTS {db}")
        engine.dispose()


def _jdbc(url: str) -> tuple[str, dict[str, str]]:
    u = make_url(url)
    kind = "postgresql" if u.get_backend_name() == "postgresql" else "mariadb"
    return f"jdbc:{kind}://{u.host}:{u.port}/{u.database}", {"user": u.username or "",
                                                             "password": u.password or ""}


def _df(spark: Any, lo: int, hi: int) -> Any:
    return spark.range(lo, hi, numPartitions=2).selectExpr("id", "concat('event-', id) as payload")


def _write(df: Any, fmt: str, url: str, table: str, mode: str = "append", **options: str) -> None:
    jdbc, creds = _jdbc(url)
    df.write.format(fmt).mode(mode).option("url", jdbc).option("dbtable", table).options(**creds, **options).save()


def _tables(url: str, schema: str | None) -> set[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            return set(sa.inspect(c).get_table_names(schema=schema))
    finally:
        engine.dispose()


def _count(url: str, query: str) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            return int(c.exec_driver_sql(query).scalar_one())
    finally:
        engine.dispose()


def test_a_days_writes_leave_none_of_twopcs_tables_in_the_users_postgres_schema(
        spark: Any, session_schema: str, pg_fresh: str, tmp_path: Path) -> None:
    url = pg_fresh
    engine = sa.create_engine(url)
    with engine.begin() as c:
        c.exec_driver_sql("CREATE TABLE events (id bigint PRIMARY KEY, payload text)")
    engine.dispose()
    _write(_df(spark, 0, 10), "twopc-postgres", url, "events")  # prepared, its ledger in the target
    _write(_df(spark, 10, 20), "twopc-jdbc", url, "events", commitMode="staging")  # staging, no checkpoint
    ck = tmp_path / "ck"
    _write(_df(spark, 20, 30), "twopc-jdbc", url, "events", checkpointLocation=str(ck), txnVersion="1")
    _write(_df(spark, 0, 5), "twopc-jdbc", url, "copy", mode="overwrite")  # creates the table: staging
    source = tmp_path / "in"
    source.mkdir()
    (source / "a.json").write_text("\n".join(json.dumps({"id": i, "payload": f"s{i}"}) for i in range(30, 40)))
    query = (spark.readStream.schema("id long, payload string").json(str(source)).writeStream
             .format("twopc-postgres").option("url", _jdbc(url)[0]).option("dbtable", "events")
             .options(**_jdbc(url)[1]).option("checkpointLocation", str(tmp_path / "sck"))
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None
    assert _count(url, "SELECT count(*) FROM events") == 40
    assert _count(url, "SELECT count(*) FROM copy") == 5
    mine = _tables(url, "public")
    assert {t for t in mine if t.startswith("twopc_")} == set(), mine
    kept = _tables(url, session_schema)
    assert {"twopc_markers", "twopc_ledger", "twopc_batches"} <= kept and any(
        t.startswith("twopc_stage_") for t in kept), kept
    # the writes without a checkpoint left no markers; the checkpoint records where its tables are
    assert _count(url, f"SELECT count(*) FROM {session_schema}.twopc_markers WHERE sink_id LIKE 'eph-%%'") == 0
    assert _count(url, f"SELECT count(*) FROM {session_schema}.twopc_batches WHERE sink_id LIKE 'eph-%%'") == 0
    recorded = json.loads((ck / "twopc" / "target.json").read_text())["options"]
    assert {k.lower(): v for k, v in recorded.items()}["twopcschema"] == session_schema


def test_a_days_writes_leave_none_of_twopcs_tables_in_the_users_mariadb_database(
        spark: Any, session_schema: str, maria_fresh: str) -> None:
    url = maria_fresh
    engine = sa.create_engine(url)
    with engine.begin() as c:
        c.exec_driver_sql("CREATE TABLE events (id BIGINT PRIMARY KEY, payload TEXT) ENGINE=InnoDB")
    try:
        _write(_df(spark, 0, 10), "twopc-jdbc", url, "events", commitMode="prepared")  # XA, its ledger in the target
        _write(_df(spark, 10, 20), "twopc-jdbc", url, "events", commitMode="staging")
        _write(_df(spark, 0, 5), "twopc-jdbc", url, "copy", mode="overwrite")
        assert _count(url, "SELECT count(*) FROM events") == 20
        mine = _tables(url, None)
        assert mine == {"events", "copy"}, mine
        kept = _tables(url, session_schema)
        assert {t.rsplit("_", 1)[0] for t in kept} >= {"twopc_markers", "twopc_ledger", "twopc_batches"}, kept
    finally:
        with engine.begin() as c:
            c.exec_driver_sql(f"DROP DATABASE IF EXISTS {session_schema}")
        engine.dispose()

