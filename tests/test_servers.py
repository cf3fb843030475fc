"""Throwaway servers: LocalPostgres / LocalRedis really persist across crashes."""

from __future__ import annotations

import os
from collections.abc import Iterator

import psycopg
import pytest
import redis
import sqlalchemy as sa

from faultinject import LocalPostgres, LocalRedis


@pytest.fixture(scope="module")
def local_pg() -> Iterator[LocalPostgres]:
    with LocalPostgres(max_prepared_transactions=64) as server:
        yield server


def test_local_postgres_credentials_and_settings(local_pg: LocalPostgres) -> None:
    url = sa.make_url(local_pg.url)
    assert url.drivername == "postgresql+psycopg"
    assert (url.host, url.username, url.database) == ("127.0.0.1", "twopc", "twopc")
    with psycopg.connect(host=url.host, port=url.port, user=url.username,
                         password=url.password, dbname=url.database) as conn:
        assert conn.execute("SHOW max_prepared_transactions").fetchone() == ("64",)
        assert conn.execute("SHOW fsync").fetchone() == ("on",)
        assert conn.execute("SELECT current_user").fetchone() == ("twopc",)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(host="127.0.0.1", port=local_pg.port, user="twopc",
                        password="wrong", dbname="twopc")
    engine = sa.create_engine(local_pg.url)
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT 1")).scalar_one() == 1
    finally:
        engine.dispose()


def test_prepared_transaction_survives_kill_and_restart(local_pg: LocalPostgres) -> None:
    with psycopg.connect(local_pg.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE crash_t (x int)")
    with psycopg.connect(local_pg.dsn) as conn:
        conn.execute("INSERT INTO crash_t VALUES (42)")
        conn.execute("PREPARE TRANSACTION 'twopc-test-gid'")
        conn.commit()
    old_pid = local_pg.pid
    local_pg.kill()
    assert not local_pg.running
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(local_pg.dsn, connect_timeout=2)
    local_pg.restart()
    assert local_pg.running and local_pg.pid != old_pid
    with psycopg.connect(local_pg.dsn, autocommit=True) as conn:
        gids = [r[0] for r in conn.execute("SELECT gid FROM pg_prepared_xacts")]
        assert gids == ["twopc-test-gid"]
        assert conn.execute("SELECT count(*) FROM crash_t").fetchone() == (0,)
        conn.execute("COMMIT PREPARED 'twopc-test-gid'")
        assert conn.execute("SELECT x FROM crash_t").fetchall() == [(42,)]
    with psycopg.connect(local_pg.admin_dsn) as conn:
        assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
                            ).fetchone() == (True,)


def test_local_postgres_stop_removes_everything() -> None:
    server = LocalPostgres().start()
    data_dir, pid = server.data_dir, server.pid
    assert pid is not None and os.path.isdir(data_dir)
    server.stop()
    server.stop()  # idempotent
    assert not server.running and not os.path.exists(data_dir)
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_local_redis_survives_kill_via_aof() -> None:
    with LocalRedis() as server:
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        client = redis.Redis.from_url(server.url)
        client.set("k", "v")
        client.rpush("l", 1, 2, 3)
        client.close()
        server.kill()
        assert not server.running
        server.restart()
        client = redis.Redis.from_url(server.url)
        try:
            assert client.get("k") == b"v"
            assert client.lrange("l", 0, -1) == [b"1", b"2", b"3"]
            assert client.config_get("appendfsync") == {"appendfsync": "always"}
        finally:
            client.close()
        data_dir = server.data_dir
    assert not os.path.exists(data_dir)


def test_session_fixtures(pg_engine: sa.Engine, redis_url: str, tmp_checkpoint: str) -> None:
    with pg_engine.connect() as conn:
        assert int(conn.execute(sa.text("SHOW max_prepared_transactions")).scalar_one()) >= 64
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.ping()
    finally:
        client.close()
    assert os.path.isdir(tmp_checkpoint) and not os.listdir(tmp_checkpoint)
