"""``COMMIT PREPARED`` of many ids in pipelines, on a real PostgreSQL: a batch spread over
several connections commits every prepared id and answers the ones the server does not know,
and an id that is not a twopc id reaches the server as a quoted literal, never as SQL."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql

from twopc.sinks import PostgresSink
from twopc.sinks.postgres._commit_pipeline import PER_PIPELINE, finish_many

from tests._sql_helpers import uid


@pytest.fixture
def table(pg_engine: sa.Engine) -> Iterator[str]:
    name = f"pipeline_{uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {name} (id bigint)")
    yield name
    with psycopg.connect(_dsn(pg_engine), autocommit=True) as conn:
        for (gid,) in conn.execute(  # what a failed test left prepared would block the DROP
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND "
                "(gid LIKE 'twopc:pipe%' OR gid LIKE 'it''s %')").fetchall():
            conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(gid))
        conn.execute(f"DROP TABLE {name}")


def _dsn(engine: sa.Engine) -> str:
    return engine.url.set(drivername="postgresql").render_as_string(hide_password=False)


def _prepare(engine: sa.Engine, table: str, gids: list[str]) -> None:
    with psycopg.connect(_dsn(engine)) as conn:
        for i, gid in enumerate(gids):
            conn.execute(f"INSERT INTO {table} VALUES ({i})")
            conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(gid))


def test_a_batch_over_several_pipelines_commits_every_id_and_answers_the_unknown(
        postgres_url: str, pg_engine: sa.Engine, table: str) -> None:
    n = PER_PIPELINE + 2  # two pipelines at once (the server allows 64 prepared transactions)
    gids = [f"twopc:pipe{uid()}:7:{p}:{p}:0000000a" for p in range(n)]
    _prepare(pg_engine, table, gids[:-1])  # the last one was never prepared
    sink = PostgresSink(postgres_url, table)
    try:
        done = finish_many(sink.target, "COMMIT", gids, None)
    finally:
        sink.close()
    assert done == {**dict.fromkeys(gids[:-1], True), gids[-1]: False}
    with pg_engine.connect() as c:
        assert c.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar() == n - 1
        left = c.exec_driver_sql("SELECT count(*) FROM pg_prepared_xacts WHERE gid = ANY(%(g)s)", {"g": gids})
        assert left.scalar() == 0


def test_an_id_that_is_not_a_twopc_id_is_sent_as_a_literal(postgres_url: str, pg_engine: sa.Engine,
                                                            table: str) -> None:
    odd = f"it's {uid()}'; DROP TABLE {table}; --"
    _prepare(pg_engine, table, [odd])
    sink = PostgresSink(postgres_url, table)
    try:
        assert finish_many(sink.target, "ROLLBACK", [odd, "no such 'id"], None) == {odd: True, "no such 'id": False}
    finally:
        sink.close()
    with pg_engine.connect() as c:
        assert c.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar() == 0  # rolled back, and still there
