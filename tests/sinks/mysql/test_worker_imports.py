"""What the MariaDB/MySQL sink costs the Spark Python worker that commits a ``twopc-jdbc``
write: committing XA transactions imports neither pyarrow nor pandas (pyarrow is about
0.15 s of that worker's start, on the write's critical path)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests._fresh_worker import commit_in_fresh_worker


@pytest.fixture
def maria_engine(mariadb_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(mariadb_url)
    yield engine
    engine.dispose()


def test_the_worker_that_commits_a_prepared_jdbc_write_does_not_import_pyarrow(
        mariadb_url: str, maria_engine: sa.Engine, tmp_path: Path) -> None:
    assert commit_in_fresh_worker(mariadb_url, maria_engine, tmp_path) == {"pyarrow": False, "pandas": False}
