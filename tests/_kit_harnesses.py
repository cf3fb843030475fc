"""Conformance-kit harnesses for the project's own sinks (``twopc.testing``).

Each builds its sink only through stable public API: the class or data source exported by
``twopc.sinks``, configured with Spark-style options (what ``from_options`` reads), because the
module layout inside ``sinks/`` is not stable. Each harness gets a fresh target (a table,
a folder, a Redis hash tag), reads it back as ids, and adds the sink-specific verification
the kit cannot know: nothing of the sink left in ``pg_prepared_xacts`` / ``XA RECOVER`` /
the staging tables / Redis staging keys, and for Redis every op applied as often as the
stream says.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa

from twopc.recovery import staged_rows_left
from twopc.sinks import RedisSink
from twopc.testing import SinkHarness

from ._filesink_helpers import assert_nothing_left, committed_ids
from ._http_service import HttpService

__all__ = ["HARNESSES", "OwnHarness", "harness_for"]


@dataclass(repr=False)
class OwnHarness(SinkHarness):
    """A harness that also tells its tests the handle kind the sink must make (the commit
    mode it really used) and, for SQL targets, the target's engine."""

    handle_kind: str = ""
    engine: sa.Engine | None = None


def _uid() -> str:
    return uuid.uuid4().hex[:10]


@contextmanager
def file_harness(tmp_path: Path) -> Iterator[SinkHarness]:
    out = str(tmp_path / "out")
    yield OwnHarness("twopc.sinks:FileSink", {"path": out}, functools.partial(committed_ids, out),
                     verify=functools.partial(assert_nothing_left, out), name="FileSink", handle_kind="twopc.file")


@contextmanager
def _table(url: str, ddl: str, *, keyed: bool = False) -> Iterator[tuple[str, sa.Engine]]:
    """A new table made by *ddl* (``{name}``, ``{key}``: the primary key on ``id`` when *keyed*)."""
    name = f"kit_{_uid()}"
    engine = sa.create_engine(url)
    try:
        with engine.begin() as c:
            c.exec_driver_sql(ddl.format(name=name, key=PRIMARY_KEY if keyed else ""))
        yield name, engine
    finally:
        with engine.begin() as c:
            c.exec_driver_sql("SET LOCAL lock_timeout = '10s'" if engine.dialect.name == "postgresql"
                              else "SET SESSION lock_wait_timeout = 10")
            c.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")
        engine.dispose()


def _read(engine: sa.Engine, table: str) -> list[int]:
    with engine.connect() as c:
        return [int(r[0]) for r in c.exec_driver_sql(f"SELECT id FROM {table}")]


def _pg_prepared(engine: sa.Engine, sink_id: str) -> list[str]:
    with engine.connect() as c:
        return [r[0] for r in c.exec_driver_sql(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND starts_with(gid, %(p)s)",
            {"p": f"twopc:{sink_id}:"})]


def _xa_recovered(engine: sa.Engine, sink_id: str) -> list[str]:
    with engine.connect() as c:
        rows = c.exec_driver_sql("XA RECOVER").all()
    gids = [bytes(data[:glen]).decode("ascii", "replace") for _fmt, glen, _blen, data in rows]
    return [g for g in gids if g.startswith(f"twopc:{sink_id}:")]


def _mysql_staged(engine: sa.Engine, sink_id: str) -> dict[str, int]:
    with engine.connect() as c:
        tables = [r[0] for r in c.exec_driver_sql(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME LIKE 'twopc\\_stage\\_%%'")]
        return {t: int(c.exec_driver_sql(f"SELECT COUNT(*) FROM `{t}` WHERE twopc_txn LIKE %(p)s",
                                         {"p": f"twopc:{sink_id}:%"}).scalar_one()) for t in tables}


def _credentials(url: str) -> tuple[str, dict[str, str]]:
    """``host:port/db`` of a SQLAlchemy URL and its credentials as options."""
    u = sa.make_url(url)
    return f"{u.host}:{u.port}/{u.database}", {"user": u.username or "", "password": u.password or ""}


PG_DDL = "CREATE TABLE {name} (id bigint NOT NULL{key}, payload text, amount double precision)"
MY_DDL = "CREATE TABLE {name} (id BIGINT NOT NULL{key}, payload TEXT, amount DOUBLE) ENGINE=InnoDB"
PRIMARY_KEY = " PRIMARY KEY"
"""What *keyed* adds to a harness's table: the key users give it, so a replay that wrote a committed
batch again would fail on it. The crash matrices and chaos schedules run on keyed tables; the
contract checks on tables without a key (a core-API replay prepares the committed rows again)."""


@contextmanager
def postgres_harness(postgres_url: str, *, keyed: bool = False) -> Iterator[SinkHarness]:
    where, creds = _credentials(postgres_url)
    with _table(postgres_url, PG_DDL, keyed=keyed) as (table, engine):
        def verify(sink_id: str) -> None:
            assert _pg_prepared(engine, sink_id) == [], "prepared transactions left in pg_prepared_xacts"

        yield OwnHarness("twopc.sinks:PostgresDataSource", {"url": f"postgresql://{where}", **creds, "dbtable": table},
                         lambda: _read(engine, table), verify=verify, name="PostgresSink (twopc-postgres)",
                         handle_kind="twopc.postgres", engine=engine)


@contextmanager
def mysql_xa_harness(mariadb_url: str, *, keyed: bool = False) -> Iterator[SinkHarness]:
    where, creds = _credentials(mariadb_url)
    with _table(mariadb_url, MY_DDL, keyed=keyed) as (table, engine):
        def verify(sink_id: str) -> None:
            assert _xa_recovered(engine, sink_id) == [], "prepared XA transactions left in XA RECOVER"

        yield OwnHarness("twopc.sinks:MySqlXaSink", {"url": f"mysql://{where}", **creds, "dbtable": table},
                         lambda: _read(engine, table), verify=verify, name="MySqlXaSink (MariaDB XA)",
                         handle_kind="twopc.mysql_xa", engine=engine)


@contextmanager
def jdbc_harness(url: str, kind: str, commit_mode: str, *, keyed: bool = False) -> Iterator[SinkHarness]:
    """``twopc-jdbc`` (JdbcDataSource) on PostgreSQL or MariaDB in *commit_mode*."""
    where, creds = _credentials(url)
    jdbc = {"postgresql": "jdbc:postgresql", "mariadb": "jdbc:mariadb"}[kind]
    with _table(url, PG_DDL if kind == "postgresql" else MY_DDL, keyed=keyed) as (table, engine):
        def verify(sink_id: str) -> None:
            if kind == "postgresql":
                assert _pg_prepared(engine, sink_id) == [], "prepared transactions left in pg_prepared_xacts"
                left = staged_rows_left(engine, sink_id=sink_id)
            else:
                assert _xa_recovered(engine, sink_id) == [], "prepared XA transactions left in XA RECOVER"
                left = _mysql_staged(engine, sink_id)
            assert sum(left.values()) == 0, f"staged rows left: {left}"

        yield OwnHarness("twopc.sinks:JdbcDataSource", {"url": f"{jdbc}://{where}", **creds, "dbtable": table,
                                                  "commitMode": commit_mode},
                         lambda: _read(engine, table), verify=verify,
                         name=f"JdbcSink (twopc-jdbc, {commit_mode}, {kind})", engine=engine,
                         handle_kind={"staging": "twopc.staging", "postgresql": "twopc.postgres",
                                      "mariadb": "twopc.mysql_xa"}["staging" if commit_mode == "staging" else kind])


@contextmanager
def sqlite_staging_harness(tmp_path: Path, *, keyed: bool = False) -> Iterator[SinkHarness]:
    db = tmp_path / "target.db"
    engine = sa.create_engine(f"sqlite:///{db}")
    try:
        with engine.begin() as c:
            c.exec_driver_sql(f"CREATE TABLE events (id INTEGER NOT NULL{PRIMARY_KEY if keyed else ''}, payload TEXT, "
                              f"amount REAL)")

        def verify(sink_id: str) -> None:
            left = staged_rows_left(engine, sink_id=sink_id)
            assert sum(left.values()) == 0, f"staged rows left: {left}"

        yield OwnHarness("twopc.sinks:JdbcDataSource", {"url": f"jdbc:sqlite:{db}", "dbtable": "events",
                                                  "commitMode": "staging"},
                         lambda: _read(engine, "events"), verify=verify,
                         name="JdbcSink (twopc-jdbc, staging, SQLite)", engine=engine, handle_kind="twopc.staging")
    finally:
        engine.dispose()


@contextmanager
def redis_harness(redis_url: str) -> Iterator[SinkHarness]:
    tag = f"kit{_uid()}"
    t = "{{" + tag + "}}"
    mapping = json.dumps([
        {"op": "INCRBY", "key": f"{t}:total", "by": 1},
        {"op": "HSET", "key": f"{t}:row:{{id}}", "columns": ["payload", "amount"]},
        {"op": "XADD", "key": f"{t}:events", "columns": ["id", "payload"]},
    ])
    options = {"url": redis_url, "mapping": mapping, "hashTag": tag}
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = "{" + tag + "}"

    def events() -> list[tuple[Any, Any]]:
        return list(client.xrange(f"{keys}:events") or [])

    def read_ids() -> list[int]:
        return [int(fields["id"]) for _id, fields in events()]

    def verify(sink_id: str) -> None:
        own = RedisSink.from_options(options).keys_for(sink_id)
        assert client.zcard(own.txns) == 0 and client.hlen(own.prepared) == 0, "transactions left registered"
        staged = list(client.scan_iter(match=own.staging_prefix + "*", count=1000))
        assert not staged, f"staging left: {staged[:5]}"
        entries = events()
        total = int(client.get(f"{keys}:total") or 0)
        rows = sum(1 for _ in client.scan_iter(match=f"{keys}:row:*", count=1000))
        assert total == len(entries), f"counter {total} != {len(entries)} stream entries: an op applied twice"
        assert rows == len({f['id'] for _i, f in entries}), f"{rows} row hashes for the stream's distinct ids"

    try:
        yield OwnHarness("twopc.sinks:RedisDataSource", options, read_ids, verify=verify,
                         name="RedisSink (twopc-redis)", handle_kind="twopc.redis")
    finally:
        client.close()


#: The secret of the twopc-http harness (its reference service takes any token).
HTTP_TOKEN = "tok-Sup3rSecret-http"


def http_options(service: HttpService, outbox: Path, **extra: str) -> dict[str, str]:
    """Options of a ``twopc-http`` write of the kit's rows to *service*: ``POST /events/{id}``
    (the row as the body), keys by position, the transaction id in ``Twopc-Transaction``,
    a bearer token, quick retries, an acknowledgement record every 3 answers."""
    return {"url": f"{service.url}/events/{{id}}", "outbox": str(outbox), "transactionHeader": "Twopc-Transaction",
            "token": HTTP_TOKEN, "retryBackoff": "10ms", "retryBackoffMax": "200ms", "ackEvery": "3",
            "timeout": "5s", **extra}


def assert_http_settled(service: HttpService, outbox: Path, sink_id: str) -> None:
    """Nothing of *sink_id* left in the outbox folder (no outbox, no acknowledgement record),
    and no key applied twice by the service."""
    prefix = f"{sink_id}~"
    left = [p.name for sub in ("outbox", "acks") for p in (outbox / sub).glob(f"{prefix}*")]
    assert not left, f"outboxes or acknowledgements left: {left[:5]}"
    twice = {k: n for k, n in service.applied.items() if n > 1}
    assert not twice, f"keys applied more than once: {list(twice.items())[:5]}"


def service_harness(service: HttpService, outbox: Path, sink: str = "twopc.sinks:HttpDataSource",
                    **extra: str) -> OwnHarness:
    """``twopc-http`` writing to *service*, reading back the rows it applied."""
    return OwnHarness(sink, http_options(service, outbox, **extra), service.ids,
                      verify=functools.partial(assert_http_settled, service, outbox),
                      name="HttpSink (twopc-http)", handle_kind="twopc.http")


@contextmanager
def http_harness(tmp_path: Path, sink: str = "twopc.sinks:HttpDataSource") -> Iterator[SinkHarness]:
    """``twopc-http`` against a reference service that loses the reply of every 5th request
    it applies (the sink must retry with the same key)."""
    with HttpService() as service:
        service.lose_reply(10**9, every=5)
        yield service_harness(service, tmp_path / "http-outbox", sink)


HARNESSES = ("file", "postgres", "mysql_xa", "staging_postgres", "staging_sqlite", "redis", "staging_mariadb",
             "jdbc_prepared_postgres", "jdbc_prepared_mariadb", "http")
"""Every harness: the six sinks of the crash matrix first, then the contract-only ones, then
twopc-http (crashed in tests/chaos/test_http_chaos.py)."""


@contextmanager
def harness_for(name: str, request: pytest.FixtureRequest, tmp_path: Path, *,
                keyed: bool = False) -> Iterator[SinkHarness]:
    """The harness *name*, its servers from the session fixtures (``request.getfixturevalue``);
    *keyed*: a SQL table gets a primary key on ``id`` (see :data:`PRIMARY_KEY`)."""
    fixture = request.getfixturevalue
    makers = {
        "file": lambda: file_harness(tmp_path),
        "postgres": lambda: postgres_harness(fixture("postgres_url"), keyed=keyed),
        "mysql_xa": lambda: mysql_xa_harness(fixture("mariadb_url"), keyed=keyed),
        "staging_postgres": lambda: jdbc_harness(fixture("postgres_url"), "postgresql", "staging", keyed=keyed),
        "staging_sqlite": lambda: sqlite_staging_harness(tmp_path, keyed=keyed),
        "redis": lambda: redis_harness(fixture("redis_url")),
        "staging_mariadb": lambda: jdbc_harness(fixture("mariadb_url"), "mariadb", "staging", keyed=keyed),
        "jdbc_prepared_postgres": lambda: jdbc_harness(fixture("postgres_url"), "postgresql", "prepared",
                                                       keyed=keyed),
        "jdbc_prepared_mariadb": lambda: jdbc_harness(fixture("mariadb_url"), "mariadb", "prepared", keyed=keyed),
        "http": lambda: http_harness(tmp_path),
    }
    with makers[name]() as harness:
        yield harness
