"""Session fixtures: real PostgreSQL, real redis, real MariaDB, one shared SparkSession.

Servers come from, in order: ``TWOPC_TEST_POSTGRES_URL`` / ``TWOPC_TEST_REDIS_URL`` /
``TWOPC_TEST_MARIADB_URL``; testcontainers when a Docker engine answers; servers started
from local binaries (:class:`faultinject.LocalPostgres` / :class:`faultinject.LocalRedis` /
:class:`faultinject.LocalMariaDB`).  If none works the fixture fails (never skips) and says
how to get a server.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from faultinject import LocalMariaDB, LocalPostgres, LocalRedis, ServerUnavailable

from ._s3 import aws_config_path, s3_server  # noqa: F401 - s3_server is a fixture for every test module

#: fixtures of the Redis Stream source's tests (``r``, ``prefix``) and of the SQL sinks' (``db``)
pytest_plugins = ["tests._stream_helpers", "tests._sql_helpers"]

MIN_PREPARED = 64

_PG_HELP = (
    "No PostgreSQL for the tests. Either set TWOPC_TEST_POSTGRES_URL="
    "postgresql+psycopg://user:pw@host:port/db (server with max_prepared_transactions "
    f">= {MIN_PREPARED}), run a Docker engine (testcontainers), or install the "
    "PostgreSQL server binaries (apt-get install postgresql)."
)
_REDIS_HELP = (
    "No redis for the tests. Either set TWOPC_TEST_REDIS_URL=redis://host:port/0, run a "
    "Docker engine (testcontainers), or install redis-server (`make redis`)."
)


def _docker_available() -> bool:
    """True if a Docker engine answers a ping within a couple of seconds."""
    try:
        import docker  # type: ignore[import-untyped]  # docker ships no types; only ping() is used

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - whatever fails, there is no Docker engine to use
        return False


def _check_prepared(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            value = int(conn.execute(sa.text("SHOW max_prepared_transactions")).scalar_one())
    finally:
        engine.dispose()
    if value < MIN_PREPARED:
        pytest.fail(
            f"PostgreSQL at {engine.url!r} has max_prepared_transactions={value}; the tests "
            f"need >= {MIN_PREPARED} (set it in postgresql.conf and restart the server)",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def _postgres() -> Iterator[tuple[str, LocalPostgres | None]]:
    url = os.environ.get("TWOPC_TEST_POSTGRES_URL")
    if url:
        _check_prepared(url)
        yield url, None
        return
    if _docker_available():
        try:
            from testcontainers.community.postgres import PostgresContainer
        except ImportError:  # testcontainers < 4.14
            from testcontainers.postgres import PostgresContainer

        container = PostgresContainer("postgres:16", driver="psycopg").with_command(
            f"postgres -c max_prepared_transactions={MIN_PREPARED} -c fsync=on"
        )
        with container:
            url = container.get_connection_url()
            _check_prepared(url)
            yield url, None
        return
    server = LocalPostgres(max_prepared_transactions=MIN_PREPARED)
    try:
        server.start()
    except ServerUnavailable as exc:
        pytest.fail(f"{_PG_HELP}\nLocal start failed: {exc}", pytrace=False)
    try:
        yield server.url, server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_url(_postgres: tuple[str, LocalPostgres | None]) -> str:
    """SQLAlchemy URL (``postgresql+psycopg://...``) of a server with >= 64 prepared xacts."""
    return _postgres[0]


@pytest.fixture(scope="session")
def postgres_server(_postgres: tuple[str, LocalPostgres | None]) -> LocalPostgres | None:
    """The locally started :class:`LocalPostgres` (for crash tests), else None."""
    return _postgres[1]


@pytest.fixture(scope="session")
def _redis() -> Iterator[tuple[str, LocalRedis | None]]:
    url = os.environ.get("TWOPC_TEST_REDIS_URL")
    if url:
        yield url, None
        return
    if _docker_available():
        try:
            from testcontainers.community.redis import RedisContainer
        except ImportError:  # testcontainers < 4.14
            from testcontainers.redis import RedisContainer

        container = RedisContainer("redis:7").with_command(
            "redis-server --appendonly yes --appendfsync always --save ''"
        )
        with container:
            host = container.get_container_host_ip()
            port = container.get_exposed_port(container.port)
            yield f"redis://{host}:{port}/0", None
        return
    server = LocalRedis(appendfsync="always")
    try:
        server.start()
    except ServerUnavailable as exc:
        pytest.fail(f"{_REDIS_HELP}\nLocal start failed: {exc}", pytrace=False)
    try:
        yield server.url, server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_url(_redis: tuple[str, LocalRedis | None]) -> str:
    """``redis://host:port/0`` of a redis with AOF (fsync always when started here)."""
    return _redis[0]


@pytest.fixture(scope="session")
def redis_server(_redis: tuple[str, LocalRedis | None]) -> LocalRedis | None:
    """The locally started :class:`LocalRedis` (for crash tests), else None."""
    return _redis[1]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One shared ``SparkSession`` (local[2,3]: 2 cores, tasks retried up to 3 times)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Spark's Python processes inherit the environment the JVM starts with: the S3 server of
    # tests/_s3.py, started later, writes its address into this file (boto3 reads it per client).
    os.environ.setdefault("AWS_CONFIG_FILE", aws_config_path())
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("twopc-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def console(request: pytest.FixtureRequest) -> Callable[[], str]:
    """What the driver and the Python workers printed during the test: Spark's JVM (and
    its Python workers) inherited pytest's global capture file when it started, so the
    global capture holds their output too. Without capture (``-s``) the scan would read
    nothing, which the canary test reports."""
    capman = request.config.pluginmanager.getplugin("capturemanager")

    def read() -> str:
        out, err = capman.read_global_capture()
        return out + err

    read()  # what earlier tests left
    return read


@pytest.fixture
def tmp_checkpoint(tmp_path: Path) -> str:
    """A fresh, empty directory (str) to use as a streaming checkpoint location."""
    path = tmp_path / "checkpoint"
    path.mkdir()
    return str(path)


@pytest.fixture
def pg_engine(postgres_url: str) -> Iterator[sa.Engine]:
    """A SQLAlchemy engine on :func:`postgres_url`, disposed after the test."""
    engine = sa.create_engine(postgres_url, pool_pre_ping=True)
    try:
        yield engine
    finally:
        engine.dispose()


_MARIADB_HELP = (
    "No MariaDB for the tests. Either set TWOPC_TEST_MARIADB_URL="
    "mysql+pymysql://user:pw@host:port/db (a MariaDB >= 10.5 or MySQL >= 5.7.7 server with "
    "InnoDB, on which the user may run XA RECOVER), run a Docker engine (testcontainers), or "
    "install the MariaDB server (`make mariadb`)."
)


def _check_xa(url: str) -> None:
    """Fail the session unless the server at *url* answers and can do XA on InnoDB."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            xa = conn.exec_driver_sql(
                "SELECT SUPPORT, XA FROM information_schema.ENGINES WHERE ENGINE = 'InnoDB'").first()
            conn.exec_driver_sql("XA RECOVER").fetchall()
    except Exception as exc:  # noqa: BLE001 - any failure fails the session, saying how to fix it
        pytest.fail(f"MariaDB at {engine.url!r} cannot be used: {type(exc).__name__}: "
                    f"{' '.join(str(exc).split())[:300]}\n{_MARIADB_HELP}", pytrace=False)
    finally:
        engine.dispose()
    if xa is None or xa[0] not in ("YES", "DEFAULT") or xa[1] != "YES":
        pytest.fail(f"MariaDB at {engine.url!r} has no InnoDB with XA (ENGINES says {xa!r}); "
                    f"{_MARIADB_HELP}", pytrace=False)


@pytest.fixture(scope="session")
def _mariadb() -> Iterator[tuple[str, LocalMariaDB | None]]:
    url = os.environ.get("TWOPC_TEST_MARIADB_URL")
    if url:
        _check_xa(url)
        yield url, None
        return
    docker_answers = _docker_available()
    # docker's client leaks a unix socket when no engine answers: finalize it now rather than
    # at a random later GC, which on CPython 3.11.7 can land inside ast.parse (pytest's
    # assertion rewriting) and fail the session with "AST constructor recursion depth mismatch"
    gc.collect()
    if docker_answers:
        try:
            from testcontainers.community.mysql import MySqlContainer
        except ImportError:  # testcontainers < 4.14
            from testcontainers.mysql import MySqlContainer

        container = MySqlContainer("mariadb:11", dialect="pymysql")
        with container:
            url = container.get_connection_url()
            _check_xa(url)
            yield url, None
        return
    server = LocalMariaDB()
    try:
        server.start()
    except ServerUnavailable as exc:
        pytest.fail(f"{_MARIADB_HELP}\nLocal start failed: {exc}", pytrace=False)
    try:
        yield server.url, server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def mariadb_url(_mariadb: tuple[str, LocalMariaDB | None]) -> str:
    """SQLAlchemy URL (``mysql+pymysql://...``) of a MariaDB/MySQL server with InnoDB and XA."""
    return _mariadb[0]


@pytest.fixture(scope="session")
def mariadb_server(_mariadb: tuple[str, LocalMariaDB | None]) -> LocalMariaDB | None:
    """The locally started :class:`LocalMariaDB` (for crash tests), else None."""
    return _mariadb[1]
