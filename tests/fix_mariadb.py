"""MariaDB for the tests (a plug-in listed in conftest's ``pytest_plugins``).

``mariadb_url`` (session): a server with InnoDB and XA from, in order,
``TWOPC_TEST_MARIADB_URL``; testcontainers (``mariadb:11``) when a Docker engine answers;
:class:`twopc.faultinject.LocalMariaDB` from the local mariadbd.  ``mariadb_server``: that
LocalMariaDB, else None.  Started on first use only.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from twopc.faultinject import LocalMariaDB, ServerUnavailable

from ._docker import docker_available

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
    docker_answers = docker_available()
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
