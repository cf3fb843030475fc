"""A reused Spark Python worker freezes its heap at the second use of a twopc entry point, so
the full collection PySpark's daemon runs after every use walks only what later uses allocate
(:mod:`twopc._worker_heap`); the application's own process never freezes."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

from twopc import _worker_heap


def test_a_daemon_worker_freezes_its_heap_at_its_second_use(spark: Any) -> None:
    def uses(_rows: Iterator[Any]) -> Iterator[tuple[int, int]]:
        import gc

        from twopc import _worker_heap  # the worker's own module, with its own count of uses
        for _ in range(2):
            _worker_heap.note_worker_use()
            yield _worker_heap._uses, gc.get_freeze_count()

    seen = spark.sparkContext.parallelize(range(2), 2).mapPartitions(uses).collect()
    assert len(seen) == 4 and any(n >= 2 for n, _ in seen), seen
    # a worker reused from an earlier test may have counted uses already: frozen exactly from the second on
    assert all((frozen > 0) == (n >= 2) for n, frozen in seen), seen


def test_the_applications_process_never_freezes() -> None:
    before = gc.get_freeze_count()
    for _ in range(3):
        _worker_heap.note_worker_use()
    assert gc.get_freeze_count() == before == 0
