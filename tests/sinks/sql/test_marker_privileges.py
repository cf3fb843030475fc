"""A user allowed to write the target but not the tables twopc keeps beside it (the marker
table, the staging and batch marker tables, the ledger table) is refused at validation, on
the driver before any task, with the table and the GRANT that fixes it; after that GRANT the
same validation passes. JVM-less: the sinks' ``validate`` is what the Spark formats call on
the driver before any task. Real restricted logins on the PostgreSQL and MariaDB servers the
tests start."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url

from twopc.sinks import MySqlXaSink, PostgresSink, StagingSink
from twopc.spi import TargetConfigurationError

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string())])


@dataclass
class Server:
    dialect: str
    admin: sa.Engine
    user_url: str
    user: str  # as the GRANT names it
    ns: str  # the schema (PostgreSQL) or database (MariaDB) of the tables

    def grant(self, privileges: str, table: str) -> None:
        with self.admin.begin() as c:
            c.exec_driver_sql(f"GRANT {privileges} ON {self.ns}.{table} TO {self.user}")


def _uid() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture
def pg(postgres_url: str, postgres_server: Any) -> Iterator[Server]:
    if postgres_server is None:
        pytest.fail("creating a restricted role needs the PostgreSQL server the tests start (unset "
                    "TWOPC_TEST_POSTGRES_URL)", pytrace=False)
    u = make_url(postgres_url)
    host = postgres_server.admin_dsn.split()[0][5:]
    admin = sa.create_engine(f"postgresql+psycopg://postgres@/{u.database}?host={host}&port={u.port}",
                             isolation_level="AUTOCOMMIT")
    role = ns = f"rp_{_uid()}"
    with admin.connect() as c:
        c.exec_driver_sql(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
        c.exec_driver_sql(f"CREATE SCHEMA {ns}")
        c.exec_driver_sql(f"GRANT USAGE ON SCHEMA {ns} TO {role}")
        c.exec_driver_sql(f"CREATE TABLE {ns}.t (id bigint PRIMARY KEY, s text)")
        c.exec_driver_sql(f"GRANT SELECT, INSERT ON {ns}.t TO {role}")
    url = URL.create("postgresql+psycopg", role, "pw", u.host, u.port, u.database).render_as_string(
        hide_password=False)
    try:
        yield Server("postgresql", admin, url, role, ns)
    finally:
        with admin.connect() as c:
            c.exec_driver_sql(f"DROP SCHEMA {ns} CASCADE")
            c.exec_driver_sql(f"DROP OWNED BY {role}")
            c.exec_driver_sql(f"DROP ROLE {role}")
        admin.dispose()


@pytest.fixture
def maria(mariadb_server: Any) -> Iterator[Server]:
    if mariadb_server is None:
        pytest.fail("creating a restricted user needs the MariaDB server the tests start (unset "
                    "TWOPC_TEST_MARIADB_URL)", pytrace=False)
    admin = sa.create_engine(mariadb_server.admin_url)
    name = ns = f"rp_{_uid()}"
    user = f"'{name}'@'%'"
    with admin.begin() as c:
        c.exec_driver_sql(f"CREATE DATABASE {ns}")
        c.exec_driver_sql(f"CREATE USER {user} IDENTIFIED BY 'pw'".replace("%", "%%"))
        c.exec_driver_sql(f"CREATE TABLE {ns}.t (id bigint PRIMARY KEY, s varchar(100)) ENGINE=InnoDB")
        c.exec_driver_sql(f"GRANT SELECT, INSERT ON {ns}.t TO {user}".replace("%", "%%"))
    u = make_url(mariadb_server.admin_url)
    url = URL.create("mysql+pymysql", name, "pw", u.host, u.port, ns).render_as_string(hide_password=False)
    try:
        yield Server("mysql", admin, url, user.replace("%", "%%"), ns)
    finally:
        with admin.begin() as c:
            c.exec_driver_sql(f"DROP DATABASE {ns}")
            c.exec_driver_sql(f"DROP USER {user}".replace("%", "%%"))
        admin.dispose()


def _admin_url(s: Server) -> str:
    return s.admin.url.render_as_string(hide_password=False)


def _refused(validate: Any, table: str, missing: str, s: Server) -> None:
    with pytest.raises(TargetConfigurationError) as err:
        validate()
    msg = str(err.value)
    shown_user = s.user.replace("%%", "%")
    assert f"no {missing} privilege on" in msg and table in msg, msg
    assert f"GRANT {missing} ON {table} TO {shown_user}" in msg, msg
    assert "nothing was written" in msg and "pw" not in msg.replace("pw'", "")


def _prepared(s: Server, url: str) -> PostgresSink | MySqlXaSink:
    cls = PostgresSink if s.dialect == "postgresql" else MySqlXaSink
    return cls(url, f"{s.ns}.t", marker_table=f"{s.ns}.twopc_markers")


@pytest.mark.parametrize("server", ["pg", "maria"])
def test_marker_table_without_insert_is_refused_at_validation(server: str, request: pytest.FixtureRequest) -> None:
    s: Server = request.getfixturevalue(server)
    admin_sink = _prepared(s, _admin_url(s))
    admin_sink.validate(SCHEMA)  # creates the marker table, owned by the admin
    admin_sink.close()
    s.grant("SELECT", "twopc_markers")
    sink = _prepared(s, s.user_url)
    try:
        _refused(lambda: sink.validate(SCHEMA), f"{s.ns}.twopc_markers", "INSERT, DELETE", s)
        s.grant("INSERT, DELETE", "twopc_markers")  # the fix the message names
        sink.validate(SCHEMA)
    finally:
        sink.close()


@pytest.mark.parametrize("server", ["pg", "maria"])
def test_staging_tables_without_privileges_are_refused_at_validation(server: str,
                                                                     request: pytest.FixtureRequest) -> None:
    s: Server = request.getfixturevalue(server)
    opts: dict[str, Any] = {"batch_table": "twopc_batches"}
    StagingSink(_admin_url(s), f"{s.ns}.t", **opts).validate(SCHEMA)  # creates both, owned by the admin
    sink = StagingSink(s.user_url, f"{s.ns}.t", **opts)
    stage = sink.stage.display()
    s.grant("SELECT", sink.stage.name)
    s.grant("SELECT", sink.batches.name)  # without it MariaDB hides the table: validation tries to create it
    _refused(lambda: sink.validate(SCHEMA), stage, "INSERT, DELETE", s)
    s.grant("INSERT, DELETE", sink.stage.name)
    _refused(lambda: sink.validate(SCHEMA), sink.batches.display(), "INSERT, DELETE", s)
    s.grant("INSERT, DELETE", sink.batches.name)
    sink.validate(SCHEMA)


@pytest.mark.parametrize("server", ["pg", "maria"])
def test_ledger_table_an_owner_created_without_update_is_refused(server: str, request: pytest.FixtureRequest) -> None:
    s: Server = request.getfixturevalue(server)
    admin_sink = _prepared(s, _admin_url(s))
    admin_sink.target_ledger().ensure_table()
    admin_sink.close()
    s.grant("SELECT, INSERT, DELETE", "twopc_ledger")
    sink = _prepared(s, s.user_url)
    try:
        ledger = sink.target_ledger()
        _refused(ledger.ensure_table, f"{s.ns}.twopc_ledger", "UPDATE", s)
        s.grant("UPDATE", "twopc_ledger")
        ledger.ensure_table()
    finally:
        sink.close()
