"""Throwaway servers: LocalPostgres / LocalRedis / LocalMariaDB really persist across crashes."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest
import redis
import sqlalchemy as sa

from twopc.faultinject import LocalMariaDB, LocalPostgres, LocalRedis


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
    assert not os.path.exists(f"/proc/{pid}") or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


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


# -- MariaDB -----------------------------------------------------------------------------

def _my(url: str, **kw: Any) -> pymysql.connections.Connection[Any]:
    u = sa.make_url(url)
    return pymysql.connect(host=u.host, port=u.port or 3306, user=u.username, password=u.password or "",
                           database=u.database, autocommit=True, **kw)


def _recover(cur: Any) -> list[str]:
    cur.execute("XA RECOVER")
    return sorted(bytes(data[:glen]).decode() for _fmt, glen, _blen, data in cur.fetchall())


@pytest.fixture(scope="module")
def local_mariadb() -> Iterator[LocalMariaDB]:
    with LocalMariaDB() as server:
        yield server


def test_local_mariadb_credentials_and_settings(local_mariadb: LocalMariaDB) -> None:
    url = sa.make_url(local_mariadb.url)
    assert url.drivername == "mysql+pymysql"
    assert (url.host, url.username, url.database) == ("127.0.0.1", "twopc", "twopc")
    assert url.password == local_mariadb.password and len(local_mariadb.password) >= 16
    conn = _my(local_mariadb.url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT CURRENT_USER(), DATABASE(), VERSION(), @@innodb_flush_log_at_trx_commit, "
                        "@@character_set_server, @@skip_grant_tables")
            user, db, version, flush, charset, skip_grants = cur.fetchone()
            assert user.startswith("twopc@") and db == "twopc" and "MariaDB" in version
            assert (flush, charset, skip_grants) == (1, "utf8mb4", 0)
            assert version == local_mariadb.version
            cur.execute("CREATE DATABASE twopc_servers_test")  # the twopc_* databases are the user's
            cur.execute("DROP DATABASE twopc_servers_test")
            with pytest.raises(pymysql.err.OperationalError):
                cur.execute("CREATE DATABASE other_db")
    finally:
        conn.close()
    with pytest.raises(pymysql.err.OperationalError) as info:
        pymysql.connect(host="127.0.0.1", port=local_mariadb.port, user="twopc", password="wrong")
    assert info.value.args[0] == 1045  # the password is checked
    engine = sa.create_engine(local_mariadb.url)
    try:
        with engine.connect() as c:
            assert c.exec_driver_sql("SELECT 1").scalar_one() == 1
    finally:
        engine.dispose()


def test_prepared_xa_transaction_survives_kill_and_restart(local_mariadb: LocalMariaDB) -> None:
    conn = _my(local_mariadb.url)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE crash_t (x INT) ENGINE=InnoDB")
        cur.execute("XA START 'twopc-test-xid'")
        cur.execute("INSERT INTO crash_t VALUES (42)")
        cur.execute("XA END 'twopc-test-xid'")
        cur.execute("XA PREPARE 'twopc-test-xid'")
    conn.close()
    old_pid = local_mariadb.pid
    local_mariadb.kill()
    assert not local_mariadb.running
    with pytest.raises(pymysql.err.OperationalError):
        _my(local_mariadb.url, connect_timeout=2)
    local_mariadb.restart()
    assert local_mariadb.running and local_mariadb.pid != old_pid
    conn = _my(local_mariadb.url)
    try:
        with conn.cursor() as cur:
            assert _recover(cur) == ["twopc-test-xid"]  # InnoDB crash recovery kept it prepared
            cur.execute("SELECT COUNT(*) FROM crash_t")
            assert cur.fetchone() == (0,)
            cur.execute("XA COMMIT 'twopc-test-xid'")
            cur.execute("SELECT x FROM crash_t")
            assert cur.fetchall() == ((42,),)
    finally:
        conn.close()
    admin = _my(local_mariadb.admin_url)
    try:
        with admin.cursor() as cur:
            cur.execute("SELECT CURRENT_USER()")
            assert cur.fetchone()[0].startswith("twopc_admin@")
    finally:
        admin.close()


def test_local_mariadb_stop_removes_everything() -> None:
    server = LocalMariaDB().start()
    data_dir, pid = server.data_dir, server.pid
    assert pid is not None and os.path.isdir(data_dir)
    assert not os.path.exists(os.path.join(os.path.dirname(data_dir), "bootstrap.sql"))  # held the passwords
    server.stop()
    server.stop()  # idempotent
    assert not server.running and not os.path.exists(data_dir)
    assert not os.path.exists(f"/proc/{pid}") or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_mariadb_fixture_answers_and_supports_xa(mariadb_url: str) -> None:
    """The session's server (env URL, container or local) can do what the XA sink needs."""
    xid = f"twopc-fixture-{uuid.uuid4().hex[:8]}"
    table = f"xa_probe_{uuid.uuid4().hex[:8]}"
    a, b = _my(mariadb_url), _my(mariadb_url)
    try:
        with a.cursor() as ca, b.cursor() as cb:
            ca.execute("SELECT SUPPORT, XA FROM information_schema.ENGINES WHERE ENGINE = 'InnoDB'")
            support, xa = ca.fetchone()
            assert support in ("YES", "DEFAULT") and xa == "YES"
            ca.execute(f"CREATE TABLE {table} (x INT) ENGINE=InnoDB")
            ca.execute(f"XA START '{xid}'")
            ca.execute(f"INSERT INTO {table} VALUES (1)")
            ca.execute(f"XA END '{xid}'")
            ca.execute(f"XA PREPARE '{xid}'")
            assert xid in _recover(cb)  # XA RECOVER shows it to another session
            cb.execute(f"SELECT COUNT(*) FROM {table}")
            assert cb.fetchone() == (0,)
            ca.execute(f"XA ROLLBACK '{xid}'")
            assert xid not in _recover(cb)
            cb.execute(f"SELECT COUNT(*) FROM {table}")
            assert cb.fetchone() == (0,)
            cb.execute(f"DROP TABLE {table}")
    finally:
        a.close()
        b.close()
