"""``python -m twopc.recovery.demos.bench_summary``: the one table ``make bench`` ends with.

Every bench records its ratios into the run's results file (``TWOPC_BENCH_RESULTS``); this
prints each with its target (:data:`TARGETS`) and MET/MISSED, the machine, the date and the load."""

from __future__ import annotations

import datetime
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ._bench_results import RESULTS_ENV, results_path

__all__ = ["TARGETS", "Target", "judge", "machine", "main", "summary_table"]


@dataclass(frozen=True)
class Target:
    """A recorded figure and its target: *better* says which way is good; *goal* None: no target."""

    label: str
    better: Literal["higher", "lower"]
    goal: float | None
    unit: str = "x"


#: every judged figure of ``make bench``, in the order of the table
TARGETS: dict[str, Target] = {
    "first_write.twopc_vs_noop": Target(
        "first write, whole process: twopc-jdbc / no-op Python data source (time)", "lower", 1.10),
    "first_write.write_vs_noop": Target(
        "  the same, the write alone (the session's start and stop left out)", "lower", 1.15),
    "first_write.twopc_vs_spark_jdbc": Target(
        "first write, whole process: twopc-jdbc / Spark's JDBC writer (time)", "lower", None),
    "micro_batch.twopc_vs_noop": Target(
        "micro-batch of 1,000 rows: twopc-jdbc / no-op Python stream sink (time)", "lower", 1.1),
    "micro_batch.twopc_vs_foreach_batch": Target(
        "micro-batch of 1,000 rows: twopc-jdbc / foreachBatch + Spark JDBC (time)", "lower", None),
    "throughput.prepared_vs_spark": Target(
        "throughput: twopc-jdbc prepared / best Spark JDBC writer (rows/s)", "higher", 1.5),
    "throughput.prepared_vs_copy": Target(
        "throughput: twopc-jdbc prepared / raw COPY (rows/s)", "higher", 0.7),
    "throughput.dropin_vs_spark_rw": Target(
        "throughput: twopc-jdbc drop-in / Spark JDBC, reWriteBatchedInserts (rows/s)", "higher", 1.5),
    "throughput.dropin_vs_copy": Target(
        "throughput: twopc-jdbc drop-in / raw COPY (rows/s)", "higher", 0.8),
    "throughput.prepared_vs_parallel_copy": Target(
        "throughput: prepared / raw binary COPY, a stream per task, in parallel (rows/s)", "higher", 0.9),
    "throughput.dropin_vs_parallel_copy": Target(
        "throughput: drop-in / raw binary COPY, a stream per task, in parallel (rows/s)", "higher", 0.9),
    "throughput.noop_vs_parallel_copy": Target(
        "  the same, a no-op Python data source (Spark's ceiling for a Python sink)", "higher", None),
    "small_write.dropin_vs_spark_jdbc": Target(
        "20k rows: twopc-jdbc drop-in / Spark's JDBC writer (time)", "lower", 1.3),
    "protocol.prepared_ms": Target(
        "protocol cost per micro-batch, prepared mode, 2 tasks", "lower", 25.0, "ms"),
    "protocol.staging_ms": Target(
        "protocol cost per micro-batch, staging mode, 2 tasks", "lower", 25.0, "ms"),
    "memory.postgres_prepared_5m_vs_05m": Target(
        "peak RSS of a task's Python worker, 5M rows / 0.5M rows: twopc-postgres prepared", "lower", 1.2),
    "memory.jdbc_dropin_5m_vs_05m": Target(
        "peak RSS of a task's Python worker, 5M rows / 0.5M rows: twopc-jdbc drop-in", "lower", 1.2),
    "memory.noop_5m_vs_05m": Target(
        "  the same, a no-op Python data source (Spark's floor for a Python sink)", "lower", None),
    "partitions.commit_200_vs_floor": Target(
        "driver commit, 200 partitions / the same COMMIT PREPAREDs without protocol (time)", "lower", 1.3),
    "stream.exactly_vs_at_least": Target(
        "Redis Stream -> PostgreSQL: exactly-once / at-least-once (entries/s)", "higher", 1.15),
    "stream.batches_exactly_vs_at_least": Target(
        "  the same, micro-batches alone (the queries' start left out)", "higher", None),
    "stream.start_exactly_vs_python_floor": Target(
        "  the same, query start: exactly-once / a no-op Python source (time)", "lower", None),
    "redis.sink_vs_plain_per_row": Target(
        "twopc-redis / pipelined writes, one command per effect (rows/s)", "higher", None),
    "redis.sink_vs_plain_presummed": Target(
        "twopc-redis / pipelined writes of the same effects, counters pre-summed (rows/s)", "higher", 0.9),
    "mariadb.xa_commit_one_by_one_vs_batched": Target(
        "MariaDB: a batch's XA COMMITs one round trip each / in one query (time)", "higher", 1.0),
    "composite.vs_two_writes": Target(
        "composite PostgreSQL + Redis / the two formats one after the other (rows/s)", "higher", 1.0),
    "http.vs_plain_async": Target(
        "twopc-http, 20k requests / plain async sends, same client and concurrency (requests/s)", "higher", 0.8),
}


def judge(target: Target | None, value: float) -> str:
    """MET or MISSED against *target*; ``-`` when the figure has no target."""
    if target is None or target.goal is None:
        return "-"
    ok = value >= target.goal if target.better == "higher" else value <= target.goal
    return "MET" if ok else "MISSED"


def _goal_text(target: Target | None) -> str:
    if target is None or target.goal is None:
        return "none"
    unit = target.unit if target.unit == "x" else " " + target.unit
    return f"{'>=' if target.better == 'higher' else '<='} {target.goal:g}{unit}"


def machine() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown CPU")
    return f"{os.cpu_count()} cores, {model}"


def summary_table(records: Iterable[Mapping[str, Any]], host: str, date: str) -> str:
    """One line per target of :data:`TARGETS` (``not measured`` without a record), then recorded keys
    without a target. The last record of a key wins."""
    latest = {str(r["key"]): r for r in records}
    keys = list(TARGETS) + [k for k in latest if k not in TARGETS]
    loads = [float(r["load"]) for r in latest.values() if "load" in r]
    head = (f"bench summary: {host}; {date}"
            + (f"; load average while measured {min(loads):.2f} .. {max(loads):.2f}" if loads else ""))
    lines = [head, f"  {'figure':<76} {'measured':>10}  {'target':>9}  {'verdict':<7} detail"]
    for key in keys:
        target = TARGETS.get(key)
        label = target.label if target else key
        rec = latest.get(key)
        if rec is None:
            lines.append(f"  {label:<76} {'-':>10}  {_goal_text(target):>9}  {'-':<7} not measured")
            continue
        value = float(rec["value"])
        unit = target.unit if target else "x"
        shown = f"{value:.2f}{'x' if unit == 'x' else ' ' + unit}"
        lines.append(f"  {label:<76} {shown:>10}  {_goal_text(target):>9}  {judge(target, value):<7} "
                     f"{rec.get('detail', '')}")
    return "\n".join(lines)


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    path = Path(args[0]) if args else results_path()
    if path is None:
        print(f"bench_summary: no results file: set {RESULTS_ENV} or pass its path", file=sys.stderr)
        return 2
    print(summary_table(read_records(path), machine(), datetime.date.today().isoformat()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
