"""The engines' pooled connections, on a real PostgreSQL: one that sat in the pool
``PING_AFTER_IDLE_S`` or longer is pinged before use, and replaced when it died meanwhile; one
given back a moment ago goes out without the ping's round trip (the driver's commit takes up to
8 at once). Whether a ping was sent is read from the server: ``pg_stat_activity.query`` is the
last statement the session ran."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from twopc.sinks.sql._engines import PING_AFTER_IDLE_S, engine_for
from twopc.sinks.sql.options import NetTimeouts

from tests._sql_helpers import uid


@pytest.fixture
def engine(postgres_url: str) -> Iterator[sa.Engine]:
    """A pool of its own (an application_name no other test uses), in autocommit as the prepared sinks' is."""
    url = sa.make_url(postgres_url).update_query_dict({"application_name": f"ping_{uid()}"})
    engine = engine_for(url, NetTimeouts(connect=10, reply=30.0), autocommit=True)
    yield engine
    engine.dispose()


def _used(engine: sa.Engine, statement: str) -> int:
    """Check a connection out, run *statement* on it, give it back; its server pid."""
    conn = engine.raw_connection()
    try:
        pg = conn.driver_connection
        pg.execute(statement)  # type: ignore[union-attr]  # psycopg: the engine's driver
        return int(pg.info.backend_pid)  # type: ignore[union-attr]  # psycopg
    finally:
        conn.close()


def _last_statement(pg_engine: sa.Engine, pid: int) -> str:
    with pg_engine.connect() as c:
        return str(c.exec_driver_sql("SELECT query FROM pg_stat_activity WHERE pid = %(p)s", {"p": pid}).scalar())


def test_a_connection_given_back_a_moment_ago_goes_out_without_a_ping(engine: sa.Engine,
                                                                       pg_engine: sa.Engine) -> None:
    pid = _used(engine, "SELECT 'first use'")
    conn = engine.raw_connection()  # the pool's only connection, given back just now
    try:
        assert conn.driver_connection.info.backend_pid == pid  # type: ignore[union-attr]  # psycopg
        assert _last_statement(pg_engine, pid) == "SELECT 'first use'"  # no ping reached the server
    finally:
        conn.close()


def test_a_connection_idle_in_the_pool_is_pinged_before_use(engine: sa.Engine, pg_engine: sa.Engine) -> None:
    pid = _used(engine, "SELECT 'first use'")
    time.sleep(PING_AFTER_IDLE_S + 0.2)
    conn = engine.raw_connection()
    try:
        assert conn.driver_connection.info.backend_pid == pid  # type: ignore[union-attr]  # psycopg
        assert _last_statement(pg_engine, pid) != "SELECT 'first use'"  # the ping ran after it
    finally:
        conn.close()


def test_a_connection_that_died_idle_in_the_pool_is_replaced_before_use(engine: sa.Engine,
                                                                          pg_engine: sa.Engine) -> None:
    pid = _used(engine, "SELECT 1")
    with pg_engine.connect() as c:
        assert c.exec_driver_sql("SELECT pg_terminate_backend(%(p)s)", {"p": pid}).scalar() is True
    time.sleep(PING_AFTER_IDLE_S + 0.2)
    conn = engine.raw_connection()  # the ping fails: the pool reconnects
    try:
        pg = conn.driver_connection
        assert pg.execute("SELECT 42").fetchone() == (42,)  # type: ignore[union-attr]  # psycopg
        assert pg.info.backend_pid != pid  # type: ignore[union-attr]  # psycopg
    finally:
        conn.close()
