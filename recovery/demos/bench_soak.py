"""``make soak``: whether twopc's cost stays flat as a streaming query runs on (not a test).

Micro-batches of 10 rows into ``twopc-postgres``, ``twopc-redis`` and ``twopc-jdbc``, and batch
writes of the ``twopc-jdbc`` drop-in, all at once in one driver (each PostgreSQL writer in a
database of its own), recording what could grow (see docs/development/benchmarks.md).
A figure that grows is a bug, whatever the verdict."""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._bench_common import (
    ROW_EXPRS,
    bench_main_setup,
    create_table,
    libpq_dsn,
    module_parser,
    proc_status,
    processes,
    rss_kib,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["main"]

RETAIN = 100
ROWS_PER_BATCH = 10
SELECT = ("value AS id", "concat('payload-', value) AS payload", "cast(value AS double) * 0.5 AS amount",
          "timestamp AS ts")
REDIS_MAPPING = ('[{"op": "INCRBY", "key": "{{soak}}:rows", "by": 1}, '
                 '{"op": "HSET", "key": "{{soak}}:last", "columns": ["payload"]}]')
LEDGER_TABLES = ("twopc_markers", "twopc_ledger", "twopc_batches")


@dataclass
class Record:
    """One row of the table: the state after *batch* micro-batches."""

    batch: int
    cost_ms: float
    files: int
    kbytes: float
    rows: dict[str, int]
    driver_mb: float
    jvm_mb: float
    heap_mb: float
    agent_mb: float | None


@dataclass
class Leg:
    name: str
    records: list[Record] = field(default_factory=list)
    seconds: float = 0.0


def _rss_mb(pid: int | None) -> float | None:
    status = {} if pid is None else proc_status(pid)
    return rss_kib(status) / 1024 if b"VmRSS" in status else None


def _ledger_files(checkpoint: Path | None) -> tuple[int, int]:
    """Files and bytes under the checkpoint's ``twopc/`` (a file removed while listing is not counted)."""
    if checkpoint is None:
        return 0, 0
    count = nbytes = 0
    for folder, _dirs, names in os.walk(checkpoint / "twopc"):
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                nbytes += os.stat(os.path.join(folder, name)).st_size
                count += 1
    return count, nbytes


def _table_rows(dsn: str) -> dict[str, int]:
    import psycopg
    with psycopg.connect(dsn, autocommit=True) as conn:
        there = {t for t in LEDGER_TABLES if conn.execute("SELECT to_regclass(%s)", (t,)).fetchall() != [(None,)]}
        return {t: int(conn.execute(f'SELECT count(*) FROM "{t}"').fetchall()[0][0]) if t in there else 0
                for t in LEDGER_TABLES}


def _redis_markers(url: str) -> dict[str, int]:
    import redis
    client: Any = redis.Redis.from_url(url)
    sizes = {b"zset": client.zcard, b"hash": client.hlen, b"set": client.scard, b"list": client.llen}
    try:
        markers = members = 0
        for key in client.scan_iter(count=1000):
            if key in (b"{soak}:rows", b"{soak}:last"):  # the mapping's own keys
                continue
            size = sizes.get(client.type(key))
            n = int(size(key)) if size is not None else 1
            if key.endswith(b":committed"):  # the commit markers: a sorted set by batch id
                markers += n
            else:
                members += n
        return {"redis markers": markers, "other twopc members": members, "redis keys": int(client.dbsize())}
    finally:
        client.close()


def _database(pg: Any, name: str) -> str:
    """Create database *name*, owned by its user, on LocalPostgres *pg*, with the soak's table; its URL."""
    import psycopg
    import sqlalchemy as sa
    with psycopg.connect(pg.admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" OWNER "{sa.make_url(pg.url).username}"')
    there = sa.make_url(pg.url).set(database=name).render_as_string(hide_password=False)
    create_table(there, "soak")
    return there


def _agent_pid(jvm_pid: int) -> int | None:
    """The driver agent of the driver whose JVM is *jvm_pid*, if one runs (a process of twopc's agent
    module naming that pid)."""
    for pid, argv in processes():
        if any(a.endswith(b"_agent.py") for a in argv) and any(f'"pid": {jvm_pid},'.encode() in a for a in argv):
            return int(pid)
    return None


class _Progress:
    """addBatch per batch id of each running query, from Spark's progress events."""

    def __init__(self, spark: SparkSession) -> None:
        from pyspark.sql.streaming.listener import JStreamingQueryListener
        self.durations: dict[str, dict[int, float]] = {}  # by run id: a stopped run's events may come late
        self.lock = threading.Lock()
        progress = self

        class Listener(JStreamingQueryListener):
            """Reads the four figures it needs off Spark's event: PySpark's whole conversion takes dozens of
            Py4J calls, and with three queries Spark's listener thread falls minutes behind."""

            def __init__(self) -> None:  # no Python listener behind it
                pass

            def onQueryStarted(self, jevent: Any) -> None:  # noqa: N802 - Spark's method name
                pass

            def onQueryProgress(self, jevent: Any) -> None:  # noqa: N802 - Spark's method name
                p = jevent.progress()
                if p.numInputRows() > 0:
                    add_batch = p.durationMs().get("addBatch")
                    with progress.lock:
                        progress.durations.setdefault(p.runId().toString(), {})[p.batchId()] = float(add_batch or 0)

            def onQueryIdle(self, jevent: Any) -> None:  # noqa: N802 - Spark's method name
                pass

            def onQueryTerminated(self, jevent: Any) -> None:  # noqa: N802 - Spark's method name
                pass

        jvm: Any = spark.sparkContext._jvm  # the soak runs a classic session
        self.listener = jvm.PythonStreamingQueryListenerWrapper(Listener())
        spark._jsparkSession.streams().addListener(self.listener)

    def latest(self, run_id: str) -> int:
        with self.lock:
            return max(self.durations.get(run_id, {}), default=-1)

    def window(self, run_id: str, lo: int, hi: int) -> float:
        with self.lock:
            values = [v for b, v in self.durations.get(run_id, {}).items() if lo <= b < hi]
        return statistics.median(values) if values else float("nan")


@dataclass(frozen=True)
class Jvm:
    """Spark's JVM of this driver: its pid, and its heap read after a full collection."""

    pid: int
    gateway: Any  # py4j's view of the JVM (``SparkContext._jvm``)

    def collect(self) -> float:
        """The heap in use after ``System.gc()``, MiB: comparable, unlike RSS between collections."""
        self.gateway.java.lang.System.gc()
        usage = self.gateway.java.lang.management.ManagementFactory.getMemoryMXBean().getHeapMemoryUsage()
        return float(usage.getUsed()) / 2**20


def _snapshot(batch: int, cost_ms: float, checkpoint: Path | None, rows: dict[str, int], jvm: Jvm) -> Record:
    files, nbytes = _ledger_files(checkpoint)
    heap = jvm.collect()
    return Record(batch, cost_ms, files, nbytes / 1024, rows, _rss_mb(os.getpid()) or 0.0,
                  _rss_mb(jvm.pid) or 0.0, heap, _rss_mb(_agent_pid(jvm.pid)))


@dataclass
class _Stream:
    """A streaming query of the soak, and the record it takes next."""

    leg: Leg
    query: Any  # pyspark's StreamingQuery
    checkpoint: Path
    rows: Callable[[], dict[str, int]]
    mark: int
    started: float = field(default_factory=time.monotonic)


def start_stream(spark: SparkSession, name: str, options: dict[str, str], checkpoint: Path,
                 rows: Callable[[], dict[str, int]], every: int) -> _Stream:
    """Start a streaming query of 10-row micro-batches into format *name* with *options*."""
    stream = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", ROWS_PER_BATCH)
              .option("numPartitions", 1).load().selectExpr(*SELECT))
    query = (stream.writeStream.format(name).options(**options).trigger(processingTime="0 seconds")
             .option("checkpointLocation", str(checkpoint)).option("minBatchesToRetain", str(RETAIN)).start())
    return _Stream(Leg(name), query, checkpoint, rows, every)


def record_streams(streams: Sequence[_Stream], progress: _Progress, batches: int, every: int, jvm: Jvm,
                   writes_done: threading.Event) -> None:
    """Record each query every *every* micro-batches up to *batches*, then wait for the batch writes: every
    query runs until the last one recorded its last, so each works under the same load throughout."""
    while any(s.mark <= batches for s in streams) or not writes_done.is_set():
        for s in streams:
            if s.query.exception() is not None:
                raise SystemExit(f"soak: {s.leg.name} failed: {s.query.exception()}")
            run_id = str(s.query.runId)
            if s.mark <= batches and progress.latest(run_id) + 1 >= s.mark:
                record = _snapshot(s.mark, progress.window(run_id, s.mark - every, s.mark), s.checkpoint, s.rows(),
                                   jvm)
                s.leg.records.append(record)
                _print_record(s.leg.name, record)
                if s.mark + every > batches:
                    s.leg.seconds = time.monotonic() - s.started
                s.mark += every
        time.sleep(0.2)


def soak_jdbc_writes(spark: SparkSession, jdbc: dict[str, str], table: str, writes: int,
                     every: int, rows: Callable[[], dict[str, int]], jvm: Jvm, leg: Leg,
                     streams_done: threading.Event, done: threading.Event) -> None:
    """*writes* batch writes of 10 rows through ``twopc-jdbc`` with Spark's JDBC options only, recording
    every *every* into *leg*, then more (unrecorded) until *streams_done*; sets *done* once recorded."""
    from ._bench_common import append
    # Spark looks the format up in the active session, which this thread's JVM thread lacks
    spark._get_j_spark_session_class(spark.sparkContext._jvm).setActiveSession(spark._jsparkSession)
    df = spark.range(ROWS_PER_BATCH, numPartitions=1).selectExpr(*ROW_EXPRS).cache()
    df.count()
    times: list[float] = []
    started = time.monotonic()
    try:
        i = 0
        while i < writes or not streams_done.is_set():
            t = time.perf_counter()
            append(df, "twopc-jdbc", table, jdbc)
            times.append(time.perf_counter() - t)
            i += 1
            if i <= writes and i % every == 0:
                record = _snapshot(i, statistics.median(times[-every:]) * 1000, None, rows(), jvm)
                leg.records.append(record)
                _print_record(leg.name, record)
                if i + every > writes:
                    leg.seconds = time.monotonic() - started
                    done.set()
    finally:
        done.set()
        df.unpersist()


def _print_record(name: str, r: Record) -> None:
    rows = ", ".join(f"{k} {v}" for k, v in r.rows.items())
    agent = f", agent {r.agent_mb:.0f} MB" if r.agent_mb is not None else ""
    print(f"soak: {name} @ {r.batch}: {r.cost_ms:.1f} ms/batch, twopc/ {r.files} files {r.kbytes:.0f} KiB, {rows}, "
          f"driver {r.driver_mb:.0f} MB, JVM {r.jvm_mb:.0f} MB (heap {r.heap_mb:.0f} MB){agent}", flush=True)


def _flat(values: Sequence[float], slack: float = 0.10, plus: float = 0.0) -> tuple[bool, str]:
    if not values:
        return True, "-"
    first, last = values[0], values[-1]
    ok = last <= first * (1 + slack) + plus
    return ok, f"{first:g} -> {last:g}" + (f" ({last / first:.2f}x)" if first else "")


def report(legs: Sequence[Leg], batches: int, every: int) -> bool:
    """Print the table and the targets; whether every target is met."""
    from ._bench_common import verdict
    print(f"\nsoak: {ROWS_PER_BATCH} rows a micro-batch, trigger processingTime 0, minBatchesToRetain {RETAIN}, "
          f"recorded every {every}; load average {os.getloadavg()[0]:.2f} (1 min) at the end")
    all_ok = True
    for leg in legs:
        if not leg.records:
            print(f"\n{leg.name}: no record")
            continue
        keys = list(leg.records[0].rows)
        print(f"\n{leg.name} ({leg.records[-1].batch} micro-batches in {leg.seconds:.0f} s)")
        print(f"  {'batch':>6} {'ms/batch':>9} {'files':>6} {'KiB':>7} " + " ".join(f"{k:>14}" for k in keys)
              + f" {'driver MB':>10} {'JVM MB':>7} {'heap MB':>8} {'agent MB':>9}")
        for r in leg.records:
            agent = f"{r.agent_mb:9.0f}" if r.agent_mb is not None else f"{'-':>9}"
            print(f"  {r.batch:>6} {r.cost_ms:9.1f} {r.files:>6} {r.kbytes:7.0f} "
                  + " ".join(f"{r.rows[k]:>14}" for k in keys)
                  + f" {r.driver_mb:10.0f} {r.jvm_mb:7.0f} {r.heap_mb:8.0f} {agent}")
        # the ledger's size is judged from the first record after the retention filled
        filled = [r for r in leg.records if r.batch >= 2 * RETAIN] or leg.records
        checks = [
            ("cost per micro-batch, last record within 10% of the first", _flat([r.cost_ms for r in leg.records])),
            ("twopc/ files bounded by the retention", _flat([r.files for r in filled], plus=2)),
            ("twopc/ bytes bounded by the retention", _flat([r.kbytes for r in filled], plus=8)),
            *((f"{k} rows bounded by the retention", _flat([r.rows[k] for r in filled], plus=2)) for k in keys),
            ("driver (Python) RSS within 10%", _flat([r.driver_mb for r in leg.records])),
            ("driver (JVM) RSS after a full GC within 10%", _flat([r.jvm_mb for r in leg.records])),
            ("driver (JVM) heap in use after a full GC within 10%", _flat([r.heap_mb for r in leg.records])),
        ]
        agents = [r.agent_mb for r in leg.records if r.agent_mb is not None]
        if agents:
            checks.append(("driver agent RSS within 10%", _flat(agents)))
        for label, (ok, text) in checks:
            all_ok &= ok
            print(f"  target: {label:<58} {text:<28} {verdict(ok)}")
    if legs and legs[0].records and legs[0].records[-1].batch < 5000:
        print(f"\nsoak: {batches} micro-batches per query, fewer than the 5,000 the targets are set for "
              f"(--batches): a slow growth may not show yet")
    return all_ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("bench_soak", __doc__)
    parser.add_argument("--batches", type=int, default=5000, help="micro-batches per streaming query")
    parser.add_argument("--every", type=int, default=500, help="micro-batches between two records")
    parser.add_argument("--jdbc-writes", type=int, default=None,
                        help="batch writes of the no-checkpoint run (default: --batches; 0 skips it)")
    parser.add_argument("--sinks", default="postgres,redis,jdbc",
                        help="streaming queries to run: postgres, redis, jdbc (comma-separated)")
    args = parser.parse_args(argv)
    if args.every <= 0 or args.batches < args.every:
        parser.error("--batches must be at least --every, and --every positive")
    writes = args.batches if args.jdbc_writes is None else args.jdbc_writes
    bench_main_setup()
    from twopc import faultinject

    from ._bench_common import bench_session, jdbc_options, jvm_pid
    keys = [s.strip() for s in args.sinks.split(",") if s.strip()]
    if unknown := [k for k in keys if k not in ("postgres", "redis", "jdbc")]:
        parser.error(f"unknown sink {unknown[0]!r}: choose from postgres, redis, jdbc")
    databases = [*(k for k in keys if k != "redis"), *(["batch"] if writes >= args.every else [])]
    with (tempfile.TemporaryDirectory(prefix="twopc-soak-") as work, faultinject.LocalPostgres() as pg,
          contextlib.ExitStack() as stack):
        redis_server = stack.enter_context(faultinject.LocalRedis(appendfsync="always")) if "redis" in keys else None
        urls = {key: _database(pg, f"soak_{key}") for key in databases}  # each its own ledger tables
        # Spark's status store keeps the last 1,000 SQL executions (one per micro-batch) and
        # jobs: a JVM heap that grows for the first 1,000 batches, then stays. Keeping 100
        # leaves what grows after the first record to the pipeline.
        spark = bench_session("twopc-soak", sql_shuffle_partitions="1", sql_ui_retainedExecutions="100",
                              ui_retainedJobs="100", ui_retainedStages="100")
        jvm = Jvm(jvm_pid(spark), spark.sparkContext._jvm)
        progress = _Progress(spark)
        streams: list[_Stream] = []
        for key in keys:
            if key == "redis" and redis_server is not None:
                options = {"url": redis_server.url, "mapping": REDIS_MAPPING, "hashTag": "soak"}
                rows: Callable[[], dict[str, int]] = functools.partial(_redis_markers, redis_server.url)
            else:
                options = {**jdbc_options(urls[key]), "dbtable": "soak"}
                rows = functools.partial(_table_rows, libpq_dsn(urls[key]))
            print(f"soak: twopc-{key}, {args.batches} micro-batches ...", flush=True)
            streams.append(start_stream(spark, f"twopc-{key}", options, Path(work) / f"ck-{key}", rows, args.every))
        writes_leg = Leg("twopc-jdbc, batch writes, no checkpoint")
        streams_done, writes_done = threading.Event(), threading.Event()
        writer = None
        if "batch" in urls:
            print(f"soak: twopc-jdbc, {writes} batch writes without a checkpoint ...", flush=True)
            writer = threading.Thread(target=soak_jdbc_writes, name="soak-batch-writes", daemon=True, args=(
                spark, jdbc_options(urls["batch"]), "soak", writes, args.every,
                functools.partial(_table_rows, libpq_dsn(urls["batch"])), jvm, writes_leg, streams_done, writes_done))
            writer.start()
        else:
            writes_done.set()
        try:
            record_streams(streams, progress, args.batches, args.every, jvm, writes_done)
        finally:
            streams_done.set()
            for s in streams:
                s.query.stop()
            if writer is not None:
                writer.join()
        legs = [s.leg for s in streams] + ([writes_leg] if writer is not None else [])
        spark.stop()
    report(legs, args.batches, args.every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
