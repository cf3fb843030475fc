"""PostgreSQL for the tests (a plug-in listed in conftest's ``pytest_plugins``).

``postgres_url`` (session): a server with max_prepared_transactions >= 64 from, in order,
``TWOPC_TEST_POSTGRES_URL``; testcontainers (``postgres:16``) when a Docker engine answers;
:class:`twopc.faultinject.LocalPostgres` started from the local binaries in a temporary folder.
``postgres_server``: that LocalPostgres (to crash or restart it), else None.  ``pg_engine``:
an engine on it per test.  Started on first use only: collecting starts nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from twopc.faultinject import LocalPostgres, ServerUnavailable

from ._docker import docker_available

MIN_PREPARED = 64

_PG_HELP = (
    "No PostgreSQL for the tests. Either set TWOPC_TEST_POSTGRES_URL="
    "postgresql+psycopg://user:pw@host:port/db (server with max_prepared_transactions "
    f">= {MIN_PREPARED}), run a Docker engine (testcontainers), or install the "
    "PostgreSQL server binaries (apt-get install postgresql)."
)


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
    if docker_available():
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


@pytest.fixture
def pg_engine(postgres_url: str) -> Iterator[sa.Engine]:
    """A SQLAlchemy engine on :func:`postgres_url`, disposed after the test."""
    engine = sa.create_engine(postgres_url, pool_pre_ping=True)
    try:
        yield engine
    finally:
        engine.dispose()
