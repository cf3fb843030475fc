"""``python -m twopc.testing.microjob SPEC``: the randomized schedules' job, playing Spark's part
without a JVM (a restart costs one interpreter start). The data source is built as Spark builds
it (``streamWriter``: claim, validation, recovery); each micro-batch's Parquet file is split into
*n* partitions (*n* cycling per run), each written by a forked worker through
:meth:`twopc.spark._writer.WriterCore.write_partition` (with the executor's fault points),
retried up to three attempts; the driver calls ``commit`` (``abort`` on failure) and records the
batch in its own commit log; a restart replays the rest. No scheduler, speculation or JVM: the
crash matrix (:func:`twopc.testing.run_crash_matrix`) runs the real thing.

*SPEC* (JSON, mode 0600, from :func:`twopc.testing.run_schedule`): ``sink`` (``module:Class``),
``format``, ``options`` (secrets included), ``schema`` (Spark JSON), ``input``, ``checkpoint``,
``partitions``, ``runs_file``, optionally ``coordinator`` (``module:Class`` replacing
:class:`twopc.CommitCoordinator`: how the kit's tests prove the suite catches a broken one)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from .job import _record_run, append_line, progress, read_spec

__all__ = ["main"]

#: Attempts per task before the batch fails (Spark's ``spark.task.maxFailures`` of local[2,3]).
MAX_ATTEMPTS = 3


def _write(core: Any, path: str, partitions: int, partition: int, batch_id: int, attempt: int,
           number: int) -> Any:
    """One task attempt in a worker: its round-robin share of the rows, written."""
    import pyarrow.parquet as pq
    table = pq.read_table(path)
    rows = table.take([i for i in range(table.num_rows) if i % partitions == partition])
    return core.write_partition(iter(rows.to_batches()), batch_id, partition, attempt, number)


def _run_tasks(core: Any, path: str, partitions: int, batch_id: int, attempts: list[int]) -> list[Any]:
    """Every partition's task, retried up to :data:`MAX_ATTEMPTS` times; ``None`` for one that failed for good."""
    messages: dict[int, Any] = {}
    tries = dict.fromkeys(range(partitions), 0)
    todo = list(range(partitions))
    while todo:
        pool = ProcessPoolExecutor(max_workers=2, mp_context=get_context("fork"))
        try:
            futures = {}
            for p in todo:
                tries[p] += 1
                attempts[0] += 1
                futures[p] = pool.submit(_write, core, path, partitions, p, batch_id, attempts[0], tries[p] - 1)
            failed = []
            for p, fut in futures.items():
                try:
                    messages[p] = fut.result()
                except BrokenProcessPool:
                    failed.append(p)
                    progress(f"batch {batch_id} partition {p}: worker died")
                except Exception as exc:  # noqa: BLE001 - a failed task is retried, as Spark does
                    failed.append(p)
                    progress(f"batch {batch_id} partition {p} failed: {type(exc).__name__}: {exc}"[:390])
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        if any(tries[p] >= MAX_ATTEMPTS for p in failed):
            return [messages.get(p) for p in range(partitions)]
        todo = failed
    return [messages[p] for p in range(partitions)]


def main(argv: Sequence[str] | None = None) -> int:
    if (spec := read_spec(argv, "twopc.testing.microjob")) is None:
        return 2
    from pyspark.sql.types import StructType

    from twopc.spark import _write_commit

    from ._harness import _load, kit_data_source
    if spec.get("coordinator"):
        _write_commit.CommitCoordinator = _load(spec["coordinator"])  # type: ignore[attr-defined]  # the documented test seam
    run, partitions = _record_run(spec["runs_file"], spec["partitions"])
    source = kit_data_source(_load(spec["sink"]), spec.get("format"))
    options = {**spec["options"], "checkpointLocation": spec["checkpoint"]}
    writer = source(options).streamWriter(StructType.fromJson(spec["schema"]), False)
    log = Path(spec["checkpoint"], "microjob-commits")
    done = {int(x) for x in log.read_text().split()} if log.exists() else set()
    files = sorted(Path(spec["input"]).glob("part-*.parquet"))
    progress(f"run {run}, {partitions} partitions, {len(done)} of {len(files)} batches done")
    attempts = [run * 100_000]
    for batch_id, path in enumerate(files):
        if batch_id in done:
            continue
        messages = _run_tasks(writer, str(path), partitions, batch_id, attempts)
        if any(m is None for m in messages):
            writer.abort(messages, batch_id)
            progress(f"batch {batch_id} failed: a task failed {MAX_ATTEMPTS} times")
            return 1
        try:
            writer.commit(messages, batch_id)
        except Exception as exc:  # noqa: BLE001 - any failed commit ends the run as it ends Spark's query
            progress(f"batch {batch_id} commit failed: {type(exc).__name__}: {exc}"[:590])
            writer.abort(messages, batch_id)
            return 1
        append_line(log, str(batch_id))
        progress(f"batch {batch_id} committed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
