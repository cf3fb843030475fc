"""Whether a Docker engine answers, for the server fixtures (fix_postgres, fix_redis, fix_mariadb):
with one, they start their server in a container (testcontainers)."""

from __future__ import annotations

__all__ = ["docker_available"]


def docker_available() -> bool:
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
