"""``make bench``, memory per task: the peak RSS (sampled every 20 ms) of the Python worker of one task
writing 0.5M rows and one writing 5M, through ``twopc-postgres`` (prepared) and the ``twopc-jdbc``
drop-in; fresh workers per write. A task streams its rows: target 5M / 0.5M at most 1.2x."""

from __future__ import annotations

import functools
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ._bench_common import bench_main_setup, jvm_pid, module_parser, proc_status, processes, rss_kib, server_url

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["FORMATS", "main", "peak_worker_rss"]

#: the rows of the small and the large write
SIZES = (500_000, 5_000_000)
#: what a worker of a task runs (its command line names it)
TASK_WORKER = b"pyspark.worker"
#: the formats measured: (name shown, key of the summary table's target)
FORMATS = {"postgres": ("twopc-postgres (prepared, checkpoint)", "memory.postgres_prepared_5m_vs_05m"),
           "jdbc": ("twopc-jdbc drop-in (no checkpoint)", "memory.jdbc_dropin_5m_vs_05m"),
           "noop": ("no-op Python data source (Spark's floor)", "memory.noop_5m_vs_05m")}


def _task_workers(jvm_pid: int) -> dict[str, int]:
    """The Python task workers of JVM *jvm_pid* (its ``pyspark.daemon`` included), RSS in KiB."""
    out = {}
    for name, argv in processes():
        if TASK_WORKER not in argv or b"pyspark.daemon" not in argv:
            continue
        status = proc_status(name)
        parent = status.get(b"PPid", b"").strip()
        grandparent = proc_status(parent.decode()).get(b"PPid", b"").strip() if parent else b""
        if str(jvm_pid).encode() in (parent, grandparent):
            out[name] = rss_kib(status)
    return out


def peak_worker_rss(write: Callable[[], object], jvm_pid: int, every: float = 0.02) -> tuple[float, float]:
    """Run *write*; return the highest RSS of a task worker while it ran (MiB) and its seconds."""
    peak = 0
    done = threading.Event()
    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max([peak, *_task_workers(jvm_pid).values()])
            done.wait(every)
    sampler = threading.Thread(target=sample, name="rss-sampler", daemon=True)
    sampler.start()
    started = time.perf_counter()
    try:
        write()
    finally:
        seconds = time.perf_counter() - started
        done.set()
        sampler.join()
    return peak / 1024, seconds


def bench_memory(url: str, work: Path, sizes: Sequence[int] = SIZES, repeat: int = 1,
                 formats: Sequence[str] = tuple(FORMATS)) -> dict[str, dict[int, list[float]]]:
    """Per format and size: the peak RSS (MiB) of the task's worker, *repeat* writes each."""
    from ._bench_common import ROW_EXPRS, append, bench_session, create_table, jdbc_options
    from ._noop import NOOP_FORMAT, NoopDataSource
    spark = bench_session("twopc-bench-memory", python_worker_reuse="false")
    spark.dataSource.register(NoopDataSource)
    driver_jvm = jvm_pid(spark)
    jdbc = jdbc_options(url)
    out: dict[str, dict[int, list[float]]] = {}
    def prepared(df: DataFrame, table: str, n: int) -> None:
        append(df, "twopc-postgres", table, jdbc, checkpointLocation=str(work / f"ck-{table}"), txnVersion=str(n))
    def drop_in(df: DataFrame, table: str, _n: int) -> None:
        append(df, "twopc-jdbc", table, jdbc)
    def noop(df: DataFrame, _table: str, _n: int) -> None:
        df.write.format(NOOP_FORMAT).mode("append").save()
    chosen = {"postgres": prepared, "jdbc": drop_in, "noop": noop}
    writes: dict[str, Callable[[DataFrame, str, int], None]] = {FORMATS[key][0]: chosen[key] for key in formats}
    try:
        for i, (name, write) in enumerate(writes.items()):
            table = f"bench_memory_{i}"
            create_table(url, table)
            write(spark.range(1000, numPartitions=1).selectExpr(*ROW_EXPRS), table, 0)  # warm-up
            for r in range(repeat):
                for size in sizes:
                    df = spark.range(size, numPartitions=1).selectExpr(*ROW_EXPRS)
                    version = 1 + r * len(sizes) + sizes.index(size)
                    mib, seconds = peak_worker_rss(functools.partial(write, df, table, version), driver_jvm)
                    out.setdefault(name, {}).setdefault(size, []).append(mib)
                    print(f"bench: memory, {name:<40} {size:>9,} rows in one task: worker peak RSS {mib:6.1f} MiB "
                          f"({seconds:.1f} s)", flush=True)
    finally:
        spark.stop()
    return out


def report(results: dict[str, dict[int, list[float]]]) -> None:
    """Print the table and record each format's ratio for the summary."""
    from ._bench_results import record
    from .bench_summary import TARGETS, judge
    print("\npeak RSS of one task's Python worker (MiB, the highest of the runs):")
    keys = dict(FORMATS.values())
    for name, by_size in results.items():
        small, large = (max(by_size[s]) for s in sorted(by_size)[:2])
        ratio = large / small
        target = TARGETS[keys[name]]
        goal = f"target <= {target.goal:g}x {judge(target, ratio)}" if target.goal is not None else ""
        print(f"  {name:<40} {min(by_size):>9,} rows {small:7.1f}   {max(by_size):>9,} rows {large:7.1f}   "
              f"{ratio:5.2f}x   {goal}")
        record(keys[name], ratio, f"{large:.1f} MiB / {small:.1f} MiB, peak of {len(by_size[max(by_size)])} write(s) "
                                  f"each")


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("bench_memory", __doc__)
    parser.add_argument("--url", default=None, help="SQLAlchemy URL of a PostgreSQL (default: a throwaway server)")
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES),
                        help="rows of the writes compared (comma-separated; the first and the last are judged)")
    parser.add_argument("--repeat", type=int, default=1, help="writes of each size")
    parser.add_argument("--formats", default=",".join(FORMATS),
                        help=f"what to measure (comma-separated: {', '.join(FORMATS)})")
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(",") if s.strip())
    if len(sizes) < 2:
        parser.error("--sizes needs two sizes at least")
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    if not formats or set(formats) - set(FORMATS):
        parser.error(f"--formats: choose from {', '.join(FORMATS)}")
    bench_main_setup()
    from twopc.faultinject import LocalPostgres
    with tempfile.TemporaryDirectory(prefix="twopc-bench-memory-") as work, server_url(args.url, LocalPostgres) as url:
        results = bench_memory(url, Path(work), [sizes[0], sizes[-1]], max(1, args.repeat), formats)
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
