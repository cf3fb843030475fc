"""Cheap garbage collections in a reused Spark Python worker.

PySpark's daemon runs a full :func:`gc.collect` after every use of a reused worker: after each task,
each plan and each commit of every micro-batch. With twopc's sinks loaded (SQLAlchemy, psycopg,
pyarrow, twopc's own modules) that collection walks about 85,000 long-lived objects, 50 ms of CPU
each time, against 16 ms with PySpark alone, and it runs while the JVM goes on with the micro-batch.
:func:`note_worker_use`, called as a twopc entry point starts in a worker, freezes what the
worker's first use left (:func:`gc.freeze`; the daemon has just collected) at the start of its
second, so that later collections walk only what later uses allocate. Only in a worker the daemon
forked: never in the application's own process."""

from __future__ import annotations

import gc
import sys

__all__ = ["note_worker_use"]

_uses = 0


def note_worker_use() -> None:
    """Count a use of this process by a twopc entry point; at the second, in a worker forked by
    PySpark's daemon, move every object it holds to the permanent generation."""
    global _uses
    _uses += 1
    if _uses == 2 and _in_daemon_worker():
        gc.freeze()


def _in_daemon_worker() -> bool:
    """Whether this process runs ``python -m pyspark.daemon`` (a forked worker keeps its ``__main__``)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == "pyspark.daemon"
