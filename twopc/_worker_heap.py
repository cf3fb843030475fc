"""Cheap collections in a reused Spark Python worker. PySpark's daemon runs a full :func:`gc.collect` after every
use of a reused worker (each task, plan and commit of every micro-batch), which with twopc's drivers loaded walks
about 85,000 long-lived objects: 50 ms of CPU a use, against 16 ms with PySpark alone. :func:`note_worker_use`
freezes them (:func:`gc.freeze`) at a worker's second use; never in the application's own process."""

import gc
import sys

__all__ = ["note_worker_use"]

_uses = 0


def note_worker_use() -> None:
    """Count a use of this process by a twopc entry point; at the second, in a worker forked by
    ``python -m pyspark.daemon`` (which has just collected), move every object to the permanent generation."""
    global _uses
    _uses += 1
    if _uses == 2 and getattr(getattr(sys.modules["__main__"], "__spec__", None), "name", None) == "pyspark.daemon":
        gc.freeze()
