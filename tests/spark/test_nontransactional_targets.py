"""Targets that cannot roll back are refused in every commit mode, before any task runs:
a MariaDB table of a non-transactional engine (MyISAM here), in the
staging and the prepared (XA) mode, existing or created by the write; a staging table of
such an engine; a PostgreSQL foreign table. Each refusal names the table, the engine and
the fix, and leaves nothing: no row, no staged row, no prepared transaction, no table the
write created."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from twopc import sinks
from twopc.sinks import StagingSink


@pytest.fixture(scope="module", autouse=True)
def _registered(spark) -> None:
    sinks.register_all(spark)


@pytest.fixture
def my_engine(mariadb_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(mariadb_url)
    try:
        yield engine
    finally:
        engine.dispose()


def _name() -> str:
    return f"nt_{uuid.uuid4().hex[:10]}"


def _df(spark):
    # ids 0..59 and 0 again: before the fix, the staging move into MyISAM failed on the
    # duplicate after moving some rows, and those rows stayed
    return spark.range(0, 60, numPartitions=2).union(spark.range(0, 1, numPartitions=1)).selectExpr(
        "id", "concat('event-', id) AS payload")


def _write(df, sa_url: str, table: str, driver: str, **options: str) -> None:
    u = make_url(sa_url)
    scheme = "mariadb" if driver.startswith("org.mariadb") else "postgresql"
    w = (df.write.format("twopc-jdbc").mode("append")
         .option("url", f"jdbc:{scheme}://{u.host}:{u.port}/{u.database}").option("dbtable", table)
         .option("user", u.username).option("password", u.password).option("driver", driver))
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def _my_leftovers(engine: sa.Engine, table: str, stage: str | None = None) -> tuple[int | None, int, int]:
    """(rows in *table* or None when it does not exist, staged rows, twopc's XA transactions)."""
    stage = stage or StagingSink(engine.url, table).stage.name
    with engine.connect() as c:
        insp = sa.inspect(c)
        rows = c.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one() if insp.has_table(table) else None
        staged = c.exec_driver_sql(f"SELECT count(*) FROM {stage}").scalar_one() if insp.has_table(stage) else 0
        xa = [x for x in c.exec_driver_sql("XA RECOVER").all()
              if b"twopc:" in (x[3] if isinstance(x[3], bytes) else str(x[3]).encode())]
    return rows, int(staged), len(xa)


@pytest.mark.parametrize("mode", ["staging", "prepared"])
def test_mariadb_myisam_target_is_refused_before_any_task(spark, mariadb_url, my_engine, tmp_path, mode) -> None:
    table = _name()
    with my_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, payload TEXT) ENGINE=MyISAM")
    extra = {"checkpointLocation": str(tmp_path / "ck"), "txnVersion": "1"} if mode == "prepared" else {}
    with pytest.raises(Exception, match=rf"(?s){table} uses the MyISAM engine, which is not transactional"
                                        rf".*ALTER TABLE {table} ENGINE=InnoDB") as err:
        _write(_df(spark), mariadb_url, table, "org.mariadb.jdbc.Driver", commitMode=mode, **extra)
    assert "every commit mode" in str(err.value)
    assert _my_leftovers(my_engine, table) == (0, 0, 0)


def test_mariadb_table_created_with_a_myisam_engine_is_refused_and_dropped(spark, mariadb_url, my_engine) -> None:
    table = _name()
    with pytest.raises(Exception, match=rf"(?s){table} uses the MyISAM engine.*ENGINE=InnoDB"):
        _write(_df(spark), mariadb_url, table, "org.mariadb.jdbc.Driver", commitMode="staging",
               createTableOptions="ENGINE=MyISAM")
    assert _my_leftovers(my_engine, table) == (None, 0, 0)  # the table the write created is gone


def test_mariadb_prepared_mode_without_the_table_creates_nothing(spark, mariadb_url, my_engine, tmp_path) -> None:
    table = _name()
    with pytest.raises(Exception, match=rf"(?i){table}"):
        _write(_df(spark), mariadb_url, table, "org.mariadb.jdbc.Driver", commitMode="prepared",
               createTableOptions="ENGINE=MyISAM", checkpointLocation=str(tmp_path / "ck"), txnVersion="1")
    assert _my_leftovers(my_engine, table) == (None, 0, 0)


def test_mariadb_myisam_staging_table_is_refused(spark, mariadb_url, my_engine) -> None:
    table, stage = _name(), _name()
    with my_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, payload TEXT) ENGINE=InnoDB")
        c.exec_driver_sql(f"CREATE TABLE {stage} (twopc_txn VARCHAR(200) NOT NULL, id BIGINT, payload TEXT) "
                          f"ENGINE=MyISAM")
    with pytest.raises(Exception, match=rf"(?s)the staging table {stage} uses the MyISAM engine.*"
                                        rf"ALTER TABLE {stage} ENGINE=InnoDB"):
        _write(_df(spark), mariadb_url, table, "org.mariadb.jdbc.Driver", commitMode="staging", stagingTable=stage)
    assert _my_leftovers(my_engine, table, stage) == (0, 0, 0)


@pytest.mark.parametrize("mode", ["staging", "prepared"])
def test_postgres_foreign_table_is_refused(spark, postgres_url, postgres_server, pg_engine, tmp_path, mode) -> None:
    table = _name()
    user = make_url(postgres_url).username
    # a superuser makes the foreign table (file_fdw, shipped with PostgreSQL) for twopc's user;
    # on a server given by TWOPC_TEST_PG_URL that user must be allowed to (else this fails loudly)
    admin = postgres_server.admin_dsn if postgres_server is not None else make_url(postgres_url).set(
        drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS file_fdw")
        c.execute("DO $$ BEGIN CREATE SERVER twopc_files FOREIGN DATA WRAPPER file_fdw; "
                  "EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        c.execute(f"CREATE FOREIGN TABLE {table} (id bigint, payload text) SERVER twopc_files "
                  f"OPTIONS (filename '/dev/null', format 'csv')")
        c.execute(f"ALTER FOREIGN TABLE {table} OWNER TO {user}")
    extra = {"checkpointLocation": str(tmp_path / "ck"), "txnVersion": "1"} if mode == "prepared" else {}
    with pytest.raises(Exception, match=rf"{table} is (a foreign table|not a table)"):
        _write(_df(spark), postgres_url, table, "org.postgresql.Driver", commitMode=mode, **extra)
    stage = StagingSink(pg_engine.url, table).stage.name
    with pg_engine.connect() as c:
        staged = c.exec_driver_sql(f'SELECT count(*) FROM "{stage}"').scalar_one() \
            if sa.inspect(c).has_table(stage) else 0
        prepared = c.exec_driver_sql("SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'twopc:%%'").scalar_one()
    assert (staged, prepared) == (0, 0)
