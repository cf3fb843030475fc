"""The SQL sinks' target databases (a plug-in listed in conftest's ``pytest_plugins``):
``db``, parametrized over PostgreSQL, SQLite (a file of the test's own) and MariaDB."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa


@pytest.fixture(params=["postgresql", "sqlite", "mariadb"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, sa.Engine]]:
    """A target database of each kind the SQL sinks serve: its URL and an engine on it (SQLite
    in a file of the test's own)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'target.db'}"
    else:
        url = request.getfixturevalue({"postgresql": "postgres_url", "mariadb": "mariadb_url"}[request.param])
    engine = sa.create_engine(url)
    yield url, engine
    engine.dispose()
