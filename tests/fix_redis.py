"""Redis for the tests (a plug-in listed in conftest's ``pytest_plugins``).

``redis_url`` (session): a redis with AOF from, in order, ``TWOPC_TEST_REDIS_URL``;
testcontainers (``redis:7``) when a Docker engine answers; :class:`twopc.faultinject.LocalRedis`
(appendfsync always) from the local redis-server.  ``redis_server``: that LocalRedis, else None.
``r``: a redis-py client on it per test (bytes replies).  Started on first use only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import redis as redis_py

from twopc.faultinject import LocalRedis, ServerUnavailable

from ._docker import docker_available

_REDIS_HELP = (
    "No redis for the tests. Either set TWOPC_TEST_REDIS_URL=redis://host:port/0, run a "
    "Docker engine (testcontainers), or install redis-server (`make redis`)."
)


@pytest.fixture(scope="session")
def _redis() -> Iterator[tuple[str, LocalRedis | None]]:
    url = os.environ.get("TWOPC_TEST_REDIS_URL")
    if url:
        yield url, None
        return
    if docker_available():
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


@pytest.fixture
def r(redis_url: str) -> Iterator[Any]:
    """A redis-py client of the test server (bytes replies)."""
    client = redis_py.Redis.from_url(redis_url)
    yield client
    client.close()
