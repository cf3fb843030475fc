"""What the Redis Stream source's tests share: the rows of the reader's Arrow batches.
(Their fixtures ``r`` and ``prefix`` are in fix_redis.py and fix_common.py.)"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

__all__ = ["rows_of"]


def rows_of(batches: Iterable[pa.RecordBatch]) -> list[tuple[Any, ...]]:
    """The rows of the reader's Arrow batches, as tuples in column order."""
    return [tuple(row.values()) for b in batches for row in b.to_pylist()]
