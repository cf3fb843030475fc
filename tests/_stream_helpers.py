"""Fixtures of the Redis Stream source's tests: a client of the test Redis, and a key
prefix of its own per test (tests share one server)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pytest
import redis as redis_py

__all__ = ["prefix", "r", "rows_of"]


def rows_of(batches: Iterable[pa.RecordBatch]) -> list[tuple[Any, ...]]:
    """The rows of the reader's Arrow batches, as tuples in column order."""
    return [tuple(row.values()) for b in batches for row in b.to_pylist()]


@pytest.fixture
def r(redis_url: str) -> Iterator[Any]:
    """A redis-py client of the test server (bytes replies)."""
    client = redis_py.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def prefix() -> str:
    """A unique key prefix."""
    return f"t{uuid.uuid4().hex[:10]}"
