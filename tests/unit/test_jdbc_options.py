"""Unit tests of :mod:`twopc.sinks.sql.options._jdbc_options` and the URL translator (no server): Spark's
JDBC writer options,
twopc's own, JDBC URL translation, driver parameters, and that no password leaks."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import pickle
import urllib.parse
from typing import Any

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from twopc import ConfigurationError
from twopc._runtime_options import RUNTIME_KEYS
from twopc.sinks._options import SPARK_PASSED_OPTIONS, Duration
from twopc.sinks.sql._registry import dialect_for
from twopc.sinks.sql.options._column_lists import parse_column_list, parse_column_types
from twopc.sinks.sql.options._driver_params import MYSQL_JAVA_ONLY, PG_JAVA_ONLY
from twopc.sinks.sql.options._jdbc_options import REJECTED_OPTIONS, JdbcOptions
from twopc.spi import MissingOptionError, redact

PG = "jdbc:postgresql://db.example:5432/app"
PW = "S3cr3t-Pa55!"
PW_Q = urllib.parse.quote(PW, safe="")


def parse(url: str = PG, **options: str) -> JdbcOptions:
    return JdbcOptions.parse({"url": url, "dbtable": "events", **options})


def error_of(options: dict[str, str]) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as info:
        JdbcOptions.parse(options)
    return info.value


def query(o: JdbcOptions) -> dict[str, Any]:
    return dict(o.url.query)


# -- URL translation -------------------------------------------------------------------------

URL_CASES: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    # (url, extra options, expected attributes; "query" is the exact URL query)
    ("jdbc:postgresql://db.example:5433/app", {},
     dict(dialect="postgresql", drivername="postgresql+psycopg", host="db.example", port=5433, database="app",
          username=None, password=None, query={})),
    ("jdbc:postgresql://db.example/app?user=bob&password=" + PW_Q, {},
     dict(host="db.example", port=None, username="bob", password=PW, query={})),
    ("jdbc:postgresql:app", {}, dict(host="localhost", database="app")),
    ("jdbc:postgresql://h/", {}, dict(host="h", database=None)),
    ("jdbc:postgresql://[::1]:6543/app", {}, dict(host="::1", port=6543)),
    ("jdbc:postgresql://h1:5432,h2,[::2]:7/app", {},
     dict(host=None, port=None, query={"host": ("h1:5432", "h2", "[::2]:7")})),
    ("jdbc:postgresql://h/my%20db", {}, dict(database="my db")),
    ("jdbc:PostgreSQL://h/app", {}, dict(dialect="postgresql", host="h")),
    ("jdbc:postgresql://h/app?ssl=true", {}, dict(query={"sslmode": "verify-full"})),
    ("jdbc:postgresql://h/app?ssl", {}, dict(query={"sslmode": "verify-full"})),
    ("jdbc:postgresql://h/app?ssl=false", {}, dict(query={})),
    ("jdbc:postgresql://h/app?ssl=true&sslmode=require", {}, dict(query={"sslmode": "require"})),
    ("jdbc:postgresql://h/app?sslmode=VERIFY-CA&sslrootcert=/ca.pem&sslcert=/c.crt&sslkey=/c.key", {},
     dict(query={"sslmode": "verify-ca", "sslrootcert": "/ca.pem", "sslcert": "/c.crt", "sslkey": "/c.key"})),
    ("jdbc:postgresql://h/app?ApplicationName=etl&currentSchema=sales", {},
     dict(query={"application_name": "etl", "options": "-csearch_path=sales"})),
    ("jdbc:postgresql://h/app?currentSchema=a,b&options=-c%20statement_timeout%3D5s", {},
     dict(query={"options": "-c statement_timeout=5s -csearch_path=a,b"})),
    ("jdbc:postgresql://h/app?currentSchema=my%20schema", {}, dict(query={"options": "-csearch_path=my\\ schema"})),
    (("jdbc:postgresql://h/app?targetServerType=primary&gssEncMode=disable&channelBinding=require"
      "&loadBalanceHosts=true"), {},
     dict(query={"target_session_attrs": "read-write", "gssencmode": "disable", "channel_binding": "require",
                 "load_balance_hosts": "random"})),
    ("jdbc:postgresql://h/app?targetServerType=any", {}, dict(query={"target_session_attrs": "any"})),
    ("jdbc:postgresql://h/app?connectTimeout=7", {}, dict(connect_timeout=7, query={})),
    ("jdbc:postgresql://h/app?loginTimeout=4", {}, dict(connect_timeout=4)),
    ("jdbc:postgresql://h/app?connectTimeout=7&loginTimeout=4", {}, dict(connect_timeout=7)),
    ("jdbc:postgresql://h/app?connectTimeout=0", {}, dict(connect_timeout=10)),
    ("jdbc:postgresql://h/app?connectTimeout=7", {"connectTimeout": "3"}, dict(connect_timeout=3)),
    (("jdbc:postgresql://h/app?reWriteBatchedInserts=true&stringtype=unspecified&prepareThreshold=0"
      "&tcpKeepAlive=true"), {}, dict(query={}, tcp_keepalive=True)),
    # pgjdbc's socketTimeout (seconds) and tcpKeepAlive become twopc's waits, not dropped
    ("jdbc:postgresql://h/app?socketTimeout=45&tcpKeepAlive=false", {},
     dict(query={}, socket_timeout=45, tcp_keepalive=False)),
    ("jdbc:postgresql://h/app?socketTimeout=45", {"socketTimeout": "90s"}, dict(socket_timeout=90)),
    ("jdbc:postgresql://h/app?socketTimeout=0", {}, dict(socket_timeout=60)),
    ("jdbc:postgresql://h/app", {}, dict(socket_timeout=60, tcp_keepalive=True)),
    ("jdbc:postgresql://h/app", {"lockTimeout": "2min"}, dict(socket_timeout=150)),
    ("jdbc:postgresql://h/app", {"tcpKeepAlive": "false"}, dict(tcp_keepalive=False)),
    ("jdbc:postgresql://h/app?sslpassword=keypw", {}, dict(query={"sslpassword": "keypw"})),
    # MySQL / MariaDB
    ("jdbc:mysql://db:3306/shop?user=bob&password=" + PW_Q, {},
     dict(dialect="mysql", drivername="mysql+pymysql", host="db", port=3306, database="shop", username="bob",
          password=PW, query={})),
    ("jdbc:mysql://bob:" + PW_Q + "@db/shop", {}, dict(username="bob", password=PW, port=None)),
    ("jdbc:mysql://db", {}, dict(database=None)),
    # Connector/J's socketTimeout is in milliseconds
    ("jdbc:mysql://db/shop?connectTimeout=2500&socketTimeout=65000&tcpKeepAlive=false", {},
     dict(connect_timeout=3, query={}, socket_timeout=65, tcp_keepalive=False)),
    ("jdbc:mysql://db/shop?connectTimeout=1", {}, dict(connect_timeout=1)),
    ("jdbc:mysql://db/shop?socketTimeout=0", {}, dict(query={}, socket_timeout=60)),
    ("jdbc:mysql://db/shop?characterEncoding=UTF-8&useUnicode=true", {}, dict(query={"charset": "utf8mb4"})),
    (("jdbc:mysql://db/shop?serverTimezone=UTC&rewriteBatchedStatements=true&useServerPrepStmts=false"
      "&cachePrepStmts=true"), {}, dict(query={})),
    ("jdbc:mysql://db/shop?useSSL=false", {}, dict(query={})),
    ("jdbc:mysql://db/shop?useSSL=true", {}, dict(query={"ssl_check_hostname": "false"})),
    ("jdbc:mysql://db/shop?sslMode=PREFERRED", {}, dict(query={"ssl_check_hostname": "false"})),
    ("jdbc:mysql://db/shop?sslMode=REQUIRED", {}, dict(query={"ssl_check_hostname": "false"})),
    ("jdbc:mysql://db/shop?useSSL=true&requireSSL=true", {}, dict(query={"ssl_check_hostname": "false"})),
    ("jdbc:mysql://db/shop?sslMode=DISABLED&useSSL=true", {}, dict(query={})),
    ("jdbc:mysql://db/shop?sslMode=VERIFY_CA&serverSslCert=/ca.pem", {},
     dict(query={"ssl_ca": "/ca.pem", "ssl_check_hostname": "false"})),
    ("jdbc:mysql://db/shop?sslMode=VERIFY_IDENTITY&serverSslCert=/ca.pem", {}, dict(query={"ssl_ca": "/ca.pem"})),
    ("jdbc:mysql://db/shop?useSSL=true&verifyServerCertificate=true&serverSslCert=/ca.pem", {},
     dict(query={"ssl_ca": "/ca.pem", "ssl_check_hostname": "false"})),
    ("jdbc:mysql://db/shop?sslMode=REQUIRED&serverSslCert=/ca.pem", {},
     dict(query={"ssl_ca": "/ca.pem", "ssl_check_hostname": "false"})),
    ("jdbc:mariadb://db:3307/shop?user=bob", {},
     dict(dialect="mysql", drivername="mysql+pymysql", port=3307, username="bob", query={})),
    ("jdbc:mariadb://db/shop?useSsl=true&trustServerCertificate=true", {},
     dict(query={"ssl_check_hostname": "false"})),
    ("jdbc:mariadb://db/shop?useSsl=true&serverSslCert=/ca.pem", {}, dict(query={"ssl_ca": "/ca.pem"})),
    ("jdbc:mariadb://db/shop?useSsl=true&disableSslHostnameVerification=true&serverSslCert=/ca.pem", {},
     dict(query={"ssl_ca": "/ca.pem", "ssl_check_hostname": "false"})),
    ("jdbc:mariadb://db/shop?sslMode=trust", {}, dict(query={"ssl_check_hostname": "false"})),
    ("jdbc:mariadb://db/shop?sslMode=verify-full&serverSslCert=/ca.pem", {}, dict(query={"ssl_ca": "/ca.pem"})),
    ("jdbc:mariadb://db/shop?sslMode=disable", {}, dict(query={})),
    # SQLite
    ("jdbc:sqlite:/data/app.db", {}, dict(dialect="sqlite", drivername="sqlite", database="/data/app.db", query={})),
    ("jdbc:sqlite:app.db", {}, dict(database="app.db")),
    ("jdbc:sqlite:file:/data/app.db", {}, dict(database="/data/app.db")),
    ("jdbc:sqlite:file:///data/app.db", {}, dict(database="/data/app.db")),
    ("jdbc:sqlite:C:/work/app.db", {}, dict(database="C:/work/app.db")),
    ("jdbc:sqlite:/data/app.db?busy_timeout=2500", {}, dict(query={"timeout": "2.5"})),
    ("jdbc:sqlite:/data/app.db", {"user": "bob", "password": PW}, dict(username=None, password=None)),
    # SQLAlchemy URLs
    ("postgresql://bob:pw@h:5432/app", {},
     dict(dialect="postgresql", drivername="postgresql+psycopg", username="bob", password="pw", port=5432)),
    ("postgresql+psycopg2://h/app?sslmode=require", {}, dict(drivername="postgresql+psycopg",
                                                              query={"sslmode": "require"})),
    ("postgres://h/app", {}, dict(drivername="postgresql+psycopg")),
    ("postgresql+psycopg://h/app?user=bob&password=pw&sslmode=require", {},
     dict(username="bob", password="pw", query={"sslmode": "require"})),
    ("postgresql://h/app?options=-c%20x%3D1", {"currentSchema": "s"},
     dict(query={"options": "-c x=1 -csearch_path=s"})),
    ("postgresql://h/app", {"sslmode": "verify-full", "stringtype": "unspecified"},
     dict(query={"sslmode": "verify-full"})),
    ("mysql://bob:pw@h/shop?charset=utf8mb4", {}, dict(dialect="mysql", drivername="mysql+pymysql",
                                                       query={"charset": "utf8mb4"})),
    ("mariadb://h/shop", {}, dict(dialect="mysql", drivername="mysql+pymysql")),
    ("mysql+mysqldb://h/shop", {}, dict(drivername="mysql+pymysql")),
    ("mysql+pymysql://h/shop?ssl_ca=/ca.pem", {}, dict(query={"ssl_ca": "/ca.pem"})),
    ("sqlite:////data/app.db", {}, dict(dialect="sqlite", drivername="sqlite", database="/data/app.db")),
    ("sqlite+pysqlite:///rel.db", {}, dict(drivername="sqlite", database="rel.db")),
    ("mssql+pyodbc://bob:pw@mydsn", {}, dict(dialect="other", drivername="mssql+pyodbc", username="bob")),
    ("oracle+oracledb://bob:pw@h:1521/?service_name=x", {},
     dict(dialect="other", query={"service_name": "x"})),
]


@pytest.mark.parametrize(("url", "extra", "expected"), URL_CASES, ids=[c[0][:60] for c in URL_CASES])
def test_url_translation(url: str, extra: dict[str, str], expected: dict[str, Any]) -> None:
    o = parse(url, **extra)
    for attr, want in expected.items():
        if attr == "query":
            assert query(o) == want
        elif attr == "connect_timeout":
            assert o.connect_timeout == Duration(want * 1000)
        elif attr == "socket_timeout":
            assert o.socket_timeout == Duration(want * 1000)
        elif attr in ("dialect", "tcp_keepalive"):
            assert getattr(o, attr) == want, attr
        else:
            assert getattr(o.url, attr) == want, attr


def test_user_and_password_options_override_the_url() -> None:
    o = parse("jdbc:postgresql://h/app?user=a&password=b", user="carol", password=PW)
    assert (o.url.username, o.url.password) == ("carol", PW)
    o = parse("postgresql://a:b@h/app", user="carol", password=PW)
    assert (o.url.username, o.url.password) == ("carol", PW)
    o = parse("jdbc:mysql://a:b@h/app?user=x")  # query parameter wins over the userinfo
    assert o.url.username == "x"


def test_connect_timeout_is_not_left_in_the_url() -> None:
    for url in ("jdbc:postgresql://h/app?connectTimeout=5", "jdbc:mysql://h/app?connectTimeout=5000"):
        o = parse(url)
        assert o.connect_timeout == Duration(5000)
        assert not {"connect_timeout", "connectTimeout"} & set(o.url.query)


def test_socket_timeout_must_outlast_the_server_side_waits() -> None:
    for extra, words in (({"socketTimeout": "30s", "lockTimeout": "30s"},
                          ["socketTimeout (30 s)", "longer than lockTimeout (30 s)"]),
                         ({"socketTimeout": "2min", "queryTimeout": "5min"}, ["longer than queryTimeout"]),
                         ({"socketTimeout": "0"}, ["socketTimeout must be > 0"])):
        with pytest.raises(ConfigurationError) as err:
            parse("jdbc:postgresql://h/app", **extra)
        for w in words:
            assert w in str(err.value)
    with pytest.raises(ConfigurationError, match=r"socketTimeout in the url .* milliseconds"):
        parse("jdbc:mysql://h/app?socketTimeout=20")  # 20 ms, meant as seconds


def test_net_timeouts_reach_the_drivers() -> None:
    o = parse("jdbc:postgresql://h/app?socketTimeout=45")
    pg = dialect_for("postgresql").connect_args(o.url, o.net_timeouts())
    assert (pg["connect_timeout"], pg["keepalives"], pg["keepalives_idle"], pg["tcp_user_timeout"]) == (
        10, 1, 30, 45_000)
    assert pg["cursor_factory"].__name__ == "DeadlineCursor"
    o = parse("jdbc:mysql://h/app?tcpKeepAlive=false")
    my = dialect_for("mysql").connect_args(o.url, o.net_timeouts())
    assert (my["read_timeout"], my["write_timeout"], my["connect_timeout"]) == (60, 60, 10)


URL_ERRORS: list[tuple[str, dict[str, str], list[str]]] = [
    ("jdbc:oracle:thin:@h:1521/x", {},
     ["'oracle'", "jdbc:postgresql:", "jdbc:mysql:", "jdbc:sqlite:", "SQLAlchemy URL"]),
    ("jdbc:sqlserver://h;databaseName=x", {}, ["not supported", "SQLAlchemy URL"]),
    ("jdbc:", {}, ["not supported"]),
    ("jdbc:mysql:loadbalance://h1,h2/db", {}, ["jdbc:mysql://host[:port]/database", "SQLAlchemy URL"]),
    ("jdbc:mariadb:replication://h1,h2/db", {}, ["replication"]),
    ("jdbc:mysql://h1,h2/db", {}, ["several hosts", "single"]),
    ("jdbc:mysql://address=(host=h)(port=3306)/db", {}, ["address=", "host[:port]"]),
    ("jdbc:postgresql://h:99999/app", {}, ["invalid port"]),
    ("jdbc:postgresql://h:abc/app", {}, ["invalid port"]),
    ("jdbc:postgresql://:5432/app", {}, ["empty host"]),
    ("jdbc:sqlite::memory:", {}, ["in-memory", "file"]),
    ("jdbc:sqlite:", {}, ["in-memory"]),
    ("jdbc:sqlite:file::memory:?cache=shared", {}, ["in-memory"]),
    ("jdbc:sqlite::resource:db/app.db", {}, ["resource", "file path"]),
    ("sqlite://", {}, ["in-memory"]),
    ("sqlite:///:memory:", {}, ["in-memory"]),
    ("sqlite:///file:x?mode=memory&uri=true", {}, ["in-memory"]),
    ("not a url", {}, ["neither a JDBC URL", "SQLAlchemy URL"]),
    ("postgresql://h:notaport/db", {}, ["neither a JDBC URL"]),
    ("postgresql+asyncpg://h/db", {}, ["psycopg 3", "asyncpg"]),
    ("mysql+mysqlconnector://h/db", {}, ["PyMySQL", "mysqlconnector"]),
    ("sqlite+aiosqlite:///x.db", {}, ["sqlite3", "aiosqlite"]),
    ("jdbc:postgresql://h/app?sslmode=sometimes", {}, ["sslmode", "verify-full", "'sometimes'"]),
    ("jdbc:postgresql://h/app?ssl=maybe", {}, ["ssl must be true or false"]),
    ("jdbc:postgresql://h/app?bogus=1", {}, ["parameter bogus", "PostgreSQL", "sslmode", "reWriteBatchedInserts"]),
    ("jdbc:postgresql://h/app?sslfactory=org.postgresql.ssl.NonValidatingFactory", {},
     ["sslfactory", "sslmode=require"]),
    ("jdbc:postgresql://h/app?readOnly=true", {}, ["readOnly", "write"]),
    ("jdbc:postgresql://h/app?targetServerType=secondary", {}, ["standby", "primary"]),
    ("jdbc:postgresql://h/app?targetServerType=weird", {}, ["targetServerType"]),
    ("jdbc:postgresql://h/app?gssEncMode=x", {}, ["gssEncMode"]),
    ("jdbc:postgresql://h/app?channelBinding=x", {}, ["channelBinding"]),
    ("jdbc:postgresql://h/app?connectTimeout=soon", {}, ["connectTimeout", "seconds"]),
    ("jdbc:postgresql://h/app?currentSchema=", {}, ["currentSchema is empty"]),
    ("jdbc:postgresql://h/app?sslmode=require&sslmode=disable", {}, ["sslmode", "twice"]),
    ("jdbc:postgresql://h/app?sslmode=require", {"sslmode": "disable"}, ["sslmode", "JDBC URL", "option"]),
    ("postgresql://h/app?sslmode=require", {"sslmode": "disable"}, ["sslmode", "give it once"]),
    ("postgresql://h/app?options=-cx%3D1", {"options": "-cy=2"}, ["options", "give it once"]),
    ("jdbc:postgresql://h/app?=1", {}, ["without a name"]),
    ("jdbc:mysql://h/db?sslMode=VERIFY_CA", {}, ["VERIFY_CA", "PEM", "serverSslCert", "ssl_ca"]),
    ("jdbc:mysql://h/db?sslMode=VERIFY_IDENTITY", {}, ["VERIFY_IDENTITY", "serverSslCert"]),
    ("jdbc:mysql://h/db?verifyServerCertificate=true", {}, ["VERIFY_CA", "serverSslCert"]),
    ("jdbc:mariadb://h/db?useSsl=true", {}, ["VERIFY_IDENTITY", "serverSslCert"]),
    ("jdbc:mysql://h/db?sslMode=SOMETIMES", {}, ["sslMode", "REQUIRED", "'SOMETIMES'"]),
    ("jdbc:mysql://h/db?useSSL=perhaps", {}, ["useSSL must be true or false"]),
    ("jdbc:mysql://h/db?sslMode=REQUIRED&serverSslCert=classpath:ca.pem", {}, ["serverSslCert", "PEM file"]),
    ("jdbc:mysql://h/db?serverTimezone=Europe/Berlin", {}, ["serverTimezone=Europe/Berlin", "UTC"]),
    ("jdbc:mysql://h/db?connectionTimeZone=LOCAL", {}, ["connectionTimeZone", "UTC"]),
    ("jdbc:mysql://h/db?characterEncoding=latin1", {}, ["characterEncoding=latin1", "UTF-8"]),
    ("jdbc:mysql://h/db?connectTimeout=1.5", {}, ["connectTimeout", "milliseconds"]),
    ("jdbc:postgresql://h/db?connectTimeout=5000", {}, ["connect timeout in the url", "5000 seconds"]),
    ("jdbc:mysql://h/db?trustCertificateKeyStoreUrl=file:/ks.jks", {}, ["trustCertificateKeyStoreUrl", "PEM"]),
    ("jdbc:mysql://h/db?sessionVariables=sql_mode=x", {}, ["sessionVariables", "sessionInitStatement"]),
    ("jdbc:mysql://h/db?useAffectedRows=true", {}, ["useAffectedRows", "MySQL/MariaDB", "sslMode"]),
    ("jdbc:sqlite:/x.db?journal_mode=WAL", {}, ["journal_mode", "SQLite", "busy_timeout"]),
    ("jdbc:sqlite:/x.db?busy_timeout=soon", {}, ["busy_timeout", "milliseconds"]),
    ("jdbc:sqlite:file://server/x.db", {}, ["host name"]),
    ("mssql+pyodbc://h/db", {"sslmode": "require"}, ["sslmode", "SQLAlchemy URL's query string"]),
    ("sqlite:////x.db", {"sslmode": "require"}, ["option sslmode", "SQLite"]),
]


@pytest.mark.parametrize(("url", "extra", "needles"), URL_ERRORS, ids=[c[0][:60] for c in URL_ERRORS])
def test_url_errors(url: str, extra: dict[str, str], needles: list[str]) -> None:
    err = error_of({"url": url, "dbtable": "t", **extra})
    for needle in needles:
        assert needle in str(err), (needle, str(err))


def test_jdbc_url_ssl_true_is_verify_full_like_pgjdbc(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="twopc.sinks.jdbc"):
        o = parse("jdbc:postgresql://h/app?ssl=true")
    assert query(o) == {"sslmode": "verify-full"}
    assert "verify-full" in caplog.text
    # an explicit sslmode in a SQLAlchemy URL is not overridden by ssl=true
    assert query(parse("postgresql://h/app?sslmode=require", ssl="true")) == {"sslmode": "require"}


@pytest.mark.parametrize("name", PG_JAVA_ONLY)
def test_postgres_java_only_parameters_are_accepted_and_logged(name: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="twopc.sinks.jdbc"):
        o = parse(f"jdbc:postgresql://h/app?{name}=1")
        o2 = parse("jdbc:postgresql://h/app", **{name.lower(): "1"})  # as an option, lower-cased by Spark
    assert query(o) == query(o2) == {}
    assert f"{name}=1 only tunes the Java PostgreSQL JDBC driver" in caplog.text


@pytest.mark.parametrize("name", MYSQL_JAVA_ONLY)
def test_mysql_java_only_parameters_are_accepted_and_logged(name: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="twopc.sinks.jdbc"):
        o = parse(f"jdbc:mysql://h/db?{name}=true")
        o2 = parse("jdbc:mariadb://h/db", **{name: "true"})
    assert query(o) == query(o2) == {}
    assert f"{name}=true only tunes the Java MySQL/MariaDB JDBC driver" in caplog.text


@pytest.mark.parametrize(("url", "log_needle"), [
    ("jdbc:mysql://h/db?useSSL=true", "no opportunistic TLS"),
    ("jdbc:mysql://h/db?sslMode=DISABLED&useSSL=true", "useSSL=true has no effect"),
    ("jdbc:mysql://h/db?trustServerCertificate=true", "trustServerCertificate=true has no effect"),
    ("jdbc:mysql://h/db?serverTimezone=UTC", "serverTimezone=UTC"),
    ("jdbc:mysql://h/db?connectTimeout=0", "connectTimeout=0"),
    ("jdbc:postgresql://h/db?sslkey=/k.pk8", "PEM"),
    ("jdbc:sqlite:/x.db?user=bob", "SQLite has no login"),
])
def test_parameters_without_effect_are_logged(url: str, log_needle: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="twopc.sinks.jdbc"):
        parse(url)
    assert log_needle in caplog.text


def test_option_level_driver_parameters_match_case_insensitively() -> None:
    a = parse("jdbc:postgresql://h/app", sslmode="require", applicationname="x", currentschema="s")
    b = parse("jdbc:postgresql://h/app?sslMode=require&ApplicationName=x&currentSchema=s")
    assert a.url == b.url
    # the same value in both places is fine
    assert query(parse("jdbc:postgresql://h/app?sslmode=require", sslmode="require")) == {"sslmode": "require"}


# -- Spark options ---------------------------------------------------------------------------

def test_defaults() -> None:
    o = parse()
    assert (o.dialect, o.table, o.driver) == ("postgresql", "events", None)
    assert o.batch_size == 1000 and o.truncate is False
    assert o.create_table_options == "" and o.create_table_column_types == {} and o.table_comment == ""
    assert o.isolation_level == "READ_COMMITTED" and o.query_timeout == Duration(0)
    assert o.session_init_statement is None
    assert o.commit_mode == "auto" and o.upsert_keys == () and o.save_mode is None
    assert o.marker_table == "twopc_markers" and o.staging_table is None
    assert o.lock_timeout == Duration(30_000) and str(o.lock_timeout) == "30s"
    assert o.connect_timeout == Duration(10_000) and o.copy_format == "auto"


SPARK_VALUES: list[tuple[dict[str, str], str, Any]] = [
    ({"table": "public.t"}, "table", "public.t"),
    ({"dbtable": '  "Mixed Case"  '}, "table", '"Mixed Case"'),
    ({"dbtable": "t", "table": "t"}, "table", "t"),
    ({"driver": "org.postgresql.Driver"}, "driver", "org.postgresql.Driver"),
    ({"driver": "com.example.Custom$Driver"}, "driver", "com.example.Custom$Driver"),
    ({"batchsize": "1"}, "batch_size", 1),
    ({"batchsize": " 50000 "}, "batch_size", 50000),
    ({"truncate": "TRUE"}, "truncate", True),
    ({"truncate": "false"}, "truncate", False),
    ({"cascadeTruncate": "false"}, "truncate", False),
    ({"createTableOptions": "WITH (fillfactor=70)"}, "create_table_options", "WITH (fillfactor=70)"),
    ({"tableComment": "written by twopc"}, "table_comment", "written by twopc"),
    ({"isolationLevel": "SERIALIZABLE"}, "isolation_level", "SERIALIZABLE"),
    ({"isolationLevel": "read_uncommitted"}, "isolation_level", "READ_UNCOMMITTED"),
    ({"isolationLevel": "REPEATABLE_READ"}, "isolation_level", "REPEATABLE_READ"),
    ({"queryTimeout": "0"}, "query_timeout", Duration(0)),
    ({"queryTimeout": "30"}, "query_timeout", Duration(30_000)),
    ({"sessionInitStatement": "SET search_path TO x"}, "session_init_statement", "SET search_path TO x"),
    ({"sessionInitStatement": "  "}, "session_init_statement", None),
    ({"createTableColumnTypes": "a VARCHAR(64), b DECIMAL(10,2)"}, "create_table_column_types",
     {"a": "VARCHAR(64)", "b": "DECIMAL(10,2)"}),
]


@pytest.mark.parametrize(("opts", "attr", "want"), SPARK_VALUES,
                         ids=[f"{a}-{i}" for i, (_, a, _) in enumerate(SPARK_VALUES)])
def test_spark_option_values(opts: dict[str, str], attr: str, want: Any) -> None:
    base = {"url": PG, "dbtable": "events"}
    if "table" in opts and "dbtable" not in opts:
        del base["dbtable"]
    assert getattr(JdbcOptions.parse({**base, **opts}), attr) == want


def test_spark_lower_cased_keys() -> None:
    # Spark lower-cases option keys; a caller may also use any case
    o = JdbcOptions.parse({"URL": PG, "DbTable": "t", "batchsize": "7", "ISOLATIONLEVEL": "SERIALIZABLE",
                           "createtablecolumntypes": "a INT", "upsertkeys": "a", "savemode": "overwrite"})
    assert (o.table, o.batch_size, o.isolation_level) == ("t", 7, "SERIALIZABLE")
    assert o.create_table_column_types == {"a": "INT"} and o.upsert_keys == ("a",) and o.save_mode == "overwrite"


SPARK_ERRORS: list[tuple[dict[str, str], type[Exception], list[str]]] = [
    ({"dbtable": ""}, MissingOptionError, ["dbtable"]),
    ({"dbtable": "a", "table": "b"}, ConfigurationError, ["dbtable", "table", "different"]),
    ({"dbtable": "(SELECT * FROM t) AS x"}, ConfigurationError, ["subquery", "table name"]),
    ({"driver": "not a class"}, ConfigurationError, ["driver", "Java class name"]),
    ({"driver": "com.mysql.cj.jdbc.Driver"}, ConfigurationError, ["com.mysql.cj.jdbc.Driver", "mysql", "postgresql"]),
    ({"batchsize": "0"}, ConfigurationError, ["batchsize", ">= 1"]),
    ({"batchsize": "many"}, ConfigurationError, ["batchsize", "'many'"]),
    ({"batchsize": "1.5"}, ConfigurationError, ["batchsize"]),
    ({"truncate": "yes please"}, ConfigurationError, ["truncate must be true or false"]),
    ({"cascadeTruncate": "true"}, ConfigurationError, ["cascadeTruncate", "empty", "foreign key"]),
    ({"cascadeTruncate": "x"}, ConfigurationError, ["cascadeTruncate must be true or false"]),
    ({"isolationLevel": "NONE"}, ConfigurationError, ["isolationLevel=NONE", "transactions"]),
    ({"isolationLevel": "SNAPSHOT"}, ConfigurationError, ["isolationLevel", "READ_COMMITTED", "'SNAPSHOT'"]),
    ({"queryTimeout": "-1"}, ConfigurationError, ["queryTimeout", "duration"]),
    ({"queryTimeout": "1m"}, ConfigurationError, ["queryTimeout"]),
    ({"createTableColumnTypes": "a INT; DROP TABLE x"}, ConfigurationError, ["createTableColumnTypes", "';'"]),
    ({"DBTABLE": "a", "dbtable": "b"}, ConfigurationError, ["given twice"]),
]


@pytest.mark.parametrize(("opts", "exc", "needles"), SPARK_ERRORS, ids=[str(o)[:50] for o, _, _ in SPARK_ERRORS])
def test_spark_option_errors(opts: dict[str, str], exc: type[Exception], needles: list[str]) -> None:
    with pytest.raises(exc) as info:
        JdbcOptions.parse({"url": PG, "dbtable": "events", **opts})
    for needle in needles:
        assert needle in str(info.value), (needle, str(info.value))


def test_missing_url_and_table() -> None:
    with pytest.raises(MissingOptionError, match='"url"'):
        JdbcOptions.parse({"dbtable": "t"})
    with pytest.raises(MissingOptionError, match='"url"'):
        JdbcOptions.parse({"url": "  ", "dbtable": "t"})
    with pytest.raises(MissingOptionError, match='"dbtable"'):
        JdbcOptions.parse({"url": PG})


@pytest.mark.parametrize("key", sorted(REJECTED_OPTIONS))
def test_rejected_spark_options(key: str) -> None:
    name, _ = REJECTED_OPTIONS[key]
    for spelled in (key, name):
        err = error_of({"url": PG, "dbtable": "t", spelled: "1"})
        assert f"option {name}" in str(err)
    text = str(err)
    if key == "numpartitions":
        assert "df.coalesce(n)" in text and "repartition" in text
    elif key in ("keytab", "principal", "refreshkrb5config"):
        assert "Kerberos" in text
    elif key == "connectionprovider":
        assert "connection provider" in text
    elif key == "query":
        assert "read-only" in text and "dbtable" in text
    else:
        assert "reading" in text


def test_rejected_options_win_over_a_missing_url() -> None:
    # the reason is more useful than "url is missing"
    err = error_of({"dbtable": "t", "numPartitions": "8"})
    assert "coalesce" in str(err)


@pytest.mark.parametrize("key", sorted(RUNTIME_KEYS | SPARK_PASSED_OPTIONS))
def test_runtime_options_are_ignored(key: str) -> None:
    assert parse(**{key: "whatever"}) == parse()


@pytest.mark.parametrize(("options", "typo", "meant"), [
    ({"url": PG, "dbtabel": "events"}, "dbtabel", "dbtable"),
    ({"url": PG, "DbTabel": "events"}, "DbTabel", "dbtable"),  # as typed, compared case-insensitively
    ({"url": PG, "tabel": "events"}, "tabel", "table"),
    ({"urll": PG, "dbtable": "events"}, "urll", "url"),
])
def test_a_misspelled_url_or_table_is_named_before_it_is_missing(options: dict[str, str], typo: str,
                                                                 meant: str) -> None:
    with pytest.raises(MissingOptionError) as info:
        JdbcOptions.parse(options)
    assert str(info.value).startswith(f"unknown option {typo!r}: did you mean {meant!r}?"), str(info.value)


def test_options_spark_passes_are_never_taken_for_a_misspelling() -> None:
    with pytest.raises(MissingOptionError) as info:
        JdbcOptions.parse({"url": PG, "path": "/data/t", "queryname": "tabl", "checkpointlocation": "/ck"})
    assert str(info.value).startswith('twopc-jdbc needs option "dbtable"'), str(info.value)


@pytest.mark.parametrize(("typo", "meant"), [("lockTimout", "lockTimeout"), ("batchSise", "batchsize"),
                                             ("upsertkey", "upsertKeys"), ("pasword", "password")])
def test_a_near_miss_of_a_twopc_or_spark_option_is_named_first(typo: str, meant: str) -> None:
    err = str(error_of({"url": PG, "dbtable": "t", typo: "1"}))
    assert err.startswith(f"unknown option {typo!r}: did you mean {meant!r}?"), err
    assert "Supported options" not in err  # the fix, not the whole list


def test_unknown_option_is_an_error_that_lists_the_supported_ones() -> None:
    err = str(error_of({"url": PG, "dbtable": "t", "fetchSizeX": "1"}))
    assert "option fetchSizeX" in err
    for needle in ("dbtable", "batchsize", "commitMode", "upsertKeys", "sslmode", "reWriteBatchedInserts"):
        assert needle in err


# -- twopc options ---------------------------------------------------------------------------

TWOPC_VALUES: list[tuple[str, dict[str, str], str, Any]] = [
    (PG, {"commitMode": "PREPARED"}, "commit_mode", "prepared"),
    (PG, {"commitMode": "staging"}, "commit_mode", "staging"),
    ("jdbc:mysql://h/db", {"commitMode": "prepared"}, "commit_mode", "prepared"),
    ("jdbc:sqlite:/x.db", {"commitMode": "staging"}, "commit_mode", "staging"),
    (PG, {"upsertKeys": ""}, "upsert_keys", ()),
    (PG, {"upsertKeys": "id"}, "upsert_keys", ("id",)),
    (PG, {"upsertKeys": ' id , "Tenant Id", `we``ird` '}, "upsert_keys", ("id", "Tenant Id", "we`ird")),
    (PG, {"saveMode": "Append"}, "save_mode", "append"),
    (PG, {"saveMode": "overwrite"}, "save_mode", "overwrite"),
    (PG, {"saveMode": "errorifexists"}, "save_mode", "errorifexists"),
    (PG, {"saveMode": "error"}, "save_mode", "errorifexists"),
    (PG, {"saveMode": "default"}, "save_mode", "errorifexists"),
    (PG, {"saveMode": "ignore"}, "save_mode", "ignore"),
    (PG, {"markerTable": "ops.markers"}, "marker_table", "ops.markers"),
    (PG, {"markerTable": ""}, "marker_table", "twopc_markers"),
    (PG, {"stagingTable": "ops.stage"}, "staging_table", "ops.stage"),
    (PG, {"lockTimeout": "500ms"}, "lock_timeout", Duration(500)),
    (PG, {"lockTimeout": "2 min"}, "lock_timeout", Duration(120_000)),
    (PG, {"lockTimeout": "15"}, "lock_timeout", Duration(15_000)),  # a plain number is seconds, for every sink
    (PG, {"lockTimeout": "1.5s"}, "lock_timeout", Duration(1500)),
    (PG, {"lockTimeout": "2min"}, "lock_timeout", Duration(120_000)),
    (PG, {"lockTimeout": "1h"}, "lock_timeout", Duration(3_600_000)),
    (PG, {"lockTimeout": "1d"}, "lock_timeout", Duration(86_400_000)),
    (PG, {"lockTimeout": "10us"}, "lock_timeout", Duration(1)),
    (PG, {"lockTimeout": "0"}, "lock_timeout", Duration(0)),
    (PG, {"connectTimeout": "3"}, "connect_timeout", Duration(3000)),
    (PG, {"connectTimeout": "3600"}, "connect_timeout", Duration(3_600_000)),
    (PG, {"connectTimeout": "2500ms"}, "connect_timeout", Duration(2500)),
    (PG, {"queryTimeout": "7"}, "query_timeout", Duration(7000)),
    (PG, {"copyFormat": "BINARY"}, "copy_format", "binary"),
    (PG, {"copyFormat": "csv"}, "copy_format", "csv"),
    ("jdbc:mysql://h/db", {"copyFormat": "auto"}, "copy_format", "auto"),
]


@pytest.mark.parametrize(("url", "opts", "attr", "want"), TWOPC_VALUES,
                         ids=[f"{a}-{i}" for i, (_, _, a, _) in enumerate(TWOPC_VALUES)])
def test_twopc_option_values(url: str, opts: dict[str, str], attr: str, want: Any) -> None:
    assert getattr(parse(url, **opts), attr) == want


TWOPC_ERRORS: list[tuple[str, dict[str, str], list[str]]] = [
    (PG, {"commitMode": "fast"}, ["commitMode", "auto", "prepared", "staging", "'fast'"]),
    ("jdbc:sqlite:/x.db", {"commitMode": "prepared"}, ["commitMode=prepared", "SQLite", "staging"]),
    ("mssql+pyodbc://h/db", {"commitMode": "prepared"}, ["commitMode=prepared", "PostgreSQL", "staging"]),
    (PG, {"upsertKeys": "a,,b"}, ["upsertKeys", "column name"]),
    (PG, {"upsertKeys": "a,"}, ["upsertKeys", "trailing comma"]),
    (PG, {"upsertKeys": "a, A"}, ["upsertKeys", "'A'", "twice"]),
    (PG, {"upsertKeys": "a b"}, ["upsertKeys", "expected ','"]),
    (PG, {"upsertKeys": '"unterminated'}, ["upsertKeys", "unterminated"]),
    (PG, {"upsertKeys": "``"}, ["upsertKeys", "empty quoted"]),
    (PG, {"saveMode": "replace"}, ["saveMode", "append", "errorifexists", "'replace'"]),
    (PG, {"stagingTable": " "}, ["stagingTable is empty"]),
    (PG, {"lockTimeout": "soon"}, ["lockTimeout", "'soon'", "30s"]),
    (PG, {"lockTimeout": "5 weeks"}, ["lockTimeout"]),
    (PG, {"connectTimeout": "0"}, ["connectTimeout", "between 1 and"]),
    (PG, {"connectTimeout": "ten"}, ["connectTimeout", "'ten'"]),
    (PG, {"connectTimeout": "5000"}, ["connectTimeout", "seconds", "milliseconds"]),
    (PG, {"copyFormat": "text"}, ["copyFormat", "binary", "csv", "'text'"]),
    ("jdbc:mysql://h/db", {"copyFormat": "binary"}, ["copyFormat=binary", "PostgreSQL", "mysql"]),
]


@pytest.mark.parametrize(("url", "opts", "needles"), TWOPC_ERRORS, ids=[str(o)[:50] for _, o, _ in TWOPC_ERRORS])
def test_twopc_option_errors(url: str, opts: dict[str, str], needles: list[str]) -> None:
    err = error_of({"url": url, "dbtable": "t", **opts})
    for needle in needles:
        assert needle in str(err), (needle, str(err))


# -- createTableColumnTypes --------------------------------------------------------------------

COLUMN_TYPES: list[tuple[str, dict[str, str]]] = [
    ("", {}),
    ("   ", {}),
    ("name VARCHAR(64), comments CLOB", {"name": "VARCHAR(64)", "comments": "CLOB"}),
    ("price DECIMAL(10,2),qty INT", {"price": "DECIMAL(10,2)", "qty": "INT"}),
    ("price DECIMAL( 10 , 2 ) , qty INT", {"price": "DECIMAL( 10 , 2 )", "qty": "INT"}),
    ("`my col` TEXT, \"Other\"\"Col\" BIGINT", {"my col": "TEXT", 'Other"Col': "BIGINT"}),
    ("`a``b` TEXT", {"a`b": "TEXT"}),
    ("`a`TEXT", {"a": "TEXT"}),
    ("ts TIMESTAMP(3) WITH TIME ZONE", {"ts": "TIMESTAMP(3) WITH TIME ZONE"}),
    ("d DOUBLE PRECISION, u INT UNSIGNED", {"d": "DOUBLE PRECISION", "u": "INT UNSIGNED"}),
    ("tags TEXT[]", {"tags": "TEXT[]"}),
    ("kind ENUM('a','b c', 'it''s')", {"kind": "ENUM('a','b c', 'it''s')"}),
    ("s VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
     {"s": "VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"}),
    ("g public.geometry", {"g": "public.geometry"}),
    ("m MAP(STRUCT(a INT, b INT), INT)", {"m": "MAP(STRUCT(a INT, b INT), INT)"}),
    ("\n a\tINT ,\n b TEXT\n", {"a": "INT", "b": "TEXT"}),
]


@pytest.mark.parametrize(("text", "want"), COLUMN_TYPES, ids=[t[:40] or "empty" for t, _ in COLUMN_TYPES])
def test_column_types(text: str, want: dict[str, str]) -> None:
    got = parse_column_types(text)
    assert got == want
    assert list(got) == list(want)  # order kept


COLUMN_TYPE_ERRORS: list[tuple[str, list[str]]] = [
    ("a INT; DROP TABLE t", ["'a'", "';'"]),
    ("a INT -- comment", ["'--'"]),
    ("a INT /* x */", ["'/*'"]),
    ("a INT */", ["'*/'"]),
    ("a VARCHAR(10", ["'a'", "unbalanced parentheses"]),
    ("a VARCHAR(10))", ["'a'", "unbalanced parentheses"]),
    ("a DECIMAL(10,2)), b INT", ["unbalanced"]),
    ("a ENUM('x)", ["unterminated ' quote"]),
    ("a ENUM('x;y')", ["';'"]),
    ("a ENUM('x\\')", ["not allowed"]),
    ("a", ["'a'", "has no type"]),
    ("a , b INT", ["'a'", "has no type"]),
    ("a INT,", ["trailing comma"]),
    ("a INT,, b INT", ["expected a column name"]),
    (", a INT", ["expected a column name"]),
    ("a INT, A TEXT", ["'A'", "twice"]),
    ("a INT, `A` TEXT", ["twice"]),
    ("1a INT", ["expected a column name", "backticks"]),
    ("a-b INT", ["quote it in backticks"]),
    ("a 'INT'", ["must start with a letter"]),
    ("a INT DEFAULT \"x\"", ["'\"'", "not allowed"]),
    ("a INT NOT NULL = 1", ["'='", "not allowed"]),
    ("a INT `b`", ["'`'", "not allowed"]),
    ("`a TEXT", ["unterminated"]),
    ("\"\" TEXT", ["empty quoted"]),
    ("a INT\x00", ["not allowed"]),
]


@pytest.mark.parametrize(("text", "needles"), COLUMN_TYPE_ERRORS, ids=[t[:40] for t, _ in COLUMN_TYPE_ERRORS])
def test_column_type_errors(text: str, needles: list[str]) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_column_types(text)
    msg = str(info.value)
    assert msg.startswith("createTableColumnTypes")
    for needle in needles:
        assert needle in msg, (needle, msg)


_WORDS = st.sampled_from(["INT", "BIGINT", "TEXT", "VARCHAR", "DECIMAL", "NUMERIC", "TIMESTAMP", "DOUBLE",
                          "PRECISION", "UNSIGNED", "WITH", "TIME", "ZONE", "CLOB", "CHAR", "geometry"])


@st.composite
def column_type(draw: st.DrawFn) -> str:
    words = draw(st.lists(_WORDS, min_size=1, max_size=3))
    text = words[0]
    args = draw(st.lists(st.integers(0, 99999).map(str), max_size=3))
    if args:
        sep = draw(st.sampled_from([",", ", ", " , "]))
        text += f"({sep.join(args)})"
    if draw(st.booleans()):
        text += "[]"
    if len(words) > 1:
        text += " " + " ".join(words[1:])
    if draw(st.booleans()):
        literals = draw(st.lists(st.text(st.characters(categories=("L", "M", "N", "P", "S"),
                                                       include_characters=" ", exclude_characters="\\;'"),
                                         max_size=5), min_size=1, max_size=3))
        text = "ENUM(" + ",".join("'" + lit + "'" for lit in literals) + ")"
        assume("--" not in text and "/*" not in text and "*/" not in text)
    return text


def _quote_name(name: str, style: str) -> str:
    if style == "`":
        return "`" + name.replace("`", "``") + "`"
    if style == '"':
        return '"' + name.replace('"', '""') + '"'
    return name


@st.composite
def column_types_text(draw: st.DrawFn) -> tuple[str, dict[str, str]]:
    names = draw(st.lists(
        st.one_of(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True),
                  st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), min_size=1,
                          max_size=8)),
        min_size=1, max_size=6, unique_by=str.lower))
    parts, want = [], {}
    for name in names:
        plain = name.isascii() and name.replace("_", "a").isalnum() and not name[0].isdigit()
        style = draw(st.sampled_from(["`", '"', ""] if plain else ["`", '"']))
        typ = draw(column_type())
        ws = draw(st.sampled_from([" ", "  ", "\t", "\n "]))
        parts.append(f"{_quote_name(name, style)}{ws}{typ}")
        want[name] = typ
    sep = draw(st.sampled_from([",", ", ", " ,\n"]))
    return sep.join(parts), want


@given(column_types_text())
@settings(max_examples=300)
def test_column_types_round_trip(case: tuple[str, dict[str, str]]) -> None:
    text, want = case
    got = parse_column_types(text)
    assert got == want
    assert list(got) == list(want)


@given(st.text(max_size=60))
@example("a INT); DROP TABLE users; --")
@example("a INT, b VARCHAR(1)) ; DELETE FROM t WHERE (1")
@settings(max_examples=500)
def test_column_types_never_let_sql_through(text: str) -> None:
    """Any input either fails with ConfigurationError or yields types that cannot end the
    column definition: no ';', no comment, balanced parentheses outside literals."""
    try:
        got = parse_column_types(text)
    except ConfigurationError:
        return
    for typ in got.values():
        assert ";" not in typ and "--" not in typ and "/*" not in typ and "*/" not in typ
        depth, quoted = 0, False
        for c in typ:
            if c == "'":
                quoted = not quoted
            elif not quoted:
                depth += {"(": 1, ")": -1}.get(c, 0)
                assert depth >= 0
                assert c != "," or depth > 0
        assert depth == 0 and not quoted


@pytest.mark.parametrize(("text", "want"), [
    ("", []), ("a", ["a"]), (" a , b ", ["a", "b"]), ('"A b",`c``d`', ["A b", "c`d"]), ('"x""y"', ['x"y']),
])
def test_parse_column_list(text: str, want: list[str]) -> None:
    assert parse_column_list(text) == want


# -- secrets ---------------------------------------------------------------------------------

SECRET_URLS = [
    ("jdbc:postgresql://h/app?user=bob&password=" + PW_Q, {}),
    ("jdbc:mysql://bob:" + PW_Q + "@h/db", {}),
    ("jdbc:mariadb://h/db?password=" + urllib.parse.quote_plus(PW), {}),
    ("postgresql://bob:" + PW_Q + "@h/app", {}),
    ("postgresql://h/app?user=bob&password=" + PW_Q, {}),
    ("jdbc:postgresql://h/app", {"user": "bob", "password": PW}),
    ("mssql+pyodbc://bob:" + PW_Q + "@dsn", {}),
]


def _assert_hidden(text: str, secret: str = PW) -> None:
    for form in (secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)):
        assert form not in text, text


@pytest.mark.parametrize(("url", "extra"), SECRET_URLS, ids=[u[:40] for u, _ in SECRET_URLS])
def test_password_never_shown(url: str, extra: dict[str, str]) -> None:
    o = parse(url, **extra)
    assert o.url.password == PW
    for text in (repr(o), str(o), o.describe(), o.safe_url(), f"{o}", repr([o])):
        _assert_hidden(text)
    assert ":***@" in o.safe_url()
    assert PW in o.secrets() and PW_Q in o.secrets()
    assert o.secrets() == sorted(o.secrets(), key=len, reverse=True)
    rendered = o.url.render_as_string(hide_password=False)
    assert redact(rendered, o.secrets()) == o.safe_url()


@pytest.mark.parametrize(("url", "extra"), SECRET_URLS, ids=[u[:40] for u, _ in SECRET_URLS])
@pytest.mark.parametrize("bad", [{"bogus": "1"}, {"batchsize": "0"}, {"numPartitions": "2"},
                                 {"createTableColumnTypes": "a INT;"}, {"url_suffix": "&sslmode=nope"}])
def test_password_never_in_errors(url: str, extra: dict[str, str], bad: dict[str, str]) -> None:
    opts = {"url": url, "dbtable": "t", **extra}
    if "url_suffix" in bad:
        opts["url"] += ("&" if "?" in url else "?") + bad["url_suffix"].lstrip("&")
    else:
        opts.update(bad)
    try:
        JdbcOptions.parse(opts)
    except ConfigurationError as exc:
        _assert_hidden(str(exc))
        assert exc.__cause__ is None
    else:  # the query parameters of SQLAlchemy URLs are the driver's own: passed through
        assert not url.startswith("jdbc:") and "url_suffix" in bad


@pytest.mark.parametrize("password", ["p@ss w/rd:%", "a+b&c=d?e#f", "ünï cödé", "'\"\\;--"])
def test_secrets_cover_every_rendering(password: str) -> None:
    o = parse("jdbc:postgresql://h/app", user="bob", password=password)
    rendered = o.url.render_as_string(hide_password=False)
    assert redact(rendered, o.secrets()) == o.safe_url()
    assert "***" in o.safe_url()


def test_password_without_user_survives_rendering() -> None:
    o = parse("jdbc:mariadb://h/db?password=" + PW_Q)
    assert o.url.password == PW and o.url.username == ""
    assert o.safe_url() == "mysql+pymysql://:***@h/db"
    rendered = o.url.render_as_string(hide_password=False)
    assert PW in urllib.parse.unquote(rendered)


def test_sslpassword_is_a_secret() -> None:
    o = parse("jdbc:postgresql://h/app?sslpassword=K3yPa55word&sslkey=/k.key")
    assert "K3yPa55word" in o.secrets()
    for text in (repr(o), o.describe(), o.safe_url()):
        assert "K3yPa55word" not in text
    assert "sslpassword=***" in o.safe_url()


def test_password_in_malformed_urls_is_redacted() -> None:
    for url in (f"jdbc:mysql://bob:{PW_Q}@h1,h2/db", f"postgresql://bob:{PW_Q}@h:port/db",
                f"jdbc:postgresql://h:99999/app?password={PW_Q}", f"jdbc:oracle:thin:bob/{PW_Q}@h"):
        try:
            JdbcOptions.parse({"url": url, "dbtable": "t"})
        except ConfigurationError as exc:
            _assert_hidden(str(exc))


_PASSWORDS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=6, max_size=20)


@given(password=_PASSWORDS, bad=st.sampled_from(["bogus=1", "sslmode=nope", "connectTimeout=x", "ssl=maybe",
                                                 "currentSchema=", "readOnly=true"]),
       where=st.sampled_from(["query", "option", "userinfo"]))
@settings(max_examples=300)
def test_no_password_in_errors_property(password: str, bad: str, where: str) -> None:
    quoted = urllib.parse.quote(password, safe="")
    if where == "query":
        opts = {"url": f"jdbc:postgresql://h/app?password={quoted}&{bad}", "dbtable": "t"}
    elif where == "userinfo":
        opts = {"url": f"jdbc:mysql://bob:{quoted}@h/db?{bad}", "dbtable": "t"}
    else:
        opts = {"url": f"jdbc:postgresql://h/app?{bad}", "dbtable": "t", "password": password}
    with pytest.raises(ConfigurationError) as info:
        JdbcOptions.parse(opts)
    _assert_hidden(str(info.value), password)


@given(password=_PASSWORDS, user=st.from_regex(r"[a-z]{1,8}", fullmatch=True),
       url=st.sampled_from(["jdbc:postgresql://h/app", "jdbc:mysql://h/db", "postgresql://h/app", "mysql://h/db",
                            "mssql+pyodbc://h/db"]))
@settings(max_examples=300)
def test_no_password_in_repr_property(password: str, user: str, url: str) -> None:
    o = JdbcOptions.parse({"url": url, "dbtable": "t", "user": user, "password": password})
    assert o.url.password == password
    shown = repr(o) + o.describe() + o.safe_url()
    assume(password not in repr(parse(url, user=user, password="x")))  # not a substring of the rest anyway
    for form in o.secrets():
        assert form not in shown


# -- robustness --------------------------------------------------------------------------------

@given(st.one_of(st.text(max_size=80), st.from_regex(r"jdbc:(postgresql|mysql|mariadb|sqlite):[ -~]{0,60}",
                                                     fullmatch=True)))
@settings(max_examples=500)
def test_any_url_gives_options_or_a_configuration_error(url: str) -> None:
    try:
        o = JdbcOptions.parse({"url": url, "dbtable": "t"})
    except ConfigurationError:
        return
    assert o.dialect in ("postgresql", "mysql", "sqlite", "other")
    repr(o)


@given(st.dictionaries(st.sampled_from(["batchsize", "truncate", "isolationLevel", "queryTimeout", "commitMode",
                                        "saveMode", "lockTimeout", "connectTimeout", "copyFormat", "upsertKeys",
                                        "createTableColumnTypes", "sslmode", "cascadeTruncate", "driver"]),
                       st.text(max_size=20), max_size=5))
@settings(max_examples=300)
def test_any_option_values_give_options_or_a_configuration_error(opts: dict[str, str]) -> None:
    with contextlib.suppress(ConfigurationError):
        JdbcOptions.parse({"url": PG, "dbtable": "t", **opts})


# -- the dataclass -------------------------------------------------------------------------------

def test_frozen_pickles_and_compares() -> None:
    o = parse(f"jdbc:postgresql://h1,h2/app?user=bob&password={PW_Q}&sslmode=require",
              createTableColumnTypes="a INT, b TEXT", upsertKeys="a")
    copy = pickle.loads(pickle.dumps(o))
    assert copy == o and copy.url.password == PW and copy.create_table_column_types == {"a": "INT", "b": "TEXT"}
    assert hash(copy) == hash(o)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.table = "x"  # type: ignore[misc]  # assigning a frozen field is what is tested


def test_describe_names_the_driver_class() -> None:
    o = parse(driver="org.postgresql.Driver")
    assert o.describe() == ("JDBC postgresql postgresql+psycopg://db.example:5432/app table events "
                            "(driver org.postgresql.Driver)")


def test_field_names_are_the_public_api() -> None:
    assert [f.name for f in dataclasses.fields(JdbcOptions)] == [
        "url", "dialect", "table", "driver", "batch_size", "truncate", "create_table_options",
        "create_table_column_types", "table_comment", "isolation_level", "query_timeout",
        "session_init_statement", "commit_mode", "upsert_keys", "save_mode", "marker_table", "twopc_schema",
        "staging_table", "staging_retention",
        "lock_timeout", "connect_timeout", "socket_timeout", "tcp_keepalive", "copy_format", "dead_letter_table",
        "format_name"]


#: every keyword a SQL sink's constructor takes, with the option it spells and a value that parses
KEYWORD_OPTIONS = [
    ("user", "user", "bob"), ("password", "password", PW), ("driver", "driver", "org.postgresql.Driver"),
    ("batch_size", "batchsize", "500"), ("truncate", "truncate", "true"),
    ("create_table_options", "createTableOptions", "WITH (fillfactor=90)"),
    ("create_table_column_types", "createTableColumnTypes", "payload VARCHAR(64)"),
    ("table_comment", "tableComment", "events"), ("isolation_level", "isolationLevel", "SERIALIZABLE"),
    ("query_timeout", "queryTimeout", "30"), ("session_init_statement", "sessionInitStatement", "SET x = 1"),
    ("commit_mode", "commitMode", "staging"), ("upsert_keys", "upsertKeys", "id"), ("save_mode", "saveMode", "append"),
    ("marker_table", "markerTable", "my_markers"), ("twopc_schema", "twopcSchema", "ops"),
    ("staging_table", "stagingTable", "my_staging"), ("staging_retention", "stagingRetention", "2h"),
    ("lock_timeout", "lockTimeout", "3s"), ("connect_timeout", "connectTimeout", "7s"),
    ("socket_timeout", "socketTimeout", "9s"), ("tcp_keepalive", "tcpKeepAlive", "false"),
    ("copy_format", "copyFormat", "csv"), ("dead_letter_table", "deadLetterTable", "refused"),
]


@pytest.mark.parametrize(("keyword", "option", "value"), KEYWORD_OPTIONS, ids=[k for k, _, _ in KEYWORD_OPTIONS])
def test_a_constructor_keyword_means_the_option_it_spells(keyword: str, option: str, value: str) -> None:
    by_keyword = JdbcOptions.from_kwargs(PG, "events", format_name="twopc-jdbc", dialect=None, **{keyword: value})
    assert by_keyword == parse(**{option: value})
    assert by_keyword != parse()


def test_every_constructor_keyword_is_checked_above() -> None:
    fields = {f.name for f in dataclasses.fields(JdbcOptions)} - {"url", "dialect", "table", "format_name"}
    assert {k for k, _, _ in KEYWORD_OPTIONS} == {"user", "password"} | fields
